#!/usr/bin/env bash
# Session 49, call C: tests/gpu/test_tp_conv_cuda.py -k rows after the mended peak check of the new test (call A:
# two create_graph peaks differed from mode False's by the caching allocator's block reuse), then the forward +
# backward table again in a second process (md_accel, md_accel_scratch and the three peers; e3nn's times are call
# B's), both dtypes, at least 1.5 s per cell, nvidia-smi every 100 ms.
# Carry: .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py PYTEST_ADDOPTS="-k rows" GPU_TEST_LIMIT=200 bash tools/gpu_check.sh \
  > "$OUT/r/check.log" 2>&1
echo "gpu_check rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/r/check.log" | cut -c1-160 | tail -8
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1); echo "staged the peers again"
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext  # OpenEquivariance's JIT extension
PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > /dev/null 2>&1
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py \
  --impls md_accel,md_accel_scratch,cueq,oeq_det,oeq_atomic --passes fwd_bwd --dtypes float32,float64 \
  --repeats 10 --min-seconds 1.5 --budget $((565 - SECONDS)) --graph random_sym:4000:312000 \
  --reference-cache .gpu/refcache --out $R/fwd_bwd2 > $R/fwd_bwd2.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| fwd_bwd " $R/fwd_bwd2.log | cut -c1-110 | head -80
python benchmarks/smi_join.py $R/fwd_bwd2/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
(cd $OUT && tar czf results.tar.gz r logs 2>/dev/null)
