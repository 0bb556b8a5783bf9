#!/usr/bin/env bash
# Session 41, call 4 on a fresh machine (staged as in call 1, the lean bundle now with platformdirs, which
# cuequivariance_ops needs): does running cuEquivariance in the process move md_accel's double backward? The float64
# double backward of mace_mp0_medium and mace_large, md_accel then cuEquivariance, and cuEquivariance then md_accel,
# each kernel's time (benchmarks/pass_breakdown.py); then kernels.py's table process for those cells (md_accel,cueq,
# dbwd, float32 then float64).
# Carry: .peers/lean .gpu/gpu_lib.tar.xz .gpu/gpu_proc.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/lean/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
echo "staged (${SECONDS}s): $(tail -1 $OUT/r/stage.log)"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/lean/wheels
source tools/gpu_call_env.sh
python -c "import cuequivariance_ops_torch" 2>&1 | tail -1
R=$OUT/r/process; mkdir -p $R
run() {  # name, then pass_breakdown arguments
  local name=$1; shift
  if ((SECONDS > 480)); then echo "skipped $name (${SECONDS}s)"; return; fi
  echo "-- $name (${SECONDS}s)"
  timeout $((590 - SECONDS)) python benchmarks/pass_breakdown.py --workloads mace_mp0_medium,mace_large \
    --out $R/$name.json "$@" > $R/$name.log 2>&1
  grep -E "^==|busy|ms  x|Error|error" $R/$name.log | grep -v "elementwise\|reduce_1Block\|dot_kernel" | head -40
}
run md_accel_then_cueq --dtypes float64 --impls md_accel,cueq
run cueq_then_md_accel --dtypes float64 --impls cueq,md_accel
timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --passes dbwd --repeats 10 \
  --workloads mace_mp0_medium,mace_large --dtypes float32,float64 --graph random_sym:4000:312000 --out $R/table \
  > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"; grep -E "dbwd|check" $R/table.log | head -30
(cd $OUT && tar czf results.tar.gz r)
