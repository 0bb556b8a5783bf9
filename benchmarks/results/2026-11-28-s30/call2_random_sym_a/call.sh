#!/usr/bin/env bash
# Prepared in session 29: the kernel table on a random graph with both directions of every edge
# (kernels.py --graph random_sym:4000:312000), where OpenEquivariance's deterministic backward is right (session
# 29 found it wrong on the directed random graph); every peer, no e3nn (session 29 ran it on the directed graph).
# $1: workloads, e.g. "sevennet_l3i5,sevennet_0,nequip_l3" then "mace_mp0_medium,mace_first,mace_large".
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_lib.tar.xz .peers/k .gpu/s30
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source .peers/k/setup-on-gpu.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
timeout ${2:-540} python benchmarks/kernels.py --impls ${IMPLS:-md_accel,md_accel_atomic,cueq,oeq_det,oeq_atomic} \
  --repeats ${REPEATS:-10} --budget ${3:-500} --workloads $1 --graph random_sym:4000:312000 --out $R/kernels \
  > $R/kernels.log 2>&1
echo "rc=$?"; (cd $OUT && tar czf results.tar.gz r)
grep -E "kernels\] [a-z]| (fwd|fwd_bwd|dbwd) |check" $R/kernels.log | head -150
