#!/usr/bin/env bash
# Session 59, call 5 (a fresh machine; carry .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz .gpu/gpu_k40.tar.xz .gpu/gpu_k40_smem46.tar.xz: GEN 40's
# default kernels of tp-tests and tp-gpu-tests, and tp-tests under fwd_slot_smem=47104, built here):
# tests/gpu/test_tp_conv_cuda.py at GEN 40's defaults, then sevennet_l3i5's float64 forward, md_accel alone, the
# default (its 32-channel passes on four, three and three edge slots: 24 KiB for the slots' sums) and
# fwd_slot_smem=47104 (four slots each) in turn, twice; the peers unpacked in the background for call 6.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r" "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
 PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh >> "$OUT/r/stage.log" 2>&1) &
stage=$!
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((300 - SECONDS)) bash tools/gpu_check.sh > "$OUT/c/check.log" 2>&1
echo "gpu_check (GEN 40) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check.log" | cut -c1-200 | tail -8
export SMI_LOG=100 WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=60 bash tools/tuning_sweep.sh $((400 - SECONDS)) \
  "default fwd_slot_smem=47104 default fwd_slot_smem=47104" --passes fwd,fwd_bwd --dtypes float64,float32 \
  --workloads sevennet_l3i5 --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.3
smi_stop
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r $( [[ -d logs ]] && echo logs) && rm -rf r logs)
