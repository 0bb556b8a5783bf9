#!/usr/bin/env bash
# Session 39: the workspace's grad_x rows component-major (MD_ACCEL_TP_TUNING gx_cmaj=1) and the float32 register cap
# of the double backward's per-edge kernel alone (dbwd_min_warps32=12), md_accel (deterministic, workspace rows) per
# variant in turn (tools/tuning_sweep.sh), and cuEquivariance once in the same call when the peers are staged
# (tools/gpu_stage.sh first). The cap is float32 only: float64 runs default against gx_cmaj=1. TESTS=1: then
# tests/gpu/test_tp_conv_cuda.py under TEST_TUNING (default gx_cmaj=1). gx_cmaj is the knob of gx_component_major.diff,
# not in the code since (dropped after these calls). An empty VARIANTS64 or VARIANTS32 gives the defaults below
# (call 3 ran the float64 variants again that way).
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/refcache .peers/full/wheels [.gpu/gpu_lib.tar.xz]
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/cuequivariance_torch ]] || echo "no staged peers in .gpu/site: md_accel alone"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-560}
common="--graph random_sym:4000:312000 --passes ${PASSES:-fwd_bwd,dbwd} --repeats 10"
SWEEP_RUN_S=${SWEEP_RUN_S:-70} bash tools/tuning_sweep.sh $((LIMIT - SECONDS)) \
  "${VARIANTS64:-default gx_cmaj=1 default gx_cmaj=1}" $common --dtypes float64
mkdir -p $R/f64 && mv $R/*.log $R/*.[0-9]* $R/f64/ 2>/dev/null
SWEEP_RUN_S=${SWEEP_RUN_S:-70} bash tools/tuning_sweep.sh $((LIMIT - (${TESTS:-0} == 1 ? 120 : 0) - 90 - SECONDS)) \
  "${VARIANTS32:-default gx_cmaj=1 dbwd_min_warps32=12 gx_cmaj=1,dbwd_min_warps32=12 default gx_cmaj=1 dbwd_min_warps32=12 gx_cmaj=1,dbwd_min_warps32=12}" \
  $common --dtypes float32
if [[ -d .gpu/site/cuequivariance_torch ]]; then
  timeout $((LIMIT - (${TESTS:-0} == 1 ? 120 : 0) - SECONDS)) python benchmarks/kernels.py --impls cueq $common \
    --dtypes float32,float64 --reference-cache "$PWD/.gpu/refcache" --out $R/cueq > $R/cueq.log 2>&1
  echo "== cueq rc=$? (${SECONDS}s)"; grep -E "^\| cueq " $R/cueq.log | head -30
fi
if [[ ${TESTS:-0} == 1 ]]; then
  MD_ACCEL_TP_TUNING=${TEST_TUNING:-gx_cmaj=1} MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1 timeout $((LIMIT + 30 - SECONDS)) \
    python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py > $R/tests.log 2>&1
  echo "== tests rc=$? (${SECONDS}s): $(tail -1 $R/tests.log)"; grep -E "^(FAILED|ERROR)" $R/tests.log | head -20
fi
(cd $OUT && tar czf results.tar.gz r)
