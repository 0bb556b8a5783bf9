#!/usr/bin/env bash
# Session 42, call 1 on a fresh machine: stage (.peers/tab: cuEquivariance's ops, e3nn's basis through mace), then
# the plain-op GPU tests under stage_w=7 (the weights staged through shared memory with cp.async in the forward and
# the per-edge backward and double-backward kernels), the first run of that code on a GPU.
# Carry: .peers/tab .gpu/gpu_lib.tar.xz .gpu/gpu_stagetests.tar.xz (tp-gpu-tests' kernels under stage_w=7)
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
echo "staged (${SECONDS}s)"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
MD_ACCEL_TP_TUNING=stage_w=7 timeout $((580 - SECONDS)) python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py \
  > $R/tests_stage7.log 2>&1
echo "== tests stage_w=7 rc=$? (${SECONDS}s)"; tail -5 $R/tests_stage7.log
grep -E "FAILED|Error" $R/tests_stage7.log | head -20
(cd $OUT && tar czf results.tar.gz r)
