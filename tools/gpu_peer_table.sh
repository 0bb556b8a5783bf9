#!/usr/bin/env bash
# On the GPU machine: #3's kernel table with every peer for one dtype, in one process: md_accel (MD_ACCEL_TP_TUNING
# from the environment, the defaults if unset), cuEquivariance, OpenEquivariance deterministic and atomic, and e3nn,
# over the workloads of $WORKLOADS (default all six of benchmarks/workloads.py), the three passes, each cell timed over
# at least 1.0 s (the H200 holds its 700 W cap by lowering the clock), the clocks logged (benchmarks/smi_join.py).
# The peers come from the lean bundle .peers/tab (tools/peers_tab.sh) and .peers/oeq (OpenEquivariance alone),
# unpacked into .gpu/site unless an earlier call of this machine did; the op library as tools/gpu_call_env.sh finds it
# (carried .gpu/gpu_lib.tar.xz, or built by an earlier call). Results in $OUT/results.tar.gz (r/peers_<dtype>/).
# One dtype takes ~350-450 s on an H200 (all six workloads). LIMIT (default 585): the seconds the table may take, for a
# call that runs it after other work.               Usage (device): bash tools/gpu_peer_table.sh float64|float32
set -u
cd "$(dirname "$0")/.."
dtype=${1:?usage: tools/gpu_peer_table.sh float64|float32}
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1
   PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > /dev/null 2>&1)
  echo "unpacked the peers into .gpu/site"
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext  # OpenEquivariance's JIT extension, kept for the next call
source tools/gpu_call_env.sh 2> /dev/null  # exits 3 without an op library
# kernels.py's own default: every workload of benchmarks/workloads.py
LIMIT=${LIMIT:-585}
timeout $((LIMIT - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq,oeq_det,oeq_atomic,e3nn \
  --dtypes "$dtype" ${WORKLOADS:+--workloads "$WORKLOADS"} --repeats 10 --min-seconds 1.0 --budget $((LIMIT - 20 - SECONDS)) \
  --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out "$R/peers_$dtype" > "$R/peers_$dtype.log" 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" "$R/peers_$dtype.log" | cut -c1-100 | head -150
python benchmarks/smi_join.py "$R/peers_$dtype/kernels.json" "$R/smi.csv" > "$R/smi_join.txt" 2>&1
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
