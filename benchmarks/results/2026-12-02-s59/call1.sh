#!/usr/bin/env bash
# Session 59, call 1 (a fresh machine; carry .peers/tab .gpu/gpu_lib.tar.xz (session 58's op library: csrc/ unchanged
# since) .gpu/gpu_k39.tar.xz .gpu/gpu_k_s32.tar.xz .gpu/gpu_k_acc96.tar.xz (GEN 39's default kernels of tp-tests and
# tp-gpu-tests, the same under fwd_slots32=1, tp-tests under fwd_acc=96; all built here)): the peers unpacked in the
# background for call 2, tests/gpu/test_tp_conv_cuda.py under fwd_slots32=1, then the float32 forward of sevennet_l3i5
# and nequip_l3, md_accel alone, default, fwd_slots32=1 and fwd_acc=96 in turn, twice.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r" "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1) &
stage=$!
MD_ACCEL_TP_TUNING=fwd_slots32=1 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((240 - SECONDS)) \
  bash tools/gpu_check.sh > "$OUT/c/check.log" 2>&1
echo "gpu_check (fwd_slots32=1) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check.log" | cut -c1-200 | tail -10
export SMI_LOG=100 WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=60 bash tools/tuning_sweep.sh $((560 - SECONDS)) \
  "default fwd_slots32=1 fwd_acc=96 default fwd_slots32=1 fwd_acc=96" --passes fwd --dtypes float32 \
  --workloads sevennet_l3i5,nequip_l3 --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.3
smi_stop
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r $( [[ -d logs ]] && echo logs) && rm -rf r logs)
