#!/usr/bin/env bash
# Session 29: mace_first / mace_mp0_medium float32 on the random graph again, with the time-based warm-up
# (call 3 timed md_accel's forward at 0.808 ms deterministic, 0.344 atomic: the same kernel).
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_lib.tar.xz .peers/k .gpu/s29
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
source .peers/k/setup-on-gpu.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
for g in random:4000:312000 random:4000:312000; do
  left=$((230 - SECONDS)); [ $left -lt 40 ] && break
  timeout $left python benchmarks/kernels.py --impls md_accel,md_accel_atomic,cueq --repeats 20 --dtypes float32 \
    --workloads mace_first,mace_mp0_medium --graph $g --out $R/k.$SECONDS > $R/k.$SECONDS.log 2>&1
  grep -E "kernels\] [a-z]| (fwd|fwd_bwd|dbwd) " $R/k.*.log | tail -22
done
(cd $OUT && tar czf results.tar.gz r)
