#!/usr/bin/env bash
# Session 72, call 3, a fresh machine (carry .peers/full: cuEquivariance, OpenEquivariance and the rest;
# .gpu/gpu_lib.tar.xz: session 70's op library, csrc unchanged; .gpu/gpu_s71all.tar.xz: the six workloads' kernels at
# GEN 46): #3's float64 kernel table with every peer at GEN 46 (md_accel, cuEquivariance, OpenEquivariance
# deterministic and atomic, e3nn), all six workloads, the three passes, one process, each cell over at least 0.5 s,
# within what is left of the session's device time (kernels.py's --budget skips the cells past it).
set -u
cd "$(dirname "$0")/../../.."
(PEERS_SITE=$PWD/.gpu/site source .peers/full/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels SMI_LOG=200
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext
source tools/gpu_call_env.sh > /dev/null || exit 3
LIMIT=${LIMIT:-430}
timeout $((LIMIT - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq,oeq_det,oeq_atomic,e3nn \
  --dtypes float64 --repeats 10 --min-seconds 0.5 --budget $((LIMIT - 25 - SECONDS)) \
  --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/peers_float64" > "$R/peers_float64.log" 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:|skipped" "$R/peers_float64.log" | cut -c1-100 | head -120
python benchmarks/smi_join.py "$R/peers_float64/kernels.json" "$R/smi.csv" > "$R/smi_join.txt" 2>&1
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
