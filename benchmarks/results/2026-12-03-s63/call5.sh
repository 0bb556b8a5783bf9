#!/usr/bin/env bash
# Session 63, call 5 (a fresh machine, the op library built here: csrc/mma.cuh gained split_tf32_int after call 4; carry .gpu/gpu_kmmat.tar.xz: the kernels of
# tests/gpu/test_tp_conv_cuda.py's configurations under fwd_mma=7, built here): that test file with the tensor-core
# forward in float32 wherever a configuration allows it (every multiplicity a multiple of 32), against the CPU reference.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/c"
MD_ACCEL_TP_TUNING=fwd_mma=7 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=400 bash tools/gpu_check.sh \
  > "$OUT/c/check_fwd_mma7_a916b94.log" 2>&1
echo "gpu_check (test_tp_conv_cuda.py, fwd_mma=7) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_fwd_mma7_a916b94.log" | cut -c1-200 | tail -8
