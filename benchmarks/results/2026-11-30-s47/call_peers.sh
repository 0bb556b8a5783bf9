#!/usr/bin/env bash
# Session 47, calls 5-6 (after staging on the same warm machine: carry .peers/tab and run
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
# ): the kernel table with every peer at GEN 32 (session 46 took it at GEN 31, then GEN 32 changed the float64
# double backward of nequip_l3 and sevennet_l3i5). md_accel's default, cuEquivariance, OpenEquivariance in both
# modes and e3nn, the six workloads, the three passes, one dtype per call ($1), at least 1.5 s per cell, the clocks
# logged. The graph has both directions of every edge (OpenEquivariance's deterministic backward needs it).
# Carry: .peers/oeq (openequivariance 0.7.0 alone, from .peers/full) .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext  # OpenEquivariance's JIT extension, kept for the next call
PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > /dev/null 2>&1
source tools/gpu_call_env.sh 2> /dev/null
timeout $((580 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq,oeq_det,oeq_atomic,e3nn \
  --dtypes $1 --repeats 10 --min-seconds 1.5 --budget $((560 - SECONDS)) --graph random_sym:4000:312000 \
  --reference-cache .gpu/refcache --out $R/peers_$1 > $R/peers_$1.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" $R/peers_$1.log | cut -c1-100 | head -150
python benchmarks/smi_join.py $R/peers_$1/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
(cd $OUT && tar czf results.tar.gz r)
