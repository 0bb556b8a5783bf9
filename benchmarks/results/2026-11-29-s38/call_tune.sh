#!/usr/bin/env bash
# Session 38, after tools/gpu_stage.sh on the same warm machine: float32 tunings of the backward's and double
# backward's per-edge kernels (their register use had grown to 210-222, two blocks of 128 threads per SM), md_accel
# (deterministic, workspace rows) against cuEquivariance in each run (tools/tuning_sweep.sh): the default,
# part1_min_warps32=12 (__launch_bounds__ asking three blocks: 168 registers), dbwd_g32=32 (double-backward passes
# of 32 grad_out components instead of 48), both. TESTS=1 then runs tests/gpu/test_tp_conv_cuda.py under
# part1_min_warps32=12.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/refcache .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/cuequivariance_torch ]] || { echo "no staged peers in .gpu/site: run tools/gpu_stage.sh first"; exit 3; }
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-500}
SWEEP_RUN_S=${SWEEP_RUN_S:-90} bash tools/tuning_sweep.sh $((LIMIT - 110 - SECONDS)) \
  "default part1_min_warps32=12 dbwd_g32=32 part1_min_warps32=12,dbwd_g32=32" --impls md_accel_scratch,cueq \
  --graph random_sym:4000:312000 --dtypes float32 --passes fwd_bwd,dbwd --repeats 10
for f in $R/*.log; do
  echo "-- $(basename $f)"; grep -E "^\*\*|^\| (md_accel_scratch|cueq) " $f | head -18
  python benchmarks/kernel_ratios.py ${f%.log}/kernels.json 2>&1 | sed -n 3,6p
done
if [[ ${TESTS:-0} == 1 ]]; then
  MD_ACCEL_TP_TUNING=part1_min_warps32=12 MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1 timeout $((LIMIT - SECONDS)) \
    python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py > $R/tests.log 2>&1
  echo "== tests rc=$? (${SECONDS}s): $(tail -1 $R/tests.log)"; grep -E "^(FAILED|ERROR)" $R/tests.log | head -20
fi
(cd $OUT && tar czf results.tar.gz r)
