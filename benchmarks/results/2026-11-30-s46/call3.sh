#!/usr/bin/env bash
# Session 46, call 3: session 45's plan item 1, gy_smem=1 with padded part regions (session 45's
# gy_smem_padded.diff applied: in float64 the upper half-warp's rows start V / 2 elements further on, so a half-warp's
# column reads fall in distinct banks, at call 5's register use). The default and the variant in turn twice,
# md_accel alone, forward + backward and double backward, three workloads, both dtypes, at least 1.5 s per cell,
# clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen31.tar.xz .gpu/gpu_gysmempad.tar.xz (tp-tests under gy_smem=1, padded)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100 SWEEP_RUN_S=100
source tools/gpu_call_env.sh 2> /dev/null
tools/tuning_sweep.sh $((330 - SECONDS)) "default gy_smem=1 default gy_smem=1" --passes fwd_bwd,dbwd \
  --workloads mace_mp0_medium,nequip_l3,sevennet_l3i5 --graph random_sym:4000:312000 --repeats 10
smi_stop
for j in $R/*/kernels.json; do echo "== $j"; python benchmarks/smi_join.py $j $R/smi.csv 2>&1 | grep -E "dbwd" | cut -c1-60,100-140; done
grep -h "check:" $R/*.log | sort | uniq -c | sort -rn | head -4
(cd $OUT && tar czf results.tar.gz r)
