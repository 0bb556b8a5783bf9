#!/usr/bin/env bash
# Session 60, call 1 (a fresh machine; carry .peers/tab .peers/oeq .gpu/gpu_k41.tar.xz .gpu/gpu_k41_acc64.tar.xz: GEN
# 41's kernels of tp-tests and tp-gpu-tests at the defaults and under fwd_acc=64, built here): the op library built,
# the peers unpacked in the background for the next calls; tests/gpu/test_tp_conv_cuda.py under fwd_acc=64 (the
# float64 forward's budget of 64 components per channel); then the float64 forward of nequip_l3, sevennet_l3i5 and
# mace_mp0_medium, md_accel alone, default and fwd_acc=64 in turn, twice.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r" "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
 PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh >> "$OUT/r/stage.log" 2>&1) &
stage=$!
MD_ACCEL_TP_TUNING=fwd_acc=64 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((400 - SECONDS)) \
  bash tools/gpu_check.sh > "$OUT/c/check_acc64.log" 2>&1
echo "gpu_check (fwd_acc=64) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_acc64.log" | cut -c1-200 | tail -8
export SMI_LOG=100 WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=60 bash tools/tuning_sweep.sh $((570 - SECONDS)) "default fwd_acc=64 default fwd_acc=64" --passes fwd \
  --dtypes float64 --workloads nequip_l3,sevennet_l3i5,mace_mp0_medium --graph random_sym:4000:312000 --repeats 10 \
  --min-seconds 0.3
smi_stop
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r $( [[ -d logs ]] && echo logs) && rm -rf r logs)
