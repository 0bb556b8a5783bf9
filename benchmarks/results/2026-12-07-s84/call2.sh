#!/usr/bin/env bash
# Session 84, call 2: tools/l2_gather_probe.cu's write modes and the rows' evict-last under a set-aside, under ncu.
set -u
mkdir -p "$OUT/r"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
nvcc -O3 -arch=sm_90 -o /tmp/l2_gather_probe tools/l2_gather_probe.cu || exit 1
/tmp/l2_gather_probe | tee "$OUT/r/probe_times.txt"
/tmp/l2_gather_probe > "$OUT/r/probe_times2.txt"; cat "$OUT/r/probe_times2.txt" | awk '{print $1, $(NF-1)}'
timeout 120 "$NCU" --clock-control none -k probe_kernel --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
  /tmp/l2_gather_probe > "$OUT/r/probe_ncu.txt" 2>&1
echo "== probe ncu rc=$? (${SECONDS}s)"; grep -E "dram__bytes|gpu__time" "$OUT/r/probe_ncu.txt" | awk '{print $1, $(NF-1), $NF}' | paste - - -
grep -iE "error|warn" "$OUT/r/probe_ncu.txt" | head -5
