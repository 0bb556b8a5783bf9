#!/usr/bin/env bash
# Session 43, call 8 (after the staging call: .peers/tab into .gpu/site on the same warm machine): the kernel table
# with one process per workload and dtype (md_accel, then cuEquivariance in e3nn's basis; all three passes), the
# cells nearest 1.3x first: does the table's single process (calls 3-4, 6) cost md_accel what call 6 measured?
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen30.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
for spec in mace_mp0_medium:float64 mace_large:float32 sevennet_0:float32 mace_mp0_medium:float32 mace_large:float64 \
            nequip_l3:float64 sevennet_0:float64 mace_first:float32 sevennet_l3i5:float32 nequip_l3:float32 \
            mace_first:float64 sevennet_l3i5:float64; do
  if ((SECONDS > ${STOP_S:-500})); then echo "skipped $spec (${SECONDS}s)"; continue; fi
  wl=${spec%%:*} dt=${spec##*:}
  timeout $((${LIMIT_S:-575} - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --repeats 10 --workloads $wl \
    --dtypes $dt --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out $R/$wl.$dt \
    > $R/$wl.$dt.log 2>&1
  echo "== $spec rc=$? (${SECONDS}s): $(grep -E '^  (md_accel|cueq) +(fwd|fwd_bwd|dbwd) ' $R/$wl.$dt.log | awk '{printf "%s %s %s | ", $1, $2, $3}')"
done
(cd $OUT && tar czf results.tar.gz r)
