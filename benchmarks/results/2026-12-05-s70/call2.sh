#!/usr/bin/env bash
# Session 70, call 2, a fresh machine (carry .peers/tab: cuEquivariance; .gpu/gpu_lib.tar.xz: call 1's op library of
# this csrc; .gpu/gpu_s70c.tar.xz: mace_mp0_medium's kernels built here under default, prefetch=7, prefetch=3,
# w_evict=0, prefetch=7,w_evict=0 and gy_smem=1): session 66's plan item 3, the float64 double backward by time and energy per
# call, variants that issue fewer memory requests per edge (prefetch=7: no part-1 L2 prefetch of the next edge's
# weights; prefetch=3: nor the float64 backward's; w_evict=0: plain weight loads; gy_smem=1: part 1's grad_y summed
# through shared memory, without the butterfly's selects and shuffles), md_accel and cuEquivariance in one
# process per run, forward + backward and double backward, the clock log running, the variants in turn twice.
set -u
cd "$(dirname "$0")/../../.."
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
SWEEP_RUN_S=60 bash tools/tuning_sweep.sh $((540 - SECONDS)) \
  "default prefetch=7 prefetch=3 w_evict=0 prefetch=7,w_evict=0 gy_smem=1 default prefetch=7 prefetch=3 w_evict=0 prefetch=7,w_evict=0 gy_smem=1" \
  --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium --passes fwd_bwd,dbwd \
  --graph random_sym:4000:312000 --repeats 10 --min-seconds 1.0
smi_stop
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r)
