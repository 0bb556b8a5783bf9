#!/usr/bin/env bash
# Session 62, call 4 (a fresh machine; carry .gpu/gpu_lib.tar.xz, .gpu/gpu_k43.tar.xz as in call 3, and .peers/models,
# the model tests' bundle of tools/gpu_model_peers.sh): the GPU tests that run whole models and the fused / chunked
# tensor-product paths at the final GEN 43 (the whole tests/gpu takes ~470 s, more than the session's device time left).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/c"
source .peers/models/setup-on-gpu.sh > "$OUT/c/stage.log" 2>&1
echo "models bundle staged (${SECONDS}s)"
GPU_TESTS="tests/gpu/test_model_cuda.py tests/gpu/test_cuda_graph.py tests/gpu/test_tp_conv_fused_cuda.py" \
  GPU_TEST_LIMIT=$((370 - SECONDS)) bash tools/gpu_check.sh > "$OUT/c/check_models.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_models.log" | cut -c1-220 | tail -12
