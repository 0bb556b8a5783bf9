#!/usr/bin/env bash
# Session 51, call 1 (fresh machine): stages the peers, builds the op library from this csrc (returned as
# $OUT/gpu_lib.tar.xz for calls 2-3), runs tests/gpu/test_tp_conv_cuda.py (whole file: the two checks added after
# session 50's last GPU run among them), then the double-backward pass of the two cells under 1.3x (sevennet_0
# float32, mace_mp0_medium float64) with md_accel's default, its atomic mode (no grad_x rows: what the rows cost)
# and cuEquivariance, at least 1.5 s per cell, nvidia-smi every 100 ms.
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
for wd in sevennet_0:float32 mace_mp0_medium:float64; do
  IFS=: read -r wl dt <<<"$wd"
  timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_atomic,cueq --workloads $wl \
    --dtypes $dt --passes dbwd --repeats 10 --min-seconds 1.5 --graph random_sym:4000:312000 \
    --reference-cache .gpu/refcache --out $R/dbwd_${wl}_$dt > $R/dbwd_${wl}_$dt.log 2>&1
  echo "== $wl $dt rc=$? (${SECONDS}s)"
  grep -E " dbwd |check:" $R/dbwd_${wl}_$dt.log | cut -c1-110
done
smi_stop
for f in $R/dbwd_*/kernels.json; do python benchmarks/smi_join.py $f $R/smi.csv > ${f%/kernels.json}.smi_join.txt 2>&1; done
(cd $OUT && tar czf results.tar.gz r logs 2>/dev/null)
