#!/usr/bin/env bash
# Session 49, call D: tests/gpu/test_tp_conv_cuda.py after the rows checks were made allocation counts (the caching
# allocator's trace: an allocation of exactly the rows' bytes) instead of peaks, which moved with the allocator's
# block reuse (call C: four cases of test_rows_in_grad_w and one of the new test failed on peaks alone; call A
# passed them in another test order).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=300 bash tools/gpu_check.sh > "$OUT/r/check.log" 2>&1
echo "gpu_check rc=$?"
grep -E "^(FAILED|ERROR)|^E  |passed|failed" "$OUT/r/check.log" | cut -c1-200 | tail -12
(cd "$OUT" && tar czf results.tar.gz r logs 2>/dev/null; rm -rf r logs)
