#!/usr/bin/env bash
# Session 74, call 6 (call 1's machine, warm): nequip_l3's forward in both dtypes under GEN 46 and GEN 48 in turn
# (call 5 had GEN 48's 1.03x / 1.015x GEN 46's time from one run each), md_accel alone.
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48 WHEELS=.peers/k/wheels
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source "$(dirname "$0")/ab_run.sh"
for round in 1 2 3; do
  for v in gen48 gen46; do
    left=$((190 - SECONDS)); ((left < 25)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "nq.$v.$round" $v $((left < 35 ? left : 35)) --impls md_accel --dtypes float64,float32 --passes fwd \
      --min-seconds 0.5 --workloads nequip_l3
  done
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
