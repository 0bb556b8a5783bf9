#!/usr/bin/env bash
# Session 41, call 2 on call 1's warm machine (peers in .gpu/site, the op library unpacked): GEN 29's GPU tests
# (the plain op's file, the fused file's edge-chunk tests), then fwd_m=1 against the default forward in turn twice
# (tools/tuning_sweep.sh: nequip_l3, sevennet_l3i5, sevennet_0, both dtypes), then the plain op's GPU tests under
# MD_ACCEL_TP_TUNING=fwd_m=1.
# Carry: .gpu/gpu_tests.tar.xz .gpu/gpu_fwdm.tar.xz .gpu/gpu_fwdmtests.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
TESTS=1 AB=0 bash benchmarks/results/2026-11-29-s40/call_tests_ab.sh
SWEEP_RUN_S=90 bash tools/tuning_sweep.sh $((420 - SECONDS)) "default fwd_m=1 default fwd_m=1" \
  --graph random_sym:4000:312000 --passes fwd --repeats 10 --dtypes float32,float64 \
  --workloads nequip_l3,sevennet_l3i5,sevennet_0
MD_ACCEL_TP_TUNING=fwd_m=1 timeout $((585 - SECONDS)) python -m pytest -q -rs --maxfail=10 \
  tests/gpu/test_tp_conv_cuda.py > $R/tests_tp_fwdm.log 2>&1
echo "== tp tests fwd_m=1 rc=$? (${SECONDS}s): $(tail -1 $R/tests_tp_fwdm.log)"; grep -E "^(FAILED|ERROR)" $R/tests_tp_fwdm.log | head
(cd $OUT && tar czf results.tar.gz r)
