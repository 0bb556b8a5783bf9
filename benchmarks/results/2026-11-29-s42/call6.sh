#!/usr/bin/env bash
# Session 42, call 6 (after staging on the same warm machine: carry .peers/tab .gpu/gpu_lib.tar.xz and run
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
# ): GEN 30 (w_evict=1 the default): the plain-op GPU tests (TESTS=0 skips them), then the kernel table, all six
# workloads, three passes, float32 then float64, md_accel and cuEquivariance in e3nn's basis (mace's O3_e3nn).
# Carry: .gpu/gpu_gen30.tar.xz (tp-tests and tp-gpu-tests, GEN 30 defaults)
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
if [[ ${TESTS:-1} == 1 ]]; then
  timeout 200 python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py > $R/tests_gen30.log 2>&1
  echo "== tests GEN 30 rc=$? (${SECONDS}s)"; tail -2 $R/tests_gen30.log; grep -E "FAILED|Error" $R/tests_gen30.log | head
fi
python -c "from mace.tools.cg import O3_e3nn; import cuequivariance_ops_torch; print('O3_e3nn and the ops import')" 2>&1 | tail -1
timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --repeats 10 \
  --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd |fwd " $R/table.log | head -80
(cd $OUT && tar czf results.tar.gz r)
