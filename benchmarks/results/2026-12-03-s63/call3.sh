#!/usr/bin/env bash
# Session 63, call 3 (carry .gpu/gpu_lib.tar.xz: call 1's op library, csrc unchanged; .gpu/gpu_kpf.tar.xz: the default
# kernels; .gpu/gpu_kmma.tar.xz: fwd_mma=5 and fwd_mma=7 of the tensor-core forward revised after call 2 (TF32 split in integer operations,
# x loads at fixed offsets from per-block bases, the staging table lane-minor, the sender a step ahead, only weight and y lines prefetched); .peers/full/wheels): md_accel alone, float32 forwards of every
# workload, the scalar forward against the tensor-core forward at 5 and 7 n-tiles per pass; then ncu of the
# tensor-core forward (fwd_mma=7) of nequip_l3 (tools/gpu_ncu.sh: stall reasons by instruction).
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
run() {  # $1: name, $2: tuning ("default": none), then kernels.py's arguments
  local name=$1 v=$2; shift 2
  if [[ $v == default ]]; then unset MD_ACCEL_TP_TUNING; else export MD_ACCEL_TP_TUNING=$v; fi
  local left=$((575 - SECONDS)); ((left < 30)) && { echo "skipped $name"; return; }
  timeout $left python benchmarks/kernels.py --impls md_accel "$@" --repeats 20 --min-seconds 1.0 \
    --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out "$R/$name" > "$R/$name.log" 2>&1
  echo "== $name rc=$? (${SECONDS}s)"
  grep -E "^\[kernels\] [a-z_0-9]+ float| fwd |check" "$R/$name.log" | sed -E 's/^\[kernels\] ([a-z_0-9]+) float32.*/\1/' \
    | cut -c1-60 | paste -sd' ' | sed 's/  */ /g'
  unset MD_ACCEL_TP_TUNING
}
for v in default fwd_mma=5 fwd_mma=7; do
  run "f32fwd_${v//=/}" "$v" --dtypes float32 --passes fwd
done
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
MD_ACCEL_TP_TUNING=fwd_mma=7 LIMIT=$((590 - SECONDS)) bash tools/gpu_ncu.sh nq32:nequip_l3:float32:fwd:fwd_kernel_mma  # packs $OUT/r
