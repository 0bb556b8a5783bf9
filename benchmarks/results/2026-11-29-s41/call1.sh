#!/usr/bin/env bash
# Session 41, call 1 on a fresh machine: a lean peers bundle (cuEquivariance and its ops, ase, vesin: .peers/lean,
# .peers/full without sevenn, mace and OpenEquivariance) into .gpu/site, no op-library build (.gpu/gpu_lib.tar.xz is
# session 40's build of this very csrc/); then the process effect: md_accel's float64 double backward of
# mace_mp0_medium and mace_large in differently prepared processes, each kernel's time (benchmarks/pass_breakdown.py),
# with the GPU's clocks logged throughout (nvidia-smi).
# Carry: .peers/lean .gpu/gpu_lib.tar.xz .gpu/gpu_proc.tar.xz (the two workloads' default kernels)
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/lean/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
echo "staged (${SECONDS}s): $(tail -1 $OUT/r/stage.log)"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/lean/wheels
source tools/gpu_call_env.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > "$R/smi.csv" 2>&1 &
smi=$!
R=$OUT/r/process; mkdir -p $R
run() {  # name, then pass_breakdown arguments
  local name=$1; shift
  if ((SECONDS > 540)); then echo "skipped $name (${SECONDS}s)"; return; fi
  echo "-- $name (${SECONDS}s) $(date +%T)" | tee -a $R/marks.txt
  timeout $((590 - SECONDS)) python benchmarks/pass_breakdown.py --workloads mace_mp0_medium,mace_large \
    --out $R/$name.json "$@" > $R/$name.log 2>&1
  grep -E "^==|busy|ms  x|Error|error" $R/$name.log | head -40
}
run f64_first --dtypes float64
run f32_first --dtypes float32,float64
run cueq_imported --dtypes float64 --prelude import:cuequivariance_torch
run after_20g --dtypes float64 --prelude alloc:20
run f64_first_again --dtypes float64
kill $smi
(cd $OUT && tar czf results.tar.gz r)
