#!/usr/bin/env bash
# Session 48, call I: call D's comparison in float32. Call H found that ase_md.py ran an .mdx file in the file's own
# dtype (both models here are stored in float64) while its table said --dtype (float32): calls D-H's MD steps were
# float64. Now fixed (md_accel's Calculator gets dtype=--dtype): benchmarks/ase_md.py for the copper MACE and
# SevenNet-0 at 4,000 and 32,000 atoms, float32, the default Calculator beside cuda_graph=True and False.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .gpu/sevennet0.mdx .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl 2> /dev/null
calcs=""
for m in models/mace_cu/mace_cu.mdx .gpu/sevennet0.mdx; do
  calcs+="md_accel:$m,md_accel:$m+graph=on,md_accel:$m+graph=off,"
done
timeout $((560 - SECONDS)) python benchmarks/ase_md.py --calcs "$calcs" --sizes 4000,32000 --warmup 10 --steps 30 \
  --dtype float32 --out $R/ase_md > $R/ase_md.log 2>&1
echo "ase_md rc=$?"; grep -E "^\[ase_md\]|^\|" $R/ase_md.log
smi_stop
(cd $OUT && tar czf results.tar.gz r)
