#!/usr/bin/env bash
# Session 73, call 3 (call 2's machine never came; 241 device seconds left): the six workloads in both dtypes, forward
# and forward + backward alone (GEN 48's double backward is GEN 46's), md_accel alone, under GEN 48 and GEN 46 (carry
# .gpu/gpu_lib.tar.xz, .gpu/gpu_s73g48.tar.xz, .gpu/gpu_ab2.tar.xz).
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source benchmarks/results/2026-12-06-s73/ab_run.sh
for v in gen48 gen46; do
  end=175; [[ $v == gen48 ]] && end=92
  left=$((end - SECONDS)); ((left < 40)) && { echo "skipped all.$v: ${left}s left"; continue; }
  run "all.$v" $v "$left" --impls md_accel --dtypes float64,float32 --passes fwd,fwd_bwd --min-seconds 0.2 \
    --budget $((left - 12))
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
