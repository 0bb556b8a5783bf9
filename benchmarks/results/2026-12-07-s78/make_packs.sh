#!/usr/bin/env bash
# Makes, here (nvcc, no GPU), the generated-kernel packs session 78's calls carry (GEN 48; fwd_cgy=1 is opt-in, so the
# defaults' sources are GEN 48's):
#   .gpu/gpu_s77gt.tar.xz  tests/gpu/test_tp_conv_cuda.py's configurations, default tuning (session 77's make_packs.sh)
#   .gpu/gpu_s78wl.tar.xz  benchmarks/workloads.py's six workloads, default tuning
#   .gpu/gpu_cgy.tar.xz    the six workloads under MD_ACCEL_TP_TUNING=fwd_cgy=1
#   .gpu/gpu_cgygt.tar.xz  tests/gpu's configurations under fwd_cgy=1
# Tuned libraries are cached by tuning, not by source: remove .gpu/build/tp_specs/*-t8633d6a8.so after a change to
# the fwd_cgy code. Usage, from the repository root after tools/env.sh main.
set -euo pipefail
py=$PWD/.venv/bin/python
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --jobs 2 --name s78wl
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --tuning fwd_cgy=1 --jobs 2 --name cgy
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-gpu-tests --tuning fwd_cgy=1 --jobs 2 --name cgygt
[[ -f .gpu/gpu_s77gt.tar.xz ]] || bash benchmarks/results/2026-12-07-s77/make_packs.sh
ls -la .gpu/gpu_s77gt.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_cgy.tar.xz .gpu/gpu_cgygt.tar.xz
