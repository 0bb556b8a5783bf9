#!/usr/bin/env bash
# Session 46, call 5: GEN 32 (grad_y through shared memory where the float64 double backward's part 1 spills at
# least 1 KB, _codegen._gy_through_smem) on the GPU: the plain-op GPU tests at the defaults, then the kernel table of
# md_accel alone for the six workloads (forward + backward and double backward, both dtypes, at least 1.5 s per
# cell, clocks logged): nequip_l3 and sevennet_l3i5 should run call 3's gy_smem times, the others GEN 31's.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz (tp-gpu-tests and tp-tests at GEN 32, built here)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
ls .gpu/build/tp_specs | grep -c -- "-v32.so"
timeout 200 python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py > $R/tests_gen32.log 2>&1
echo "== tests GEN 32 rc=$? (${SECONDS}s)"; tail -2 $R/tests_gen32.log; grep -E "FAILED|Error" $R/tests_gen32.log | head
timeout $((330 - SECONDS)) python benchmarks/kernels.py --impls md_accel --passes fwd_bwd,dbwd --repeats 10 \
  --min-seconds 1.5 --graph random_sym:4000:312000 --out $R/table32 > $R/table32.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd |check:" $R/table32.log | cut -c1-90
ls .gpu/build/tp_specs | grep -c -- "-v32.so"
(cd $OUT && tar czf results.tar.gz r)
