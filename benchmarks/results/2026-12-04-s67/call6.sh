#!/usr/bin/env bash
# Session 67, call 6, a fresh machine (carry .peers/tab, .peers/av: ase and vesin alone, .gpu/gpu_lib.tar.xz and
# .gpu/gpu_k45.tar.xz): the kernel table on the copper graph (kernels.py's default, fcc Cu 4,000 atoms at r_cut
# 6 A, ~312,000 edges), float64, all six workloads, the three passes, md_accel and cuEquivariance in one process
# (OpenEquivariance, whose extension builds for about a minute on a fresh machine, and e3nn left out for time).
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/av/wheels SMI_LOG=200
source tools/gpu_call_env.sh 2> /dev/null
timeout $((225 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 --repeats 10 \
  --min-seconds 0.6 --budget 195 --graph cu:4000:6.0 --reference-cache .gpu/refcache --out "$R/cu64" > "$R/cu64.log" 2>&1
echo "== cu64 rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/cu64/kernels.json" "$R/smi.csv" > "$R/smi_join.txt" 2>&1
find "$R" -name "*.png" -delete
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:|graph" "$R/cu64.log" | cut -c1-110
(cd "$OUT" && tar czf results.tar.gz r)
