#!/usr/bin/env bash
# Session 49, call F (the plan's item 3, data for a later session): where the double backward's rows in grad_w
# cost time. kernels.py --kernel-times, md_accel_scratch against md_accel_gwrows, the double-backward pass of
# mace_mp0_medium and mace_large, both dtypes, at least 1.5 s per cell, nvidia-smi every 100 ms.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
timeout $((300 - SECONDS)) python benchmarks/kernels.py --impls md_accel_scratch,md_accel_gwrows --passes dbwd \
  --workloads mace_mp0_medium,mace_large --dtypes float32,float64 --kernel-times --repeats 10 --min-seconds 1.5 \
  --budget $((280 - SECONDS)) --graph random_sym:4000:312000 --out $R/gwrows_dbwd > $R/gwrows_dbwd.log 2>&1
echo "== rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| dbwd |ms " $R/gwrows_dbwd.log | cut -c1-150 | head -60
python benchmarks/smi_join.py $R/gwrows_dbwd/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
(cd $OUT && tar czf results.tar.gz r)
