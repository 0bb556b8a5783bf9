#!/usr/bin/env bash
# Session 74, call 1 (prepared in session 73 as next_call.sh there), a fresh machine from a new checkout. Results
# in this folder. Carry the packs of make_packs.sh (.gpu/gpu_s74gt.tar.xz, .gpu/gpu_s74all.tar.xz,
# .gpu/gpu_ab3.tar.xz) and .gpu/gpu_lib.tar.xz where one for this csrc is at hand (else the op library is built
# first, ~100 s). No peers: md_accel alone. GEN 48 = GEN 47's forward and backward + GEN 46's double backward.
# 1. tests/gpu/test_tp_conv_cuda.py at GEN 48 (CUDA against the CPU reference, outputs poisoned);
# 2. the six workloads in both dtypes, forward and forward + backward (where GEN 48 differs from GEN 46), md_accel
#    alone, under GEN 48 and GEN 46 (.gpu/old): does GEN 47's forward / backward gain everywhere, float32 included
#    (its g32_auto rule now fires on mace_mp0_medium and sevennet_0)?
# 3. mace_mp0_medium float64's double backward under GEN 46, GEN 48, h1 (GEN 47's pair sums without its chained
#    grad_y / weight-gradient sums) and GEN 47 in turn: which of GEN 47's two changes cost 1.4 %?
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
if [[ ! -f .gpu/gpu_lib.tar.xz ]]; then
  GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
  echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
fi
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48 WHEELS=.peers/k/wheels
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source "$(dirname "$0")/ab_run.sh"
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
t=$SECONDS
for v in gen48 gen46; do
  end=$((t + 200)); [[ $v == gen48 ]] && end=$((t + 100))
  left=$((end - SECONDS)); ((left < 40)) && { echo "skipped all.$v: ${left}s left"; continue; }
  run "all.$v" $v "$left" --impls md_accel --dtypes float64,float32 --passes fwd,fwd_bwd --min-seconds 0.3 \
    --budget $((left - 12))
done
for round in 1 2 3; do
  for v in gen46 gen48 h1 gen47; do
    left=$((570 - SECONDS)); ((left < 25)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 40 ? left : 40)) --impls md_accel --dtypes float64 --workloads mace_mp0_medium \
      --passes dbwd --min-seconds 1.0
  done
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
