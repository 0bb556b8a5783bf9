#!/usr/bin/env bash
# Makes, here (nvcc, no GPU), the generated-kernel packs next_call.sh carries, at the tree's GEN (49), with the
# fixed-point kernels (Tuning.fixed_gx; next_call.sh sets MD_ACCEL_TP_TUNING=fixed_gx=1):
#   .gpu/gpu_s76gt.tar.xz  tests/gpu/test_tp_conv_cuda.py's configurations
#   .gpu/gpu_s76mm.tar.xz  benchmarks/workloads.py's mace_mp0_medium
# Usage, from the repository root after tools/env.sh main: bash benchmarks/results/2026-12-06-s76/make_packs.sh
set -euo pipefail
py=$PWD/.venv/bin/python
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --workloads mace_mp0_medium --tuning fixed_gx=1 \
  --jobs 2 --name s76mm
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-gpu-tests --tuning fixed_gx=1 --jobs 2 --name s76gt
ls -la .gpu/gpu_s76mm.tar.xz .gpu/gpu_s76gt.tar.xz
