#!/usr/bin/env bash
# On the GPU machine, after tools/gpu_call_start.sh (R, the op library, the peers): issue #3's item 1 in one process,
# md_accel (MD_ACCEL_TP_TUNING from the environment, the defaults if unset) against cuEquivariance, mace_mp0_medium
# float64's double backward on random_sym:4000:312000, each cell timed over at least 1.0 s with its op time.
# Usage (device): bash tools/gpu_item1.sh TAG SECONDS     (results in $R/TAG/, the log $R/TAG.log)
set -u
tag=${1:?usage: tools/gpu_item1.sh TAG SECONDS} limit=${2:?usage: tools/gpu_item1.sh TAG SECONDS}
timeout "$limit" python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
  --passes dbwd --repeats 10 --min-seconds 1.0 --kernel-times --budget $((limit - 10)) --graph random_sym:4000:312000 \
  --reference-cache "$PWD/.gpu/refcache" --out "$R/$tag" > "$R/$tag.log" 2>&1
echo "== $tag rc=$? (md_accel: ${MD_ACCEL_TP_TUNING:-defaults})"
grep -E " dbwd .*op " "$R/$tag.log"
