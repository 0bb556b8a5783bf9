#!/usr/bin/env bash
# Runs on branch wip/gx-fixed-point only (md_accel_rows, set_gx_sum and the fixed-point sum are not on main).
# Session 33, after tools/gpu_stage.sh on the same warm machine (peers in .gpu/site, the op library built): the
# fixed-point grad_x sum. TESTS=1: its GPU tests first (tests/gpu/test_tp_conv_cuda.py's grad_x sums, reference
# matches with both deterministic sums, bitwise determinism, the rows' edge chunks; the pair op's three sums).
# Then benchmarks/kernels.py on the symmetric random graph (session 30's), md_accel with each grad_x sum (fixed
# point, the default; per-edge rows; atomic) beside cuEquivariance, forward + backward and the double backward.
# Arguments: the workloads (comma-separated).   Carry: .gpu/gpu_prebuilt.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/cuequivariance_torch ]] || { echo "no staged peers in .gpu/site: run tools/gpu_stage.sh first"; exit 3; }
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-560}
if [[ ${TESTS:-0} == 1 ]]; then
  MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1 timeout 240 python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py \
    tests/gpu/test_tp_conv_fused_cuda.py -k "grad_x_sums or matches_reference or bitwise_deterministic or edge_chunks" \
    > $R/tests.log 2>&1
  echo "== tests rc=$? (${SECONDS}s): $(tail -1 $R/tests.log)"; grep -E "^(FAILED|ERROR)" $R/tests.log | head -20
fi
timeout $((LIMIT - SECONDS)) python benchmarks/kernels.py --graph random_sym:4000:312000 --workloads "$1" \
  --impls md_accel,md_accel_rows,md_accel_atomic,cueq --passes fwd_bwd,dbwd --repeats 10 \
  --budget $((LIMIT - SECONDS - 15)) --reference-cache .gpu/refcache --out $R/kern > $R/kern.log 2>&1
echo "== kernels rc=$? (${SECONDS}s)"
python benchmarks/kernel_ratios.py $R/kern/kernels.json 2>&1 | head -12
grep -E "^\| (md_accel|cueq)" $R/kern.log | head -60
(cd $OUT && tar czf results.tar.gz r)
