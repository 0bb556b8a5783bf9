#!/usr/bin/env bash
# Session 74, call 2 (call 1's machine, warm: its op library and unpacked packs are there): GEN 48's forward and
# forward + backward on the workloads call 1's 100 s did not reach (md_accel alone, GEN 46's times from call 1),
# then mace_mp0_medium float64's double backward under h1, GEN 48, GEN 46 in turn.
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48 WHEELS=.peers/k/wheels
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source "$(dirname "$0")/ab_run.sh"
run all2.gen48 gen48 230 --impls md_accel --dtypes float64,float32 --passes fwd,fwd_bwd --min-seconds 0.3 \
  --workloads sevennet_l3i5,mace_large,mace_first,sevennet_0,nequip_l3 --budget 215
for round in 1 2; do
  for v in h1 gen48 gen46 gen47; do
    left=$((560 - SECONDS)); ((left < 25)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 40 ? left : 40)) --impls md_accel --dtypes float64 --workloads mace_mp0_medium \
      --passes dbwd --min-seconds 1.0
  done
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
