#!/usr/bin/env bash
# Session 60, calls 2 and 3 (call 1 staged the machine), session 59's call_peers.sh: the kernel table with
# every peer: md_accel (MD_ACCEL_TP_TUNING from the environment, default if unset), cuEquivariance, OpenEquivariance in
# both modes and e3nn, the workloads of $WORKLOADS (all six), the three passes, one dtype per
# call ($1), at least 1.0 s per cell, the clocks logged; the peers already staged.
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1); echo "staged the peers again"
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext  # OpenEquivariance's JIT extension, kept for the next call
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq,oeq_det,oeq_atomic,e3nn \
  --dtypes $1 --workloads ${WORKLOADS:-mace_mp0_medium,sevennet_l3i5,mace_large,mace_first,sevennet_0,nequip_l3} --repeats 10 --min-seconds 1.0 --budget $((565 - SECONDS)) --graph random_sym:4000:312000 \
  --reference-cache .gpu/refcache --out $R/peers_$1 > $R/peers_$1.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" $R/peers_$1.log | cut -c1-100 | head -150
python benchmarks/smi_join.py $R/peers_$1/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
find $R -name "*.png" -delete
(cd $OUT && tar czf results.tar.gz r)
