#!/usr/bin/env bash
# Session 32 (warm machine: op library in .gpu/prebuilt): the GPU model tests with sevenn (SevenNet-0 and -l3i5 checkpoints) and nequip 0.19.1 (+ hydra,
# omegaconf, antlr4) in the carry .peers/models (28 MiB): tests/gpu/test_model_cuda.py, test_cuda_graph.py and the
# fused-radial SevenNet model test; the model specs compile on the device.
# Carry: .gpu/gpu_prebuilt.tar.xz .peers/models .gpu/s32
set -u
cd "$(dirname "$0")/../.."
mkdir -p $OUT/r
source .peers/models/setup-on-gpu.sh > $OUT/r/peers.log 2>&1
export PYTHON=python GPU_FUSED=1 GPU_TEST_LIMIT=${GPU_TEST_LIMIT:-520} \
  GPU_TESTS=${GPU_TESTS:-"tests/gpu/test_model_cuda.py tests/gpu/test_cuda_graph.py tests/gpu/test_tp_conv_fused_cuda.py::test_sevennet_model_fused_equals_unfused"}
bash tools/gpu_check.sh > $OUT/r/gpu_check.log 2>&1
grep -A4 -- "--- summary ---" $OUT/r/gpu_check.log; grep -E "FAILED|ERROR|SKIPPED" $OUT/r/gpu_check.log | head -30
(cd $OUT && tar czf results.tar.gz r)
