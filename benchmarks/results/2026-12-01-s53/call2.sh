#!/usr/bin/env bash
# Session 53, call 2: the forward's edge rows by bulk copies (Tuning.fwd_tma=1, opt-in): tests/gpu/test_tp_conv_cuda.py
# under it (its forward kernels are then fwd_kernel_tma where the rows allow), then the six workloads' forward, both
# dtypes, md_accel alone, default and fwd_tma=1 in turn, twice, one process each, at least 1.0 s per cell.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen34.tar.xz .gpu/gpu_tma.tar.xz .gpu/refcache .peers/k
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
MD_ACCEL_TP_TUNING=fwd_tma=1 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=200 bash tools/gpu_check.sh \
  > $R/check_tma.log 2>&1
echo "gpu_check (fwd_tma=1) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed" $R/check_tma.log | cut -c1-200 | tail -12
declare -A V=([default]="" [tma]="fwd_tma=1")
for run in 1 2; do
  for v in default tma; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((575 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
      --dtypes float32,float64 --passes fwd --repeats 20 --min-seconds 1.0 \
      --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "md_accel +fwd" $R/${v}_$run.log | awk '{printf "%s ", $3}'; echo
  done
done
smi_stop
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
