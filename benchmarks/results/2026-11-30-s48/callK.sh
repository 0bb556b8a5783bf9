#!/usr/bin/env bash
# Session 48, call K: the final Calculator (the first call on a size runs plain above the limit, then the trials;
# check_state; the numpy reuse check) on the GPU: tests/gpu/test_cuda_graph.py, then benchmarks/ase_md.py for the
# copper MACE at 4,000 and 32,000 atoms, float32, the default Calculator beside cuda_graph=True and False.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl 2> /dev/null
timeout 150 python -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_graph.py > $R/test_cuda_graph.log 2>&1
echo "tests rc=$?"; tail -2 $R/test_cuda_graph.log
m=models/mace_cu/mace_cu.mdx
timeout $((330 - SECONDS)) python benchmarks/ase_md.py --calcs md_accel:$m,md_accel:$m+graph=on,md_accel:$m+graph=off \
  --sizes 4000,32000 --steps 30 --dtype float32 --out $R/ase_md > $R/ase_md.log 2>&1
echo "ase_md rc=$?"; grep -E "^\[ase_md\]|^\|" $R/ase_md.log
smi_stop
(cd $OUT && tar czf results.tar.gz r)
