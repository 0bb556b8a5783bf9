#!/usr/bin/env bash
# Session 64, call 1 (carry .gpu/gpu_lib.tar.xz: session 63's call-5 op library, csrc unchanged since; .gpu/gpu_kdef.tar.xz:
# tp-tests' kernels at GEN 43, built here; .peers/full/wheels): does the number of receivers per resident block slot
# (the "waves") set how far the kernels sit from their byte floor? md_accel alone, its defaults:
# 1. the forwards of the six workloads, both dtypes, on random symmetric graphs of 78 edges per node and 3,960 / 4,000 /
#    4,400 / 8,000 nodes (the tables' graph is 4,000);
# 2. mace_mp0_medium float64 forward + backward and double backward at 4,000 nodes with the backward's receivers in 1
#    (the launcher's choice there), 2 and 3 parts (MD_ACCEL_BWD_SPLIT), each kernel's time (--kernel-times);
# 3. ncu's launch statistics and occupancy (waves per SM) of the forwards on the 4,000-node graph.
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
run() {  # $1: name, then kernels.py's arguments
  local name=$1; shift
  local left=$((540 - SECONDS)); ((left < 30)) && { echo "skipped $name"; return; }
  timeout $left python benchmarks/kernels.py --impls md_accel "$@" --repeats 20 --min-seconds 0.4 --check-nodes 8 \
    --out "$R/$name" > "$R/$name.log" 2>&1
  echo "== $name rc=$? (${SECONDS}s)"
}
for n in 4000 3960 4400 8000; do
  run "fwd_n$n" --passes fwd --graph random_sym:$n:$((78 * n))
  grep -E "^\| md_accel" "$R/fwd_n$n.log" | head -20 | cut -c1-150
done
for s in 1 2 3; do
  MD_ACCEL_BWD_SPLIT=$s run "mm64_split$s" --workloads mace_mp0_medium --dtypes float64 --passes fwd_bwd,dbwd \
    --graph random_sym:4000:312000 --kernel-times
  grep -E "^\| md_accel|bwd_kernel|dbwd_kernel" "$R/mm64_split$s.log" | head -12 | cut -c1-150
done
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
left=$((590 - SECONDS))
if ((left > 40)); then
  timeout $left "$NCU" --clock-control none --section LaunchStats --section Occupancy --section SpeedOfLight \
    -k "regex:^fwd_kernel" --launch-count 12 python benchmarks/conv_profile.py \
    --workloads mace_mp0_medium,mace_large,mace_first,sevennet_l3i5,sevennet_0,nequip_l3 --passes fwd \
    --graph random_sym:4000:312000 > "$R/ncu_fwd_waves.txt" 2>&1
  echo "== ncu rc=$? (${SECONDS}s)"
  grep -E "fwd_kernel|Waves Per SM|Block Limit Registers|Theoretical Occupancy|Achieved Occupancy|Duration|SM Active Cycles|Elapsed Cycles" \
    "$R/ncu_fwd_waves.txt" | sed -E 's/ +/ /g' | cut -c1-110 | head -120
fi
(cd "$OUT" && tar czf results.tar.gz r)
