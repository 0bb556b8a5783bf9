#!/usr/bin/env bash
# Session 41, call 6 on a fresh machine: call 5's table process ran md_accel's double backward 7-10 % slower than
# the processes of calls 1 and 4 (mace_mp0_medium float64 13.37 against 12.16-12.27 ms). Which of its differences
# does it: mace imported (cuEquivariance in e3nn's basis), the forward and forward + backward passes run first, or
# cuEquivariance run in e3nn's basis? Each kernel's time (benchmarks/pass_breakdown.py).
# Carry: .peers/tab .gpu/gpu_lib.tar.xz .gpu/gpu_proc.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
R=$OUT/r/process; mkdir -p $R
run() {  # name, then pass_breakdown arguments
  local name=$1; shift
  if ((SECONDS > 500)); then echo "skipped $name (${SECONDS}s)"; return; fi
  echo "-- $name (${SECONDS}s)"
  timeout $((590 - SECONDS)) python benchmarks/pass_breakdown.py --out $R/$name.json "$@" > $R/$name.log 2>&1
  grep -E "^==|busy|ms  x|Error|error" $R/$name.log | grep -v "elementwise\|reduce_1Block\|dot_kernel\|cub::\|kernelcatcher" | head -40
}
run alone --workloads mace_mp0_medium,mace_large --dtypes float64
run mace_imported --workloads mace_mp0_medium,mace_large --dtypes float64 --prelude import:mace.tools.cg
run passes_first --workloads mace_mp0_medium,mace_large --dtypes float64 --passes fwd,fwd_bwd,dbwd
run table_like --workloads mace_mp0_medium --dtypes float32,float64 --impls md_accel,cueq --passes fwd,fwd_bwd,dbwd
run alone_again --workloads mace_mp0_medium,mace_large --dtypes float64
(cd $OUT && tar czf results.tar.gz r)
