#!/usr/bin/env bash
# Session 42, call 8 on a fresh machine (another than calls 6-7's): the two double-backward cells nearest 1.3x,
# GEN 30, md_accel and cuEquivariance (e3nn's basis) in one process each, each kernel's time
# (benchmarks/pass_breakdown.py): mace_mp0_medium float64 and mace_large float32, then the other dtype of each.
# Carry: .peers/tab .gpu/gpu_lib.tar.xz .gpu/gpu_proc30.tar.xz (the two workloads' GEN 30 kernels)
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
for spec in mace_mp0_medium:float64 mace_large:float32 mace_mp0_medium:float32 mace_large:float64; do
  if ((SECONDS > 170)); then echo "skipped $spec (${SECONDS}s)"; continue; fi
  wl=${spec%%:*} dt=${spec##*:}
  timeout $((200 - SECONDS)) python benchmarks/pass_breakdown.py --workloads $wl --dtypes $dt --impls md_accel,cueq \
    --passes dbwd --out $R/$wl.$dt.json > $R/$wl.$dt.log 2>&1
  grep -E "^==" $R/$wl.$dt.log | sed -E 's/ \(prelude none\)//; s/; L2 window none; per call.*//'
done
(cd $OUT && tar czf results.tar.gz r)
