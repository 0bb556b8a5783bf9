#!/usr/bin/env bash
# Session 48, call E: where the ASE MD step's time goes beyond the Calculator's step (call D's copper MACE MD step at
# 32,000 atoms, 26.4 ms with the graph, against call C's 14.8 ms for the Calculator's step alone on another machine):
# on one machine, benchmarks/profile_step.py (the Calculator's step, graph on) and benchmarks/ase_md.py (velocity
# Verlet, graph on) with the timed steps under cProfile (the 25 functions with the most own host time), 4,000 and
# 32,000 atoms, float32.
# (Found in call H: ase_md.py ran the .mdx files in their own dtype, float64, not float32; README.md.)
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl 2> /dev/null
timeout 200 python benchmarks/profile_step.py --model models/mace_cu/mace_cu.mdx --sizes 4000,32000 --graph on \
  --steps 10 --repeats 30 --out $R/profile > $R/profile.log 2>&1
echo "profile rc=$?"; grep -E "^\| md_accel" $R/profile.log
timeout $((400 - SECONDS)) python benchmarks/ase_md.py --calcs md_accel:models/mace_cu/mace_cu.mdx+graph=on \
  --sizes 4000,32000 --warmup 10 --steps 30 --host-profile 25 --out $R/ase_md > $R/ase_md.log 2>&1
echo "ase_md rc=$?"; cat $R/ase_md.log | grep -v "^\s*$" | cut -c1-200 | head -90
smi_stop
(cd $OUT && tar czf results.tar.gz r)
