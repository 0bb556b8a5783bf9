#!/usr/bin/env bash
# Session 68, call 2 (written for the next device session; run it where call 1 shows an x_last variant gaining), a
# fresh machine (carry .peers/av: ase + vesin; .gpu/gpu_lib.tar.xz; .gpu/gpu_k45.tar.xz: the six workloads' default
# kernels; .gpu/gpu_s68b.tar.xz: theirs under x_last=100 and x_last=50): the six workloads, md_accel alone, every
# pass in both dtypes, the default and both x_last variants in turn twice, with the clock log running.
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/av/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=90 bash tools/tuning_sweep.sh $((575 - SECONDS)) \
  "default x_last=100 x_last=50 default x_last=100 x_last=50" \
  --dtypes float64,float32 --passes fwd,fwd_bwd,dbwd --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.4
smi_stop
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r)
