#!/usr/bin/env bash
# Session 52, call 3: more edge slots per receiver in the forward (Tuning.fwd_slots_x, opt-in: the block 2 and 4 times
# the other kernels', fewer receivers per wave) against the default, md_accel alone, forward only, the six
# workloads, both dtypes; the variants in turn, twice, one process each, at least 1.0 s per cell, clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen33.tar.xz .gpu/gpu_slots.tar.xz .gpu/refcache .peers/k
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
tar -C .gpu -xJf .gpu/gpu_slots.tar.xz
declare -A V=([default]="" [x2]="fwd_slots_x=2" [x4]="fwd_slots_x=4")
for run in 1 2; do
  for v in default x2 x4; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((570 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
      --dtypes float32,float64 --passes fwd --repeats 20 --min-seconds 1.0 \
      --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "md_accel +fwd" $R/${v}_$run.log | awk '{printf "%s ", $3}'; echo
  done
done
smi_stop
(cd $OUT && tar czf results.tar.gz r)
