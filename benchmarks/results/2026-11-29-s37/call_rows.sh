#!/usr/bin/env bash
# Session 37, after tools/gpu_stage.sh on the same warm machine (peers in .gpu/site, the op library built from this
# csrc): grad_x rows in grad_w (md_accel/ops/_rows_plan.py). TESTS=1: the GPU tests first (tests/gpu/test_tp_conv_cuda.py:
# rows in grad_w against the scratch rows and the references, the references with every kernel, bitwise
# determinism, edge chunks, atomic grad_x). Then benchmarks/kernels.py on session 30's symmetric random graph:
# md_accel deterministic with the rows in scratch and in grad_w, md_accel atomic, cuEquivariance; forward +
# backward and the double backward.
# Arguments: the workloads (comma-separated).   Carry: .gpu/gpu_prebuilt.tar.xz .gpu/refcache .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/cuequivariance_torch ]] || { echo "no staged peers in .gpu/site: run tools/gpu_stage.sh first"; exit 3; }
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-560}
if [[ ${TESTS:-0} == 1 ]]; then
  MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1 timeout 240 python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py \
    > $R/tests.log 2>&1
  echo "== tests rc=$? (${SECONDS}s): $(tail -1 $R/tests.log)"; grep -E "^(FAILED|ERROR)" $R/tests.log | head -20
fi
timeout $((LIMIT - SECONDS)) python benchmarks/kernels.py --graph random_sym:4000:312000 --workloads "$1" \
  --impls md_accel_scratch,md_accel_gwrows,md_accel_atomic,cueq --passes fwd_bwd,dbwd --repeats 10 \
  --budget $((LIMIT - SECONDS - 15)) --reference-cache .gpu/refcache --out $R/kern > $R/kern.log 2>&1
echo "== kernels rc=$? (${SECONDS}s)"
python benchmarks/kernel_ratios.py $R/kern/kernels.json 2>&1 | head -14
grep -E "^\| (md_accel|cueq)" $R/kern.log | head -60
(cd $OUT && tar czf results.tar.gz r)
