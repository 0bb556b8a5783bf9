#!/usr/bin/env bash
# Session 44, call 2: the kernel table timed over 200 calls per cell instead of 10 (md_accel, cueq in e3nn's basis;
# all six workloads), with the GPU's clocks and power logged every 50 ms: call 1 found md_accel's double backward
# at the H200's 700 W cap (SM clock down to 1470 MHz) within a 10-call window, cuEquivariance's at 1980 MHz. A
# longer window gives each cell's time with the power controller settled.
# After a staging call on the same warm machine (carry .peers/tab .gpu/gpu_lib.tar.xz;
# PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh). Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_proc30.tar.xz
# .gpu/gpu_gen30.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=50
source tools/gpu_call_env.sh 2> /dev/null
timeout $((560 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --warmup 10 --repeats 200 \
  --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd |fwd " $R/table.log | cut -c1-90
python benchmarks/smi_join.py $R/table/kernels.json $R/smi.csv 2>&1 | tail -80
(cd $OUT && tar czf results.tar.gz r)
