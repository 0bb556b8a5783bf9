#!/usr/bin/env bash
# Session 61, call 5 (a fresh machine; carry .gpu/gpu_k42.tar.xz): the op library built from the working tree (the
# generic kernels' per-path sums written once, csrc/tp_conv_kernels.cu), then the generic kernels' GPU tests
# (tests/gpu/test_tp_conv_cuda.py -k generic: against the CPU reference in float64 on fresh inputs, both dtypes).
set -u
cd "$(dirname "$0")/../../.."
GPU_TESTS="tests/gpu/test_tp_conv_cuda.py -k generic" GPU_TEST_LIMIT=$((280 - SECONDS)) bash tools/gpu_check.sh
