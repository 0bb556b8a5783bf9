#!/usr/bin/env bash
# Session 38: float32 register caps of the per-edge kernels (theirs had grown to 210-222 registers, two blocks of 128
# threads per SM), md_accel (deterministic, workspace rows) per MD_ACCEL_TP_TUNING variant (tools/tuning_sweep.sh),
# against cuEquivariance in each run when the peers are staged (tools/gpu_stage.sh first), else md_accel alone (a
# fresh machine, the op library from .gpu/gpu_lib.tar.xz). Call 7 ran VARIANTS="default part1_min_warps32=12 default
# part1_min_warps32=12" (commit 5d691a3's knob: __launch_bounds__ asking three blocks, 168 registers, in the backward's
# and the double backward's per-edge kernels) with TESTS=1 (tests/gpu/test_tp_conv_cuda.py under it); call 8 the
# default VARIANTS below (the knob kept: the double backward's kernel alone), PASSES=dbwd.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/refcache .peers/full/wheels [.gpu/gpu_lib.tar.xz]
set -u
cd "$(dirname "$0")/../../.."
IMPLS=md_accel_scratch,cueq
[[ -d .gpu/site/cuequivariance_torch ]] || { echo "no staged peers in .gpu/site: md_accel alone"; IMPLS=md_accel_scratch; }
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-500}
reserve=0; [[ ${TESTS:-0} == 1 ]] && reserve=110  # the tests' time
SWEEP_RUN_S=${SWEEP_RUN_S:-90} bash tools/tuning_sweep.sh $((LIMIT - reserve - SECONDS)) \
  "${VARIANTS:-default dbwd_min_warps32=12 default dbwd_min_warps32=12}" --impls $IMPLS \
  --graph random_sym:4000:312000 --dtypes float32 --passes ${PASSES:-fwd_bwd,dbwd} --repeats 10
for f in $R/*.log; do
  echo "-- $(basename $f)"; grep -E "^\*\*|^\| (md_accel_scratch|cueq) " $f | head -18
  python benchmarks/kernel_ratios.py ${f%.log}/kernels.json 2>&1 | sed -n 3,6p
done
if [[ ${TESTS:-0} == 1 ]]; then
  MD_ACCEL_TP_TUNING=${TEST_TUNING:-dbwd_min_warps32=12} MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1 timeout $((LIMIT - SECONDS)) \
    python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py > $R/tests.log 2>&1
  echo "== tests rc=$? (${SECONDS}s): $(tail -1 $R/tests.log)"; grep -E "^(FAILED|ERROR)" $R/tests.log | head -20
fi
(cd $OUT && tar czf results.tar.gz r)
