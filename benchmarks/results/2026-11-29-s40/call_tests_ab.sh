#!/usr/bin/env bash
# Session 40, the call after tools/gpu_stage.sh on the same warm machine: the GPU tests of GEN 28 (the plain op's
# tests, and the fused file's edge-chunk tests: rows in grad_w, materialised weights), then the float32 register cap
# of the double backward's per-edge kernel (dbwd_min_warps32=12) against the default, md_accel in turn twice
# (tools/tuning_sweep.sh), with cuEquivariance once in the same call. TESTS=0 skips the tests.
# Carry: .gpu/gpu_prebuilt.tar.xz .peers/full/wheels [.gpu/gpu_lib.tar.xz]
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/cuequivariance_torch ]] || echo "no staged peers in .gpu/site: md_accel alone"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=${WHEELS:-.peers/full/wheels}
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-570}
if [[ ${TESTS:-1} == 1 ]]; then
  timeout 240 python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py > $R/tests_tp.log 2>&1
  echo "== tp tests rc=$? (${SECONDS}s): $(tail -1 $R/tests_tp.log)"; grep -E "^(FAILED|ERROR)" $R/tests_tp.log | head
  timeout 120 python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_fused_cuda.py \
    -k "chunked_rows_in_grad_w or chunked_materialised" > $R/tests_fused.log 2>&1
  echo "== fused tests rc=$? (${SECONDS}s): $(tail -1 $R/tests_fused.log)"; grep -E "^(FAILED|ERROR)" $R/tests_fused.log | head
fi
if [[ ${AB:-1} == 1 ]]; then
common="--graph random_sym:4000:312000 --passes dbwd --repeats 10 --dtypes float32 ${WORKLOADS:+--workloads $WORKLOADS}"
SWEEP_RUN_S=${SWEEP_RUN_S:-70} bash tools/tuning_sweep.sh $((LIMIT - 100 - SECONDS)) \
  "${VARIANTS:-default dbwd_min_warps32=12 default dbwd_min_warps32=12}" $common
if [[ -d .gpu/site/cuequivariance_torch ]]; then
  timeout $((LIMIT - SECONDS)) python benchmarks/kernels.py --impls cueq $common \
    --reference-cache "$PWD/.gpu/refcache" --out $R/cueq > $R/cueq.log 2>&1
  echo "== cueq rc=$? (${SECONDS}s)"; grep -E "^\| cueq " $R/cueq.log | head -30
fi
fi
(cd $OUT && tar czf results.tar.gz r)
