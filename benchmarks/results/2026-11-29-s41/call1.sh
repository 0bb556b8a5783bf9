#!/usr/bin/env bash
# Session 41, call 1 on a fresh machine: the peers into .gpu/site (no op-library build: .gpu/gpu_lib.tar.xz is
# session 40's build of this very csrc/), then (a) the float32 double backward, GEN 29's
# register-cap rule (default) against dbwd_auto_warps32=0 in turn twice, with cuEquivariance once
# (../2026-11-29-s40/call_tests_ab.sh); (b) the process effect: md_accel's float64 double backward of
# mace_mp0_medium and mace_large in differently prepared processes, each kernel's time (benchmarks/pass_breakdown.py),
# with the GPU's clocks logged throughout (nvidia-smi).
# Carry: .peers/full .gpu/gpu_lib.tar.xz .gpu/gpu_ab.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/full/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
echo "staged (${SECONDS}s): $(tail -1 $OUT/r/stage.log)"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > "$OUT/r/smi.csv" 2>&1 &
smi=$!
VARIANTS="default dbwd_auto_warps32=0 default dbwd_auto_warps32=0" TESTS=0 LIMIT=330 \
  bash benchmarks/results/2026-11-29-s40/call_tests_ab.sh
export PYTHONPATH=$PWD/.gpu/site:$PWD:/tmp/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh > /dev/null
R=$OUT/r/process; mkdir -p $R
run() {  # name, then pass_breakdown arguments
  local name=$1; shift
  if ((SECONDS > 560)); then echo "skipped $name (${SECONDS}s)"; return; fi
  echo "-- $name (${SECONDS}s) $(date +%T)" | tee -a $R/marks.txt
  timeout $((590 - SECONDS)) python benchmarks/pass_breakdown.py --workloads mace_mp0_medium,mace_large \
    --out $R/$name.json "$@" > $R/$name.log 2>&1
  grep -E "^==|busy|ms  x" $R/$name.log | head -40
}
run f64_first --dtypes float64
run f32_first --dtypes float32,float64
run cueq_imported --dtypes float64 --prelude import:cuequivariance_torch
run after_20g --dtypes float64 --prelude alloc:20
run f64_first_again --dtypes float64
kill $smi
(cd $OUT && tar czf results.tar.gz r)
