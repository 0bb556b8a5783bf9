#!/usr/bin/env bash
# Session 75, call 2 (call 1's machine, warm; carry .peers/tab): mace_mp0_medium float64's three passes, md_accel
# (GEN 48) and cuEquivariance in one process, each cell at least 1.0 s, with each pass's kernels (--kernel-times).
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
left=$((300 - SECONDS))
timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
  --repeats 10 --min-seconds 1.0 --kernel-times --budget $((left - 20)) --graph random_sym:4000:312000 \
  --reference-cache "$PWD/.gpu/refcache" --out "$R/mm" > "$R/mm.log" 2>&1
echo "== rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/mm/kernels.json" "$R/smi.csv" > "$R/mm_smi.txt" 2>&1
cat "$R/mm_smi.txt"; grep -v "^\[" "$R/mm.log" | cut -c1-150 | tail -n 60
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
