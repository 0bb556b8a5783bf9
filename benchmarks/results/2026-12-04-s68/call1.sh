#!/usr/bin/env bash
# Session 68, call 1, a fresh machine (carry .peers/tab: cuEquivariance; .gpu/gpu_lib.tar.xz: the op library of this
# csrc; .gpu/gpu_s68a.tar.xz: mace_mp0_medium's and mace_large's kernels built here under each variant): the gathered
# rows L2 evict-last (Tuning.x_last, all or half of their lines), the double backward's part-1 prefetch dropped
# (prefetch=7) and the weights' plain loads (w_evict=0) against the default, each run md_accel and cuEquivariance in
# one process with the clock log running (energy per call per cell), the variants in turn twice.
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=80 bash tools/tuning_sweep.sh $((575 - SECONDS)) \
  "default x_last=100 x_last=50 prefetch=7 w_evict=0 default x_last=100 x_last=50 prefetch=7 w_evict=0" \
  --impls md_accel,cueq --dtypes float64,float32 --workloads mace_mp0_medium,mace_large --passes fwd,dbwd \
  --graph random_sym:4000:312000 --repeats 10 --min-seconds 1.0
smi_stop
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r)
