#!/usr/bin/env bash
# Session 55, call 1 (a fresh machine, nothing carried): builds the op library (-> $OUT/gpu_lib.tar.xz) while the
# generated kernels of tools/prebuild_gpu_kernels.py tp-tests tp-gpu-tests compile under the default tuning and under
# p1_tma=3 (-> $OUT/gpu_gen37a.tar.xz, $OUT/gpu_gen37b.tar.xz), then tests/gpu/test_tp_conv_cuda.py under p1_tma=3.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r" .gpu/build
export MD_ACCEL_BUILD_DIR=$PWD/.gpu/build TORCH_CUDA_ARCH_LIST=9.0
(GPU_TESTS=none MAX_JOBS=8 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1; echo "build rc=$? (${SECONDS}s)") &
for v in a:default b:p1_tma=3; do
  PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py tp-tests tp-gpu-tests --tuning "${v#*:}" --jobs 5 --name "gen37${v%%:*}" \
    > "$OUT/r/prebuild_${v%%:*}.log" 2>&1 &
done
wait
echo "prebuilt (${SECONDS}s):"; tail -1 "$OUT"/r/prebuild_*.log; grep -iE "error|Traceback" "$OUT"/r/prebuild_*.log | head -5
cp .gpu/gpu_gen37a.tar.xz .gpu/gpu_gen37b.tar.xz "$OUT"/
tail -4 "$OUT/r/build.log"
MD_ACCEL_TP_TUNING=p1_tma=3 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((560 - SECONDS)) \
  bash tools/gpu_check.sh > "$OUT/r/check_p1.log" 2>&1
echo "gpu_check (p1_tma=3) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/r/check_p1.log" | cut -c1-200 | tail -14
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
