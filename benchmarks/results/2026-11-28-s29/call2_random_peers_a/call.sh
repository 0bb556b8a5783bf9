#!/usr/bin/env bash
# Prepared in session 27, GRAPH added in session 28: kernels.py with every peer and the fused double-backward
# loss, one call per half of the workloads ($1), e.g. "sevennet_l3i5,sevennet_0,nequip_l3" then
# "mace_mp0_medium,mace_first,mace_large"; GRAPH (default cu:4000:6.0), e.g. random:4000:312000: FlashTP-style
# uniform random edges at the copper graph's size, not yet measured on a GPU. IMPLS: e3nn is in by default (#3 asks for
# it in the same run; session 28's copper table ran without it).
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_lib.tar.xz (if built from this csrc) .peers/k .gpu/s29
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf results.tar.gz r); }
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source .peers/k/setup-on-gpu.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
timeout ${2:-540} python benchmarks/kernels.py --impls ${IMPLS:-md_accel,md_accel_atomic,cueq,oeq_det,oeq_atomic,e3nn} --repeats ${REPEATS:-20} \
  --budget ${3:-500} --workloads $1 --graph ${GRAPH:-cu:4000:6.0} --out $R/kernels > $R/kernels.log 2>&1
echo "rc=$?"; pack
grep -E "kernels\] [a-z]| (fwd|fwd_bwd|dbwd) |loss alone" $R/kernels.log | head -150
