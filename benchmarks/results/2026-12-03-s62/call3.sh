#!/usr/bin/env bash
# Session 62, call 3 (a fresh machine; carry .gpu/gpu_lib.tar.xz: call 1's op library, csrc unchanged since;
# .gpu/gpu_k43.tar.xz: the final GEN 43's kernels of tp-tests and tp-gpu-tests, the forward's weight bulk copies
# evict-first, part 1 as at GEN 42; .peers/tab .peers/oeq): tests/gpu/test_tp_conv_cuda.py on the final GEN 43,
# then mace_large and mace_mp0_medium float64 with every peer (tools/gpu_peer_table.sh), then mace_large float32 if
# the time allows.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/c"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/c/stage.log" 2>&1
 PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh >> "$OUT/c/stage.log" 2>&1) &
stage=$!
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=200 bash tools/gpu_check.sh > "$OUT/c/check_tp_conv.log" 2>&1
echo "gpu_check (test_tp_conv_cuda.py) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check_tp_conv.log" | cut -c1-200 | tail -6
wait $stage; echo "peers staged: rc=$? (${SECONDS}s)"
mkdir -p "$OUT/r" && mv "$OUT/c" "$OUT/r/check" && mv "$OUT/logs" "$OUT/r/check/logs"
LIMIT=$((585 - SECONDS)) WORKLOADS=mace_large,mace_mp0_medium bash tools/gpu_peer_table.sh float64  # packs $OUT/r into $OUT/results.tar.gz
if ((SECONDS < 400)); then
  mv "$OUT/r/smi.csv" "$OUT/r/smi_float64.csv"; mv "$OUT/r/smi_join.txt" "$OUT/r/smi_join_float64.txt"
  LIMIT=$((585 - SECONDS)) WORKLOADS=mace_large bash tools/gpu_peer_table.sh float32
fi
