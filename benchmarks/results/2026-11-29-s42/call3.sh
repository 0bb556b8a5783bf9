#!/usr/bin/env bash
# Session 42, call 3 on a fresh machine: do md_accel's kernels run faster with the node features x kept in L2?
# benchmarks/pass_breakdown.py, md_accel alone, the six workloads, three passes, float64 then float32, without and
# with an access-policy window over x (persisting lines, the persisting-L2 limit at the device's maximum), in turn
# twice, each run its own process.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_tab.tar.xz (tp-tests' default kernels)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=/nonexistent
source tools/gpu_call_env.sh 2> /dev/null
for v in ${VARIANTS:-none x none x}; do
  if ((SECONDS > 480)); then echo "skipped $v (${SECONDS}s)"; continue; fi
  tag=$v.$SECONDS
  timeout $((590 - SECONDS)) python benchmarks/pass_breakdown.py --l2-window $v \
    --workloads ${WLS:-mace_mp0_medium,mace_large,nequip_l3,sevennet_l3i5,sevennet_0,mace_first} \
    --dtypes float64,float32 --passes fwd,fwd_bwd,dbwd --out $R/$tag.json > $R/$tag.log 2>&1
  echo "== $v rc=$? (${SECONDS}s)"
  grep -E "^==" $R/$tag.log | sed -E 's/ \(prelude none\)//; s/; per call.*//; s/, max window [0-9.]+ MiB\)/)/' | head -40
done
(cd $OUT && tar czf results.tar.gz r)
