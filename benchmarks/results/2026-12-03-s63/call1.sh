#!/usr/bin/env bash
# Session 63, call 1 (a fresh machine; carry .gpu/gpu_kpf.tar.xz: tp-tests' kernels at GEN 43, default and
# pf_evict=1; .gpu/gpu_kmma.tar.xz: the same under fwd_mma=9 and fwd_mma=13; .peers/full/wheels): the op library
# built, then md_accel alone, variants in turn:
# 1. float32 forwards of every workload: the scalar forward (default) against the tensor-core forward
#    (Tuning.fwd_mma, md_accel/ops/_codegen_mma.py) at 9 and 13 n-tiles per pass (kernels.py's check: the reference);
# 2. mace_mp0_medium float64 forward + backward and double backward: default against pf_evict=1, twice.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=none bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
echo "op library build rc=$? (${SECONDS}s)"
tail -n 2 "$OUT/r/build.log"
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
run() {  # $1: name, $2: tuning ("default": none), then kernels.py's arguments
  local name=$1 v=$2; shift 2
  if [[ $v == default ]]; then unset MD_ACCEL_TP_TUNING; else export MD_ACCEL_TP_TUNING=$v; fi
  local left=$((575 - SECONDS)); ((left < 30)) && { echo "skipped $name"; return; }
  timeout $left python benchmarks/kernels.py --impls md_accel "$@" --repeats 20 --min-seconds 1.0 \
    --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out "$R/$name" > "$R/$name.log" 2>&1
  echo "== $name rc=$? (${SECONDS}s)"
  grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check" "$R/$name.log" | cut -c1-110 | head -14
  unset MD_ACCEL_TP_TUNING
}
for v in default fwd_mma=9 fwd_mma=13; do
  run "f32fwd_${v//=/}" "$v" --dtypes float32 --passes fwd
done
for rep in 1 2; do
  for v in default pf_evict=1; do
    run "pf_${v//=/}_$rep" "$v" --workloads mace_mp0_medium --dtypes float64 --passes fwd_bwd,dbwd
  done
done
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
