#!/usr/bin/env bash
# Session 43, call 6: the slow table process, kernel by kernel. kernels.py (md_accel, md_accel_gwrows, cueq in e3nn's
# basis; mace_mp0_medium and mace_large, the table's order) with --kernel-times: each cell's kernels and the GPU's
# busy time against the timed median. Then pass_breakdown.py's process on the same machine (calls 3-4 against 5:
# 13.0-13.2 ms in the table process, 12.0 in pass_breakdown's, for md_accel's mace_mp0_medium float64 dbwd).
# Carry: .peers/tab .gpu/gpu_lib.tar.xz .gpu/gpu_proc30.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
timeout $((440 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_gwrows,cueq --repeats 10 \
  --workloads mace_mp0_medium,mace_large --kernel-times --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
grep -E "^\[kernels\]|dbwd |kernels busy" $R/table.log | grep -v check | cut -c1-100
timeout $((570 - SECONDS)) python benchmarks/pass_breakdown.py --workloads mace_mp0_medium --dtypes float64 \
  --impls md_accel,cueq --passes dbwd --out $R/breakdown.json > $R/breakdown.log 2>&1
echo "== breakdown rc=$? (${SECONDS}s)"
grep -E "^==|busy" $R/breakdown.log | cut -c1-100
(cd $OUT && tar czf results.tar.gz r)
