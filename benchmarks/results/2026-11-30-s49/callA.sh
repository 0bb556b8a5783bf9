#!/usr/bin/env bash
# Session 49, call A (a fresh machine): the op library built from this csrc (the rows mode auto) and packed for
# later machines ($OUT/gpu_lib.tar.xz); the peers staged into .gpu/site for call B; tests/gpu/test_tp_conv_cuda.py
# (test_rows_auto_in_the_first_order_backward_only among them).
# Carry: .peers/tab .peers/oeq .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage_tab.log" 2>&1)
(PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > "$OUT/r/stage_oeq.log" 2>&1)
echo "staged: $(ls .gpu/site | wc -l) entries in .gpu/site"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=400 bash tools/gpu_check.sh > "$OUT/r/check.log" 2>&1
echo "gpu_check rc=$?"
grep -E "^(FAILED|ERROR)|rows_auto|passed|failed" "$OUT/r/check.log" | cut -c1-160 | tail -30
sed -n '/--- summary ---/,$p' "$OUT/r/check.log"
(cd "$OUT" && tar czf results.tar.gz r logs 2>/dev/null; rm -rf r logs)
