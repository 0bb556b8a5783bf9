#!/usr/bin/env bash
# Session 55, call 2 (after call 1, warm machine or carried .gpu/gpu_lib.tar.xz .gpu/gpu_gen37a.tar.xz
# .gpu/gpu_gen37b.tar.xz): the six workloads' forward + backward and double-backward passes, both dtypes, md_accel
# alone, default and p1_tma=3 in turn, twice, one process each, at least 0.3 s per cell.
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
for v in default p1_tma=3; do
  PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py tp-tests --tuning $v --jobs 8 --name w${v%%=*} > $R/prebuild_${v%%=*}.log 2>&1 &
done; wait; echo "prebuilt (${SECONDS}s)"; tail -n1 $R/prebuild_*.log
declare -A V=([default]="" [p1]="p1_tma=3")
for run in 1 2; do
  for v in default p1; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((580 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
      --dtypes float32,float64 --passes fwd_bwd,dbwd --repeats 10 --min-seconds 0.3 \
      --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "md_accel +(fwd_bwd|dbwd)" $R/${v}_$run.log | awk '{printf "%s ", $3}'; echo
  done
done
smi_stop
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
