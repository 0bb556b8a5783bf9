#!/usr/bin/env bash
# Session 55, call 4 (fresh machine; carry .gpu/gpu_lib.tar.xz (call 1's) .peers/tab): the workloads' generated
# kernels built here under the default tuning and p1_tma=3 while the cuEquivariance bundle installs; then
# mace_mp0_medium float64's double backward, md_accel and cuEquivariance in one process (GEN 37 default), and the
# other two 128-channel shapes (mace_large, mace_first), md_accel alone, default and p1_tma=3 in turn, forward +
# backward and double backward, both dtypes.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage_tab.log" 2>&1) &
export SMI_LOG=100 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
for v in default p1_tma=3; do
  PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py tp-tests --tuning $v --jobs 8 --name w${v%%=*} \
    > $R/prebuild_${v%%=*}.log 2>&1 &
done
wait; echo "prebuilt, staged (${SECONDS}s)"; tail -q -n1 $R/prebuild_*.log; tail -n2 $R/stage_tab.log
export PYTHONPATH=$PYTHONPATH:$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
timeout 90 python benchmarks/kernels.py --impls md_accel,cueq --workloads mace_mp0_medium --dtypes float64 \
  --passes dbwd --repeats 10 --min-seconds 1.0 --graph random_sym:4000:312000 --reference-cache .gpu/refcache \
  --out $R/peer_medium64 > $R/peer_medium64.log 2>&1
echo "== medium f64 dbwd md_accel, cueq rc=$? (${SECONDS}s)"; grep -E "loss alone| dbwd " $R/peer_medium64.log
for v in default p1_tma=3; do t=${v%%=*}; [[ $v == default ]] && v=
  MD_ACCEL_TP_TUNING=$v timeout $((320 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
    --workloads mace_large,mace_first --dtypes float64,float32 --passes fwd_bwd,dbwd --repeats 10 --min-seconds 0.3 \
    --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/$t > $R/$t.log 2>&1
  echo "== $t rc=$? ${SECONDS}s"; grep -E "^\[kernels\] mace|md_accel +(fwd_bwd|dbwd)" $R/$t.log
done
smi_stop
find $R -name "*.png" -delete
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
