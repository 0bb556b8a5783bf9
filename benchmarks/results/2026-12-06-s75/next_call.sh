#!/usr/bin/env bash
# Prepared in session 75 for the next session's first call (~30 s on the GPU, nothing to carry): gx_accum.cu with
# every variant (the fixed-point sums with the cheap limb split, the three-plane footprint test, each with and without
# a streamed weight row per edge), compiled there with the device's nvcc. Copy it into that session's results folder
# or run it from here: bash benchmarks/results/2026-12-06-s75/next_call.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O3 -arch=sm_90 -std=c++17 "$here/gx_accum.cu" -o /tmp/gx_accum || exit 2
/tmp/gx_accum 2>&1 | tee "$OUT/gx_accum.txt"
