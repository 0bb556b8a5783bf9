#!/usr/bin/env bash
# Session 44, call 1: what slows md_accel's per-edge kernels in some processes. The GPU's clocks logged every 100 ms
# (SMI_LOG) beside kernels.py's table with --kernel-times (md_accel, cueq in e3nn's basis; mace_mp0_medium and
# mace_large, the table's order), then pass_breakdown.py's process on the same machine, then smi_join.py.
# After a staging call on the same warm machine (carry .peers/tab .gpu/gpu_lib.tar.xz;
# PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh). Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_proc30.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
timeout $((400 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --repeats 10 \
  --workloads mace_mp0_medium,mace_large --kernel-times --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
grep -E "^\[kernels\]|dbwd |kernels busy" $R/table.log | grep -v check | cut -c1-100
timeout $((540 - SECONDS)) python benchmarks/pass_breakdown.py --workloads mace_mp0_medium,mace_large --dtypes float64 \
  --impls md_accel,cueq --passes dbwd --out $R/breakdown.json > $R/breakdown.log 2>&1
echo "== breakdown rc=$? (${SECONDS}s)"
grep -E "^==|busy" $R/breakdown.log | cut -c1-100
smi_stop
python benchmarks/smi_join.py $R/table/kernels.json $R/smi.csv --passes dbwd 2>&1 | tail -40
(cd $OUT && tar czf results.tar.gz r)
