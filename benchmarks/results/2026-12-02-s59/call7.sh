#!/usr/bin/env bash
# Session 59, call 7 (a fresh machine; carry .peers/tab .gpu/gpu_lib.tar.xz .gpu/gpu_k41.tar.xz: GEN 41's kernels of
# tp-tests, built here): mace_mp0_medium float64's forward + backward and double backward, md_accel and cuEquivariance,
# in three processes one after the other (how far the peer's time moves with its process), then nequip_l3's double
# backward in both dtypes, md_accel alone, each kernel's device time (--kernel-times: the g_grad_out kernel's share).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
export PYTHONPATH=$PWD/.gpu/site SMI_LOG=100 WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
for k in 1 2 3; do
  timeout $((420 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 \
    --workloads mace_mp0_medium --passes fwd_bwd,dbwd --repeats 10 --min-seconds 1.0 \
    --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/medium64_$k > $R/medium64_$k.log 2>&1
  echo "== mace_mp0_medium float64, process $k: rc=$? (${SECONDS}s)"
  grep -E " (fwd_bwd|dbwd) " $R/medium64_$k.log | cut -c1-100
done
timeout $((560 - SECONDS)) python benchmarks/kernels.py --impls md_accel --dtypes float32,float64 \
  --workloads nequip_l3 --passes dbwd --kernel-times --repeats 10 --min-seconds 0.3 \
  --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/nequip_kt > $R/nequip_kt.log 2>&1
echo "== nequip_l3 kernel times: rc=$? (${SECONDS}s)"
grep -E "^\[kernels\] [a-z_0-9]+ float| dbwd |^ +[0-9.]+ ms +x" $R/nequip_kt.log | cut -c1-130 | head -24
smi_stop
find $R -name "*.png" -delete
(cd $OUT && tar czf r.tar.gz r && rm -rf r)
