#!/usr/bin/env bash
# Session 70, call 1, a fresh machine (carry .peers/tab: cuEquivariance; .gpu/gpu_s70a.tar.xz: mace_mp0_medium's and
# mace_large's kernels built here under default, x_last=100 and x_last=50). Session 68's call 1 (2026-12-04-s68) with
# the op library built first in this call (this session's checkout carried no .gpu/gpu_lib.tar.xz: the machine that
# held sessions 68's and 69's build caches was not kept) and the variants cut to the x_last ones for the time left:
# the gathered rows L2 evict-last against the default, md_accel and cuEquivariance in one process per run, forward
# and double backward, both dtypes, the clock log running, the variants in turn twice. $OUT/gpu_lib.tar.xz comes back.
set -u
cd "$(dirname "$0")/../../.."
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1) &
peers=$!
GPU_TESTS=none bash tools/gpu_check.sh > /tmp/build.log 2>&1
tail -n 3 /tmp/build.log
wait "$peers"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
SWEEP_RUN_S=70 bash tools/tuning_sweep.sh $((580 - SECONDS)) \
  "default x_last=100 x_last=50 default x_last=100 x_last=50" \
  --impls md_accel,cueq --dtypes float64,float32 --workloads mace_mp0_medium,mace_large --passes fwd,dbwd \
  --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.8
smi_stop
find "$R" -name "*.png" -delete
cp /tmp/build.log "$R/"
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r logs)
