#!/usr/bin/env bash
# Session 48, call H: the GPU's kernel time per step in velocity Verlet against the Calculator's step alone (calls E-G:
# the MD step at 32,000 atoms waits ~16 ms per step for the GPU, where profile_step.py's step takes 14.8 ms in all
# at 84 % busy): on one machine, profile_step.py (graph on) and ase_md.py --kernel-profile (graph on; kernel time
# per step from torch.profiler over 30 more steps), the copper MACE at 32,000 atoms, float32.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl 2> /dev/null
m=models/mace_cu/mace_cu.mdx
timeout 200 python benchmarks/profile_step.py --model $m --sizes 32000 --graph on --steps 10 --repeats 30 \
  --out $R/profile > $R/profile.log 2>&1
echo "profile rc=$?"; grep -E "^\| md_accel|^ +[0-9.]+ ms " $R/profile.log | head -24
timeout $((400 - SECONDS)) python benchmarks/ase_md.py --calcs md_accel:$m+graph=on --sizes 32000 --warmup 10 \
  --steps 30 --kernel-profile 16 --out $R/ase_md > $R/ase_md.log 2>&1
echo "ase_md rc=$?"; grep -E "^\[ase_md\]|^    " $R/ase_md.log | cut -c1-160
smi_stop
(cd $OUT && tar czf results.tar.gz r)
