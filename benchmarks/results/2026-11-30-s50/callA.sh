#!/usr/bin/env bash
# Session 50, calls A1-A3 (fresh machines; A1 at 72a16e9, A2 at 83cbb35, A3 at 1e99588): the double backward's grad_w into its incoming gg_w (csrc/final_backward.h
# DonatedGgW, GEN 33 kernels). Stages the peers for calls B-C, builds the op library from this csrc (returned as
# $OUT/gpu_lib.tar.xz), runs tests/gpu/test_tp_conv_cuda.py (whole file), then the double-backward pass of the six
# workloads in both dtypes: md_accel (the new default), md_accel_keep_ggw (session 49's default: the rows in grad_w,
# grad_w in a buffer of its own), cuEquivariance; at least 1 s per cell, nvidia-smi every 100 ms.
# Carry: .peers/tab .peers/oeq .gpu/gpu_gen33.tar.xz .gpu/refcache
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage_tab.log" 2>&1)
(PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > "$OUT/r/stage_oeq.log" 2>&1)
echo "staged: $(ls .gpu/site | wc -l) entries in .gpu/site (${SECONDS}s)"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=240 bash tools/gpu_check.sh > "$OUT/r/check.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/r/check.log" | cut -c1-200 | tail -12
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_keep_ggw,cueq --passes dbwd \
  --dtypes float32,float64 --repeats 10 --min-seconds 1.0 --budget $((570 - SECONDS)) \
  --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/dbwd > $R/dbwd.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| dbwd |check:" $R/dbwd.log | cut -c1-110 | head -60
python benchmarks/smi_join.py $R/dbwd/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
cp "$OUT/gpu_lib.tar.xz" "$R/" 2>/dev/null
(cd $OUT && tar czf results.tar.gz r logs 2>/dev/null)
