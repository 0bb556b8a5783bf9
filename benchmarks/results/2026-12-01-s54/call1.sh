#!/usr/bin/env bash
# Session 54, call 1: part 1's edge rows by bulk copies (Tuning.p1_tma=3, opt-in at GEN 37): builds the op library
# (returned as $OUT/gpu_lib.tar.xz), tests/gpu/test_tp_conv_cuda.py under p1_tma=3, then the six workloads' forward +
# backward and double-backward passes, both dtypes, md_accel alone, default and p1_tma=3 in turn, twice, one process
# each, at least 0.3 s per cell.
# Carry: .gpu/gpu_gen37ab.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
MD_ACCEL_TP_TUNING=p1_tma=3 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=170 bash tools/gpu_check.sh \
  > "$OUT/r/check_p1.log" 2>&1
echo "gpu_check (p1_tma=3) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/r/check_p1.log" | cut -c1-200 | tail -12
export SMI_LOG=100 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh 2> /dev/null
declare -A V=([default]="" [p1]="p1_tma=3")
for run in 1 2; do
  for v in default p1; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
      --dtypes float32,float64 --passes fwd_bwd,dbwd --repeats 10 --min-seconds 0.3 \
      --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "md_accel +(fwd_bwd|dbwd)" $R/${v}_$run.log | awk '{printf "%s ", $3}'; echo
  done
done
smi_stop
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
