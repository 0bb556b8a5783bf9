#!/usr/bin/env bash
# Prepared in session 28: the forward's accumulator budget (MD_ACCEL_TP_TUNING=fwd_acc=N; default 48) and the
# forward's prefetch of the next edge's y and x (prefetch=31: PF_DEFAULT | PF_FWD_XY) on all six workloads,
# md_accel alone, forward pass only, defaults and the variants in turn, twice as time allows. min_warps32=20
# (launch bounds for 20 warps per SM on the float32 kernels) takes both 32-channel forwards to 96 registers
# without spills (24: 80 registers and 392-664 bytes of spills). Session 28's ptxas
# counts (forward kernel, float32 / float64 registers and spill bytes): nequip_l3 48: 128 / 168 + 344 B spills,
# 32: 125 / 166, 24: 96 / -, 16: 72 / 162; sevennet_l3i5 48: 128 / 168 + 40 B, 32: 96 / 168, 24: 80, 16: 72.
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_facc.tar.xz .gpu/gpu_lib.tar.xz (if built from this csrc) .peers/k/wheels .gpu/s29
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/k/wheels/ase-*.whl .peers/k/wheels/vesin-*.whl
export PYTHONPATH=$PWD:/tmp/site
V="fwd_acc=16 fwd_acc=24 fwd_acc=32 prefetch=31 min_warps32=20"
for t in "" $V "" $V; do
  left=$((560 - SECONDS)); [ $left -lt 40 ] && { echo "skipped '$t': ${left}s left"; continue; }
  tag=${t:-default}; tag=${tag//=/}.$SECONDS
  MD_ACCEL_TP_TUNING=$t timeout $((left < 100 ? left : 100)) python benchmarks/kernels.py --impls md_accel --passes fwd \
    --repeats 15 --out $R/$tag > $R/$tag.log 2>&1
  echo "== ${t:-default} (rc=$?)"; awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +fwd / {printf "%s %s | ", c, $3} END {print ""}' $R/$tag.log
done
(cd $OUT && tar czf results.tar.gz r)
