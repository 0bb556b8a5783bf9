#!/usr/bin/env bash
# Session 46, call 4: the plain-op GPU tests under MD_ACCEL_TP_TUNING=gy_smem=1 with the padded part regions of call 3
# (every configuration against the CPU reference in float64, float32 tolerances, poisoned outputs, gradcheck,
# determinism, the graph edge cases).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gysmempadtests.tar.xz .gpu/gpu_gysmempad.tar.xz (tp-gpu-tests and tp-tests
# under gy_smem=1, built here from the padded form)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none MD_ACCEL_TP_TUNING=gy_smem=1
source tools/gpu_call_env.sh 2> /dev/null
timeout 280 python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py > $R/tests_gysmempad.log 2>&1
echo "== tests gy_smem=1 (padded) rc=$? (${SECONDS}s)"; tail -2 $R/tests_gysmempad.log; grep -E "FAILED|Error" $R/tests_gysmempad.log | head
(cd $OUT && tar czf results.tar.gz r)
