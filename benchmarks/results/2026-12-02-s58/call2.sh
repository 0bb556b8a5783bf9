#!/usr/bin/env bash
# Session 58, call 2 (the machine call 1 staged; carry .gpu/gpu_k_sweep.tar.xz, built here): mace_mp0_medium
# float64's forward + backward and double backward with cuEquivariance in one process, each kernel's device time
# (--kernel-times, GEN 38), then the float64 register and prefetch settings that part 1 runs under, md_accel alone on
# the two 128-channel L >= 1 shapes: default, min_warps64=10 (more registers), min_warps64=16 (fewer), prefetch=11
# (no L2 prefetch in the float64 backward), in turn, twice.
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100 WHEELS=.peers/tab/wheels PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
timeout $((200 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 \
  --workloads mace_mp0_medium --passes fwd_bwd,dbwd --kernel-times --repeats 10 --min-seconds 1.0 \
  --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/ktimes > $R/ktimes.log 2>&1
echo "== kernel times rc=$? (${SECONDS}s)"
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" $R/ktimes.log | cut -c1-120 | head -20
SWEEP_RUN_S=60 bash tools/tuning_sweep.sh $((585 - SECONDS)) \
  "default min_warps64=10 min_warps64=16 prefetch=11 default min_warps64=10 min_warps64=16 prefetch=11" \
  --passes fwd_bwd,dbwd --dtypes float64 --workloads mace_mp0_medium,mace_large --graph random_sym:4000:312000 \
  --repeats 10 --min-seconds 0.3
smi_stop
find $R -name "*.png" -delete
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
