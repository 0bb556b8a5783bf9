#!/usr/bin/env bash
# Session 59, call 3 (a fresh machine; carry .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz .gpu/gpu_k39ab.tar.xz
# .gpu/gpu_k_s32b.tar.xz .gpu/gpu_k_s32b96.tar.xz: GEN 39's default kernels of sevennet_l3i5 and nequip_l3, and those of
# tp-tests and tp-gpu-tests under fwd_slots32=1 (float32's forward planned in its own sizes: fwd_acc32 = 72 on every
# pass, 4-byte slot sums) and under fwd_slots32=1,fwd_acc32=96, all built here): the peers unpacked in the background
# for call 4, the float32 forward of sevennet_l3i5 and nequip_l3, md_accel alone, the three in turn, twice; then
# tests/gpu/test_tp_conv_cuda.py under each of the two variants.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r" "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
 PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh >> "$OUT/r/stage.log" 2>&1) &
stage=$!
check() {  # tuning
  MD_ACCEL_TP_TUNING=$1 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((560 - SECONDS)) \
    bash tools/gpu_check.sh > "$OUT/c/check_${1//[=,]/}.log" 2>&1
  echo "gpu_check ($1) rc=$? (${SECONDS}s)"
  grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_${1//[=,]/}.log" | cut -c1-200 | tail -8
}
check fwd_slots32=1,fwd_acc32=96
export SMI_LOG=100 WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=50 bash tools/tuning_sweep.sh $((330 - SECONDS)) \
  "default fwd_slots32=1 fwd_slots32=1,fwd_acc32=96 default fwd_slots32=1 fwd_slots32=1,fwd_acc32=96" --passes fwd \
  --dtypes float32 --workloads sevennet_l3i5,nequip_l3 --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.3
smi_stop
check fwd_slots32=1
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r $( [[ -d logs ]] && echo logs) && rm -rf r logs)
