#!/usr/bin/env bash
# Session 61, call 1 (a fresh machine; carry .peers/tab .peers/oeq .gpu/gpu_k42.tar.xz: GEN 42's kernels of tp-tests
# and tp-gpu-tests, built here): the op library built, the peers unpacked in the background;
# tests/gpu/test_tp_conv_cuda.py at GEN 42 (its nequip_l3 configuration first, then the whole file); then nequip_l3
# float64 with every peer (tools/gpu_peer_table.sh).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/c/stage.log" 2>&1
 PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh >> "$OUT/c/stage.log" 2>&1) &
stage=$!
GPU_TESTS="tests/gpu/test_tp_conv_cuda.py -k nequip_l3" GPU_TEST_LIMIT=$((300 - SECONDS)) \
  bash tools/gpu_check.sh > "$OUT/c/check_nequip_l3.log" 2>&1
echo "gpu_check (nequip_l3 configuration) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_nequip_l3.log" | cut -c1-200 | tail -6
mv "$OUT/logs" "$OUT/c/logs_nequip_l3"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((380 - SECONDS)) \
  bash tools/gpu_check.sh > "$OUT/c/check_tp_conv.log" 2>&1
echo "gpu_check (test_tp_conv_cuda.py) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_tp_conv.log" | cut -c1-200 | tail -6
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
mkdir -p "$OUT/r" && mv "$OUT/c" "$OUT/r/check"
WORKLOADS=nequip_l3 bash tools/gpu_peer_table.sh float64  # packs $OUT/r into $OUT/results.tar.gz
