#!/usr/bin/env bash
# Session 49, call G (a fresh machine): the rows mode auto extended to the double backward (the final backwards:
# csrc/final_backward.h). Builds the op library from this csrc, runs tests/gpu/test_tp_conv_cuda.py -k 'rows or
# atomic', then the double-backward pass of the three float32 cells that call F and session 45 put closest to 1.3x
# (mace_mp0_medium, mace_large, sevennet_0): md_accel (the new default), md_accel_scratch, cuEquivariance, at least
# 1.5 s per cell, nvidia-smi every 100 ms.
# Carry: .peers/tab .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage_tab.log" 2>&1)
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py PYTEST_ADDOPTS="-k 'rows or atomic'" GPU_TEST_LIMIT=120 \
  bash tools/gpu_check.sh > "$OUT/r/check.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/r/check.log" | cut -c1-200 | tail -8
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
timeout $((315 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_scratch,cueq --passes dbwd \
  --workloads mace_mp0_medium,mace_large,sevennet_0 --dtypes float32 --repeats 10 --min-seconds 1.5 \
  --budget $((300 - SECONDS)) --graph random_sym:4000:312000 --out $R/dbwd > $R/dbwd.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float| dbwd " $R/dbwd.log | cut -c1-110 | head -30
python benchmarks/smi_join.py $R/dbwd/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
cp "$OUT/gpu_lib.tar.xz" "$R/" 2>/dev/null
(cd $OUT && tar czf results.tar.gz r logs 2>/dev/null)
