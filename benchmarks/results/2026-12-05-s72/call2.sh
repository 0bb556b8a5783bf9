#!/usr/bin/env bash
# Session 72, call 2 (carry .peers/tab: cuEquivariance; .gpu/gpu_lib.tar.xz: session 70's op library, csrc unchanged;
# .gpu/gpu_s71all.tar.xz: the six kernels.py workloads' kernels at GEN 46, default tuning): GEN 46 over every workload,
# md_accel and cuEquivariance in one process per dtype, the three passes, float64 then float32, the clock log running.
# Each run checks md_accel against e3nn's float64 results first (kernels.py's check).
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
for dt in float64 float32; do
  [[ $dt == float64 ]] && left=$((300 - SECONDS)) || left=$((570 - SECONDS))
  timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq --dtypes $dt --repeats 10 --min-seconds 0.6 \
    --budget $((left - 25)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/$dt" \
    > "$R/$dt.log" 2>&1
  echo "== $dt rc=$? (${SECONDS}s)"
  python benchmarks/smi_join.py "$R/$dt/kernels.json" "$R/smi.csv" > "$R/${dt}_smi.txt" 2>&1
  grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" "$R/$dt.log" | cut -c1-100
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
