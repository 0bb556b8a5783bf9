#!/usr/bin/env bash
# Session 67, call 2, a fresh machine (carry .peers/full, .gpu/gpu_lib.tar.xz: the op library of this csrc, and
# .gpu/gpu_kgx.tar.xz: tp-tests' kernels built here under the default, gx_chunks=4 and gx_chunks=8): the per-sender
# sums of each receiver range on a second stream beside the next range's per-edge kernel (Tuning.gx_chunks) against
# the default (call 1's form changed: the sums beside a per-edge kernel on a persistent grid of one block per SM, the
# side stream at the default priority), md_accel alone, forward + backward and double backward, float64 and float32, in turn twice; every run
# checks md_accel against e3nn's float64 results first.
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=90 bash tools/tuning_sweep.sh $((575 - SECONDS)) \
  "default gx_chunks=4 gx_chunks=8 default gx_chunks=4 gx_chunks=8" \
  --dtypes float64,float32 --workloads mace_mp0_medium,mace_large,sevennet_0,nequip_l3 \
  --passes fwd_bwd,dbwd --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.4
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r)
