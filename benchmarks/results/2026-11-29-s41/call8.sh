#!/usr/bin/env bash
# Session 41, call 8 (on call 7's machine, still warm): is the slowdown of md_accel's double backward late in long runs (call 5's
# table, session 40's) the GPU warming? The float64 double backward of mace_mp0_medium, 100 calls timed and 100
# profiled, 40 times in one process (~2 minutes of memory-bound work), with the HBM and GPU temperatures, clocks,
# power and throttle reasons logged every 0.5 s (nvidia-smi).
# Carry: .peers/tab .gpu/gpu_lib.tar.xz .gpu/gpu_proc.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
nvidia-smi --query-gpu=timestamp,temperature.gpu,temperature.memory,clocks.sm,clocks.mem,power.draw,clocks_event_reasons.active \
  --format=csv -lms 500 > "$R/smi.csv" 2>&1 &
smi=$!
dt=$(printf 'float64,%.0s' $(seq 40)); dt=${dt%,}
timeout 150 python benchmarks/pass_breakdown.py --workloads mace_mp0_medium --dtypes $dt --repeats 100 \
  --out $R/warm.json > $R/warm.log 2>&1
echo "rc=$? (${SECONDS}s)"
grep -E "^== " $R/warm.log | awk '{print $8}' | tr '\n' ' '; echo
grep -E "dbwd_kernel_dd" $R/warm.log | awk '{print $1}' | tr '\n' ' '; echo
kill $smi
awk -F, 'NR % 20 == 2' $R/smi.csv
(cd $OUT && tar czf results.tar.gz r)
