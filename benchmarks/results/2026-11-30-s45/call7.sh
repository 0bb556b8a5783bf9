#!/usr/bin/env bash
# Session 45, call 7: gy_smem=1 as committed (four partial sums; in float64 the upper half of a warp's parts reads its
# rows from row V / 2 on: call 4's ncu found the column reads 2-way bank-conflicted, the code review the reason). The
# default and the variant in turn twice, md_accel alone, mace_mp0_medium and nequip_l3, forward + backward and double
# backward, both dtypes, at least 1.5 s per cell, the clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen31.tar.xz .gpu/gpu_gysmemrot.tar.xz (tp-tests under gy_smem=1)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100 SWEEP_RUN_S=60
source tools/gpu_call_env.sh 2> /dev/null
tools/tuning_sweep.sh $((200 - SECONDS)) "default gy_smem=1 default gy_smem=1" --passes fwd_bwd,dbwd \
  --workloads mace_mp0_medium,nequip_l3 --graph random_sym:4000:312000 --repeats 10
smi_stop
grep -h "check:" $R/*.log | sort | uniq -c | sort -rn | head -4
(cd $OUT && tar czf results.tar.gz r)
