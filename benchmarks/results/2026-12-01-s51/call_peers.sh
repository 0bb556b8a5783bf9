#!/usr/bin/env bash
# Session 51, calls 2-3 (session 50's script, not run there): the kernel table with every peer at GEN 33 (the double backward's grad_w into its incoming
# gg_w, the default): md_accel's default, cuEquivariance, OpenEquivariance in both modes and e3nn, the six
# workloads, the three passes, one dtype per call ($1), at least 1.5 s per cell, the clocks logged. Session 47's
# call_peers.sh (session 46's) with the peers staged again where the machine is fresh. The graph has both directions
# of every edge (OpenEquivariance's deterministic backward needs it).
# Carry: .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz (call 1's) .gpu/gpu_gen33.tar.xz .gpu/refcache
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1); echo "staged the peers again"
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext  # OpenEquivariance's JIT extension, kept for the next call
PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > /dev/null 2>&1
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq,oeq_det,oeq_atomic,e3nn \
  --dtypes $1 --repeats 10 --min-seconds 1.5 --budget $((565 - SECONDS)) --graph random_sym:4000:312000 \
  --reference-cache .gpu/refcache --out $R/peers_$1 > $R/peers_$1.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" $R/peers_$1.log | cut -c1-100 | head -150
python benchmarks/smi_join.py $R/peers_$1/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
(cd $OUT && tar czf results.tar.gz r)
