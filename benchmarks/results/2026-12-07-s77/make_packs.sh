#!/usr/bin/env bash
# Makes, here (nvcc, no GPU), the generated-kernel packs call1.sh carries, at the tree's GEN (48, the default tuning):
#   .gpu/gpu_s77gt.tar.xz  tests/gpu/test_tp_conv_cuda.py's configurations
#   .gpu/gpu_s77mm.tar.xz  benchmarks/workloads.py's mace_mp0_medium
# Usage, from the repository root after tools/env.sh main: bash benchmarks/results/2026-12-07-s77/make_packs.sh
set -euo pipefail
py=$PWD/.venv/bin/python
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --workloads mace_mp0_medium --jobs 2 --name s77mm
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-gpu-tests --jobs 2 --name s77gt
ls -la .gpu/gpu_s77mm.tar.xz .gpu/gpu_s77gt.tar.xz
