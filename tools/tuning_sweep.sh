#!/usr/bin/env bash
# A tuning sweep on the device, md_accel alone: benchmarks/kernels.py once per MD_ACCEL_TP_TUNING variant, the
# variants in the order given (repeat them for a second run in turn), all within LIMIT_S seconds from its start.
# Usage (from a call script that sourced tools/gpu_call_env.sh, so $R exists):
#   tools/tuning_sweep.sh $((560 - SECONDS)) "default fwd_cpl=2 default fwd_cpl=2" --passes fwd --workloads nequip_l3
# "default" is the defaults. Each run writes $R/<variant>.<second>.log and its kernels.json, and prints one line per
# run: the variant, its exit status and md_accel's median per workload, dtype and pass. e3nn's check results are
# kept across runs (--reference-cache .gpu/refcache). A run gets at most SWEEP_RUN_S seconds (default 120).
set -u
limit=$1 variants=$2
shift 2
for v in $variants; do
  left=$((limit - SECONDS))
  if ((left < 40)); then echo "skipped $v: ${left}s left"; continue; fi
  t=$v; [[ $v == default ]] && t=""
  tag=${v//[=,]/}.$SECONDS
  run=${SWEEP_RUN_S:-120}
  MD_ACCEL_TP_TUNING=$t timeout $((left < run ? left : run)) python benchmarks/kernels.py --impls md_accel "$@" \
    --reference-cache "$PWD/.gpu/refcache" --out "$R/$tag" > "$R/$tag.log" 2>&1
  echo "== $v (rc=$?, ${SECONDS}s)"
  awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +(fwd|fwd_bwd|dbwd) / {printf "%s %s %s | ", c, $2, $3} END {print ""}' \
    "$R/$tag.log"
done
