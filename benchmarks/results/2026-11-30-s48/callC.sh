#!/usr/bin/env bash
# Session 48, call C: where the copper MACE step's time goes at 4,000 and 32,000 atoms (session 47 measured the
# 32,000-atom step 16-23 % slower than session 43 on another machine with the same kernels; that step runs
# uncaptured above AUTO_MAX_EDGES): benchmarks/profile_step.py with and without the CUDA graph (wall ms, GPU busy
# fraction, launches, kernel time by part), float32.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl
nproc; lscpu | grep -E "Model name|MHz" | head -3
timeout $((400 - SECONDS)) python benchmarks/profile_step.py --model models/mace_cu/mace_cu.mdx --sizes 4000,32000 \
  --graph both --steps 20 --repeats 30 --out $R/profile_mace_cu > $R/profile_mace_cu.log 2>&1
echo "rc=$?"; grep -v "^\s*$" $R/profile_mace_cu.log | tail -60
smi_stop
(cd $OUT && tar czf results.tar.gz r)
