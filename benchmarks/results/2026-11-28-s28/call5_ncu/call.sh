#!/usr/bin/env bash
# Session 28 call 5: ncu of md_accel's kernels where the table is weakest: mace_large float32 dbwd pass,
# mace_large float64 fwd_bwd pass, nequip_l3 float32 forward.
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/s28
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/k/wheels/ase-*.whl .peers/k/wheels/vesin-*.whl
export PYTHONPATH=$PWD:/tmp/site
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
prof() {  # tag workload dtype pass
  local left=$((185 - SECONDS)); [ $left -lt 20 ] && { echo "skipped $1"; return; }
  timeout $left $NCU --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section LaunchStats --section MemoryWorkloadAnalysis -k "regex:dbwd_kernel|bwd_kernel|fwd_kernel|gx_sum" \
    --launch-count 12 python benchmarks/conv_profile.py --workloads $2 --dtypes $3 --passes $4 > $R/ncu_$1.txt 2>&1
  echo "== $1 rc=$?"
  grep -E "^  [a-zA-Z_ ]+.*\(|Duration|Registers Per|Theoretical Occ|Achieved Occupancy|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Issue Slot|No Eligible" $R/ncu_$1.txt \
    | sed -E 's/ +/ /g; s/\(const T1.*TPDims\)//' | head -60
}
prof large_f32_dbwd mace_large float32 dbwd
prof nequip_f32_fwd nequip_l3 float32 fwd
prof large_f64_fwdbwd mace_large float64 fwd_bwd
(cd $OUT && tar czf results.tar.gz r)
