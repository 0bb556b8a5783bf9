#!/usr/bin/env bash
# Session 66, call 4, a fresh machine (carry .peers/models .gpu/gpu_lib.tar.xz .gpu/gpu_mace45.tar.xz: the op
# library call 3 built from this csrc, the MACE models' kernels built here at GEN 45): the GPU model tests with every
# source library (tools/gpu_model_tests.sh: tests/gpu/test_model_cuda.py, test_cuda_graph.py and the fused-radial
# SevenNet model test) at GEN 45's default.
set -u
cd "$(dirname "$0")/../../.."
GPU_TEST_LIMIT=500 bash tools/gpu_model_tests.sh
