#!/usr/bin/env bash
# Session 45, call 3: Tuning.gy_smem (new, opt-in): part 1's grad_y summed over a warp's lanes through shared memory
# instead of the shuffle butterfly, whose selects, moves and shuffles were 28 % of the float64 backward's part-1
# instructions under ncu (call 2). The default and the variant in turn twice (each its own process), md_accel alone,
# forward + backward and double backward, the six workloads, both dtypes, each cell over at least 1.5 s, the clocks
# and power logged every 100 ms (smi_join's energy per call). e3nn is the check's reference (the device's own).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen31.tar.xz .gpu/gpu_gysmem.tar.xz (tp-tests under gy_smem=1)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100 SWEEP_RUN_S=138
source tools/gpu_call_env.sh 2> /dev/null
tools/tuning_sweep.sh $((585 - SECONDS)) "default gy_smem=1 default gy_smem=1" --passes fwd_bwd,dbwd \
  --graph random_sym:4000:312000 --repeats 10
smi_stop
for j in $R/*/kernels.json; do echo "== $j"; python benchmarks/smi_join.py $j $R/smi.csv 2>&1 | grep -E "mace_mp0|mace_large"; done
grep -h "check:" $R/*.log | sort | uniq -c | sort -rn | head -5
(cd $OUT && tar czf results.tar.gz r)
