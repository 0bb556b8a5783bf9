#!/usr/bin/env bash
# On the GPU machine, after tools/gpu_stage.sh on the same warm machine (the op library built): Nsight Compute of
# md_accel's conv kernels, the first matching launch per cell (conv_profile.py runs each pass once), with session
# 28's sections plus the source counters (warp stall samples per SASS instruction). Cells:
# TAG:WORKLOAD:DTYPE:PASS:KERNEL_REGEX[:IMPL] (benchmarks/conv_profile.py on the symmetric random graph of
# benchmarks/kernels.py's tables; IMPL, default md_accel, one of kernels.py's: cueq profiles cuEquivariance's
# kernels, with its peers installed). Per cell in $OUT/r: ncu_TAG.txt (the sections), ncu_TAG_top.txt
# (benchmarks/ncu_sass_summary.py: stall samples by reason and by instruction, the instruction mix) and
# ncu_TAG_sass.csv.gz (the source page). NCU_METRICS=a,b,..: these metrics besides the sections (e.g. dram__bytes_read.sum);
# NCU_GRAPH: another graph (conv_profile.py's --graph); NCU_ARGS: more ncu arguments (e.g. "--section
# MemoryWorkloadAnalysis_Tables": L1 and L2 traffic per kind of access).
# Carry: .gpu/gpu_prebuilt.tar.xz .peers/full/wheels
# Usage (device): bash tools/gpu_ncu.sh mmm64:mace_mp0_medium:float64:dbwd:dbwd_kernel ...
set -u
cd "$(dirname "$0")/.."
export WHEELS=${WHEELS:-.peers/full/wheels}
source tools/gpu_call_env.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
LIMIT=${LIMIT:-560}
for cell in "$@"; do
  IFS=: read -r tag wl dt pass regex impl <<<"$cell"
  left=$((LIMIT - SECONDS)); ((left < 40)) && { echo "skipped $tag: ${left}s left"; continue; }
  rep=/tmp/ncu_$tag
  timeout $left "$NCU" --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters ${NCU_METRICS:+--metrics "$NCU_METRICS"} ${NCU_ARGS:-} \
    -k "regex:$regex" \
    --launch-count 1 --export "$rep" --force-overwrite \
    python benchmarks/conv_profile.py --impl "${impl:-md_accel}" --workloads "$wl" --dtypes "$dt" --passes "$pass" \
    --graph "${NCU_GRAPH:-random_sym:4000:312000}" > "$R/ncu_$tag.log" 2>&1
  echo "== $tag rc=$? (${SECONDS}s)"
  "$NCU" --import "$rep.ncu-rep" --page details > "$R/ncu_$tag.txt" 2>&1
  "$NCU" --import "$rep.ncu-rep" --page source --csv --print-source sass > "$R/ncu_${tag}_sass.csv" 2>&1
  python benchmarks/ncu_sass_summary.py "$R/ncu_${tag}_sass.csv" > "$R/ncu_${tag}_top.txt" 2>&1
  gzip -f "$R/ncu_${tag}_sass.csv"
  grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Issue Slots|No Eligible|Local Memory Spill|dram__|lts__" \
    "$R/ncu_$tag.txt" | sed -E 's/ +/ /g' | head -24
  cat "$R/ncu_${tag}_top.txt"
done
(cd "$OUT" && tar czf results.tar.gz r)
