#!/usr/bin/env bash
# Session 57, call 4 (a fresh machine; carry .gpu/gpu_lib.tar.xz, call 1's op library: csrc/ unchanged): GEN 38 (GEN
# 37 less p1_tma: the generated sources of GEN 36 again) built here, tests/gpu/test_tp_conv_cuda.py on it, then
# md_accel alone over the six workloads, both dtypes, the three passes, against the GEN 37 table of calls 2-3.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/c"
MD_ACCEL_NO_BUILD=1 PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py tp-tests tp-gpu-tests --jobs 16 --name k38 \
  > "$OUT/c/prebuild.log" 2>&1
echo "prebuild rc=$? (${SECONDS}s)"; tail -n2 "$OUT/c/prebuild.log"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((330 - SECONDS)) bash tools/gpu_check.sh > "$OUT/c/check.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/c/check.log" | cut -c1-200 | tail -8
export SMI_LOG=100 WHEELS=.peers/none TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
timeout $((470 - SECONDS)) python benchmarks/kernels.py --impls md_accel --dtypes float32,float64 --repeats 10 \
  --min-seconds 0.3 --graph random_sym:4000:312000 --out $R/gen38 > $R/gen38.log 2>&1
echo "== gen38 md_accel rc=$? (${SECONDS}s)"
smi_stop
awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +(fwd|fwd_bwd|dbwd) / {printf "%s %s %s\n", c, $2, $3}' $R/gen38.log
grep "check:" $R/gen38.log | head -12
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
