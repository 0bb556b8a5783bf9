#!/usr/bin/env bash
# Session 58, call 3 (a fresh machine; carry .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz (call 1's op library: csrc/ unchanged)
# .gpu/gpu_k39.tar.xz .gpu/gpu_k39_acc0.tar.xz (GEN 39's default kernels of tp-tests and tp-gpu-tests, and tp-tests
# under fwd_acc32=0, GEN 38's passes; both built here)): the peers unpacked in the background for call 4,
# tests/gpu/test_tp_conv_cuda.py at GEN 39's defaults, then mace_large, md_accel alone, GEN 39's default and
# fwd_acc32=0 in turn, twice: the three passes in both dtypes (float64's sources are the same in both).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r" "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
 PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh >> "$OUT/r/stage.log" 2>&1) &
stage=$!
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((280 - SECONDS)) bash tools/gpu_check.sh > "$OUT/c/check.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check.log" | cut -c1-200 | tail -8
export SMI_LOG=100 WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=80 bash tools/tuning_sweep.sh $((420 - SECONDS)) "default fwd_acc32=0 default fwd_acc32=0" \
  --passes fwd,fwd_bwd,dbwd --dtypes float32,float64 --workloads mace_large --graph random_sym:4000:312000 \
  --repeats 10 --min-seconds 0.3
smi_stop
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r $( [[ -d logs ]] && echo logs) && rm -rf r logs)
