#!/usr/bin/env bash
# Session 43, call 5: why the rows in grad_w (md_accel_gwrows) beat the workspace rows (the default) in the double
# backward of mace_mp0_medium float64 and mace_large float32 (calls 3-4): each kernel's time, md_accel alone
# (benchmarks/pass_breakdown.py), default, gwrows, default in one process per cell.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_proc30.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh 2> /dev/null
for spec in mace_mp0_medium:float64 mace_large:float32 mace_mp0_medium:float32 mace_large:float64; do
  if ((SECONDS > 400)); then echo "skipped $spec (${SECONDS}s)"; continue; fi
  wl=${spec%%:*} dt=${spec##*:}
  timeout $((560 - SECONDS)) python benchmarks/pass_breakdown.py --workloads $wl --dtypes $dt \
    --impls md_accel,md_accel_gwrows,md_accel --passes dbwd,fwd_bwd --out $R/$wl.$dt.json > $R/$wl.$dt.log 2>&1
  grep -E "^==|^ +[0-9.]+ ms" $R/$wl.$dt.log | sed -E 's/ \(prelude none\)//; s/; L2 window none; per call.*//' | cut -c1-150
done
(cd $OUT && tar czf results.tar.gz r)
