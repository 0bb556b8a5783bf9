#!/usr/bin/env bash
# Session 44, call 4 (after staging on the same warm machine: carry .peers/tab .gpu/gpu_lib.tar.xz and run
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
# ): GEN 31 (the float64 forward that spills >= 128 bytes built with 8 warps per SM): the plain-op GPU tests, then
# the kernel table with each cell timed over at least 1.5 s (--min-seconds, call 2: the power-capped clock settles),
# md_accel and cuEquivariance in e3nn's basis, the clocks logged every 100 ms.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen31.tar.xz (tp-tests and tp-gpu-tests, GEN 31 defaults)
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
timeout 200 python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py > $R/tests_gen31.log 2>&1
echo "== tests GEN 31 rc=$? (${SECONDS}s)"; tail -2 $R/tests_gen31.log; grep -E "FAILED|Error" $R/tests_gen31.log | head
timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --repeats 10 --min-seconds 1.5 \
  --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd |fwd " $R/table.log | cut -c1-80 | head -80
python benchmarks/smi_join.py $R/table/kernels.json $R/smi.csv --passes dbwd 2>&1 | tail -24
(cd $OUT && tar czf results.tar.gz r)
