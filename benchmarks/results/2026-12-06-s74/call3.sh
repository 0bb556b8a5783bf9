#!/usr/bin/env bash
# Session 74, calls 3 and 4 (call 1's machine, warm; carry .peers/tab: cuEquivariance): GEN 48's kernel table against
# cuEquivariance in DTYPE ($1, default float64; all six workloads, the three passes, one process, each cell at least 0.6 s), the clock
# log running. kernels.py checks each implementation against e3nn's float64 results on a subgraph first.
set -u
dt=${1:-float64}
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
left=$((430 - SECONDS))
timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq --dtypes $dt --repeats 10 --min-seconds 0.6 \
  --budget $((left - 25)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/$dt" \
  > "$R/$dt.log" 2>&1
echo "== $dt rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/$dt/kernels.json" "$R/smi.csv" > "$R/${dt}_smi.txt" 2>&1
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:|floor" "$R/$dt.log" | cut -c1-120
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
