#!/usr/bin/env bash
# Session 66, call 2, a fresh machine (carry .peers/full): tools/gpu_stage.sh (the op library from this csrc, the
# peers into .gpu/site, tp-tests' kernels at GEN 45 under the default and g32_auto=0, tests/gpu's tensor-product
# kernels at the default), then GEN 45's float32 grad_out rule (g32_auto, kept where the blocks per SM rise and the
# registers fall by a third at most: sevennet_0, nequip_l3, sevennet_l3i5) against g32_auto=0 (GEN 44's kernels),
# md_accel alone, forward + backward in float32 and float64 (sevennet_0's kernel serves both dtypes; mace_mp0_medium
# is the control: the rule rejects its trial, so both arms run the same kernels), in turn twice; every run checks
# md_accel against e3nn's float64 results first.
set -u
cd "$(dirname "$0")/../../.."
STAGE_KERNELS=tp-tests STAGE_TUNINGS="default g32_auto=0" bash tools/gpu_stage.sh &
(MD_ACCEL_NO_BUILD=1 PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py tp-gpu-tests --jobs 4 --name kt45 \
  > /tmp/prebuild_kt45.log 2>&1; tail -1 /tmp/prebuild_kt45.log) &
wait
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=75 bash tools/tuning_sweep.sh $((570 - SECONDS)) "g32_auto=0 default g32_auto=0 default" \
  --dtypes float32,float64 --workloads sevennet_0,nequip_l3,sevennet_l3i5,mace_mp0_medium \
  --passes fwd_bwd --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.4
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -20
(cd "$OUT" && tar czf results.tar.gz r)
