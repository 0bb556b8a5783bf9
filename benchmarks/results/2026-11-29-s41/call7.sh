#!/usr/bin/env bash
# Session 41, call 7 on a fresh machine: call 6 ruled out mace's import, the passes' order and cuEquivariance's timed
# passes. Left from call 5's table process: cuEquivariance's correctness check (through_layouts on the 300-node
# subgraph, in e3nn's basis), which call 4's table skipped (no mace there). Does it slow md_accel's kernels after it,
# and does it leave a persisting-L2 limit set? Then kernels.py's table process for the two workloads' double
# backward, to see it reproduce.
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
  if ((SECONDS > 400)); then echo "skipped $name (${SECONDS}s)"; return; fi
  echo "-- $name (${SECONDS}s)"
  timeout $((590 - SECONDS)) python benchmarks/pass_breakdown.py --out $R/$name.json "$@" > $R/$name.log 2>&1
  grep -E "^==|busy|ms  x|Error|error|persisting" $R/$name.log | grep -v "elementwise\|reduce_1Block\|dot_kernel\|cub::\|kernelcatcher\|gx_sum\|fwd_kernel" | head -40
}
run cueq_check --workloads mace_mp0_medium,mace_large --dtypes float64 --prelude check:cueq:mace_mp0_medium:float32
run md_accel_check --workloads mace_mp0_medium,mace_large --dtypes float64 --prelude check:md_accel:mace_mp0_medium:float32
timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --passes dbwd --repeats 10 \
  --workloads mace_mp0_medium,mace_large --dtypes float32,float64 --graph random_sym:4000:312000 --out $R/table \
  > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"; grep -E "dbwd " $R/table.log | head -30
(cd $OUT && tar czf results.tar.gz r)
