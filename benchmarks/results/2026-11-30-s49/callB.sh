#!/usr/bin/env bash
# Session 49, call B (on call A's warm machine, or staging again on a fresh one): the forward + backward pass with
# every peer at the new default (rows mode auto: the first-order backward keeps its grad_x rows in grad_w),
# md_accel_scratch (the previous default) in the same run; both dtypes, the six workloads, at least 1.5 s per cell,
# nvidia-smi every 100 ms. The forward and the double backward run the code of session 47's table (unchanged).
# The graph has both directions of every edge (OpenEquivariance's deterministic backward needs it).
# Carry: .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1); echo "staged the peers again"
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext  # OpenEquivariance's JIT extension
PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > /dev/null 2>&1
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py \
  --impls md_accel,md_accel_scratch,cueq,oeq_det,oeq_atomic,e3nn --passes fwd_bwd --dtypes float32,float64 \
  --repeats 10 --min-seconds 1.5 --budget $((565 - SECONDS)) --graph random_sym:4000:312000 \
  --reference-cache .gpu/refcache --out $R/fwd_bwd > $R/fwd_bwd.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| fwd_bwd |check:" $R/fwd_bwd.log | cut -c1-110 | head -120
python benchmarks/smi_join.py $R/fwd_bwd/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
(cd $OUT && tar czf results.tar.gz r)
