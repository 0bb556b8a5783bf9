#!/usr/bin/env bash
# Session 42, call 5 on a fresh machine: the opt-in w_evict=1 (the per-edge weights loaded with an L2 evict-first
# policy and no L1 line, so that the gathered x rows stay in L2): the plain-op GPU tests under it first, then the
# tuning sweep, md_accel alone, six workloads, three passes, both dtypes: default and w_evict=1 in turn twice, then
# min_warps64=10 and min_warps64=8 (the float64 kernels' register cap: 200 / 255 registers for 64-thread blocks).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_tab.tar.xz .gpu/gpu_wevict.tar.xz (tp-tests and tp-gpu-tests under w_evict=1)
#        .gpu/gpu_mw64.tar.xz (tp-tests under min_warps64=10 and =8)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=/nonexistent
source tools/gpu_call_env.sh 2> /dev/null
MD_ACCEL_TP_TUNING=w_evict=1 timeout 200 python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py > $R/tests_wevict.log 2>&1
echo "== tests w_evict=1 rc=$? (${SECONDS}s)"; tail -2 $R/tests_wevict.log; grep -E "FAILED|Error" $R/tests_wevict.log | head
SWEEP_RUN_S=100 tools/tuning_sweep.sh $((580 - SECONDS)) "default w_evict=1 default w_evict=1 min_warps64=10 min_warps64=8" \
  --graph random_sym:4000:312000 --repeats 10
(cd $OUT && tar czf results.tar.gz r)
