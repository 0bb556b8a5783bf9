#!/usr/bin/env bash
# Session 36, one H200: call_ab.sh (this checkout's plugin against 57469b7's, in turn, twice), then the plugin's
# GPU tests (tests/lammps/test_lammps_cuda.py); logs packed into $OUT/call.tar.xz. Carry as call_ab.sh.
set -uo pipefail
cd "$(dirname "$0")/../../.."
bash benchmarks/results/2026-11-29-s36/call_ab.sh .gpu/ab
SIZES=864 STEPS=20 WARMUP=5 bash tools/gpu_lammps.sh .gpu/lmp --check .gpu/check > .gpu/check.log 2>&1
echo "check rc=$?"; grep -E "passed|failed|error" .gpu/check.log | tail -5
tar cJf "$OUT/call.tar.xz" .gpu/ab .gpu/check .gpu/check.log
