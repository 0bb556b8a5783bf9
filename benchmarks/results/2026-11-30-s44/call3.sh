#!/usr/bin/env bash
# Session 44, call 3: the float64 forwards that spill (session 43's plan, item 2). Tuning.fwd_auto_warps64=8 (opt-in)
# rebuilds a library whose float64 forward spilled with 8 warps per SM for the forward alone; by ptxas it applies
# to nequip_l3 and sevennet_l3i5. The default and the variant in turn, twice, each its own process, md_accel alone,
# 50 calls per cell (the power controller settled, call 2).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen30.tar.xz .gpu/gpu_fwdcap.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
export SMI_LOG=50
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=130 tools/tuning_sweep.sh $((560 - SECONDS)) "default fwd_auto_warps64=8 default fwd_auto_warps64=8" \
  --passes fwd,fwd_bwd,dbwd --dtypes float64 --workloads nequip_l3,sevennet_l3i5 --graph random_sym:4000:312000 \
  --warmup 5 --repeats 50
smi_stop
(cd $OUT && tar czf results.tar.gz r)
