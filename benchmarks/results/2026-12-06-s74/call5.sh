#!/usr/bin/env bash
# Session 74, call 5 (call 1's machine, warm): the two workloads call 1 did not reach under GEN 46, sevennet_0 and
# nequip_l3, forward and forward + backward in both dtypes, md_accel alone, GEN 46 and GEN 48 in turn.
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48 WHEELS=.peers/k/wheels
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source "$(dirname "$0")/ab_run.sh"
for v in gen46 gen48; do
  run "all3.$v" $v 120 --impls md_accel --dtypes float64,float32 --passes fwd,fwd_bwd --min-seconds 0.3 \
    --workloads sevennet_0,nequip_l3 --budget 105
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
