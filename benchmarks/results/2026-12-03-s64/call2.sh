#!/usr/bin/env bash
# Session 64, call 2 (carry .gpu/gpu_lib.tar.xz, .gpu/gpu_kvar.tar.xz: tp-tests' kernels built here under the default,
# g_smem=1 and g_smem=1,min_warps64=16,fwd_min_warps64=12; .peers/full/wheels): Tuning.g_smem (part 1's grad_out
# components in shared memory, each path reading its own inside the edge loop: ptxas here gives the float32 part-1
# kernels 96-128 registers instead of 127-222 and the float64 ones far fewer spills at the 168 cap) against the
# default, md_accel alone, forward + backward and double backward of the six workloads, both dtypes, the variants in
# turn (the default and g_smem=1 twice), each run its own process; every run checks md_accel against e3nn's float64
# results first (kernels.py, the check subgraph).
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=130 bash tools/tuning_sweep.sh 560 \
  "default g_smem=1 g_smem=1,min_warps64=16,fwd_min_warps64=12 default g_smem=1" \
  --passes fwd_bwd,dbwd --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.4
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r)
