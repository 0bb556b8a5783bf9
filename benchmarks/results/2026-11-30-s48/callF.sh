#!/usr/bin/env bash
# Session 48, call F: velocity Verlet with md_accel's faster check_state (call E: ASE's np.allclose on the positions
# took 2.9 of the 22.9 ms per step at 32,000 atoms): benchmarks/ase_md.py, the copper MACE at 4,000 and 32,000
# atoms, float32, the default Calculator and cuda_graph=True / False, the timed steps under cProfile (15 functions).
# (Found in call H: ase_md.py ran the .mdx files in their own dtype, float64, not float32; README.md.)
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl 2> /dev/null
m=models/mace_cu/mace_cu.mdx
timeout $((400 - SECONDS)) python benchmarks/ase_md.py --calcs md_accel:$m,md_accel:$m+graph=on,md_accel:$m+graph=off \
  --sizes 4000,32000 --warmup 10 --steps 30 --host-profile 15 --out $R/ase_md > $R/ase_md.log 2>&1
echo "ase_md rc=$?"; grep -E "^\[ase_md\].*ms/step|^\|" $R/ase_md.log; grep -E "check_state|compare_atoms|isclose|synchronize|calculator.py.*\(calculate\)" $R/ase_md.log | cut -c1-160
smi_stop
(cd $OUT && tar czf results.tar.gz r)
