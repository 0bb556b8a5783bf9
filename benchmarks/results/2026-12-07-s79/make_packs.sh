#!/usr/bin/env bash
# Makes, here (nvcc, no GPU), the generated-kernel packs call_sp.sh carries (GEN 48; sender_parts is opt-in, so the
# defaults' sources are GEN 48's):
#   .gpu/gpu_s78wl.tar.xz  benchmarks/workloads.py's six workloads, default tuning (session 78's make_packs.sh)
#   .gpu/gpu_sp.tar.xz     mace_mp0_medium and mace_large under MD_ACCEL_TP_TUNING=sender_parts=2 and =4
# Tuned libraries are cached by tuning, not by source: remove .gpu/build/tp_specs/*-t1656966f.so and *-tbf6757e1.so
# after a change to the sender_parts code. Usage, from the repository root after tools/env.sh main.
set -euo pipefail
py=$PWD/.venv/bin/python
[[ -f .gpu/gpu_s78wl.tar.xz ]] || MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --jobs 2 --name s78wl
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --workloads mace_mp0_medium,mace_large \
  --tuning sender_parts=2 --tuning sender_parts=4 --jobs 2 --name sp
ls -la .gpu/gpu_s78wl.tar.xz .gpu/gpu_sp.tar.xz
