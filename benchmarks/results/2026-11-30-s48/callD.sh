#!/usr/bin/env bash
# Session 48, call D: the Calculator's measured choice between the CUDA graph and the plain step above
# AUTO_MAX_EDGES (md_accel/step_choice.py): tests/gpu/test_cuda_graph.py (its new test lowers the limit), then
# benchmarks/ase_md.py (velocity Verlet, neighbour list included) for the copper MACE and SevenNet-0 at 4,000 and
# 32,000 atoms, float32, the default Calculator beside cuda_graph=True and False (the default before this session
# ran the plain step above 300,000 edges), clocks logged.
# (Found in call H: ase_md.py ran the .mdx files in their own dtype, float64, not float32; README.md.)
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .gpu/sevennet0.mdx .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl 2> /dev/null
timeout 200 python -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_graph.py > $R/test_cuda_graph.log 2>&1
echo "tests rc=$?"; tail -3 $R/test_cuda_graph.log
calcs=""
for m in models/mace_cu/mace_cu.mdx .gpu/sevennet0.mdx; do
  calcs+="md_accel:$m,md_accel:$m+graph=on,md_accel:$m+graph=off,"
done
timeout $((560 - SECONDS)) python benchmarks/ase_md.py --calcs "$calcs" --sizes 4000,32000 --warmup 10 --steps 30 \
  --out $R/ase_md > $R/ase_md.log 2>&1
echo "ase_md rc=$?"; grep -E "^\[ase_md\]|^\|" $R/ase_md.log
smi_stop
(cd $OUT && tar czf results.tar.gz r)
