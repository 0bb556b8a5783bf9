#!/usr/bin/env bash
# Session 73, call 1: session 72's prepared call (next_call.sh there) on a fresh machine from a new checkout, which had
# no op library at hand: it is built first (tools/gpu_check.sh, GPU_TESTS=none; $OUT/gpu_lib.tar.xz comes back for
# call 2). Carry .peers/tab (cuEquivariance), .gpu/gpu_s73gt.tar.xz (tests/gpu's tensor-product configurations at
# GEN 47), .gpu/gpu_s73all.tar.xz (the six kernels.py workloads at GEN 47) and .gpu/gpu_old46.tar.xz (their GEN 46
# libraries, built at 3aaa9e0, under GEN 47's file names in a build folder of their own, .gpu/old). GEN 47: the
# part-1 contractions sum the CG non-zeros of one (i, j) pair over k first, the path's grad_y terms and weight
# gradient chain into the running sums, x is scaled by the path weight first where a path has more y (backward) or
# output (forward) components than x components. The whole of tests/gpu/test_tp_conv_cuda.py at GEN 47 (CUDA against
# the CPU reference, outputs poisoned), then mace_mp0_medium float64 forward + backward and double backward under
# GEN 47 and GEN 46 in turn, cuEquivariance in each process, the clock log running.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/peers.log" 2>&1) &
peers=$!
GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
wait "$peers"
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
ls .gpu/old/tp_specs | head -n 8
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
source benchmarks/results/2026-12-06-s73/ab_run.sh
for round in 1 2 3; do
  for v in gen47 gen46; do
    left=$((560 - SECONDS)); ((left < 40)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 60 ? left : 60)) --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
      --passes fwd_bwd,dbwd --min-seconds 1.0
  done
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
