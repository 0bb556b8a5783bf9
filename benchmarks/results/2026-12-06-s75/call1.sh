#!/usr/bin/env bash
# Session 75, call 1 (session 74's next_call.sh), a fresh machine from a new checkout. Carry .gpu/gpu_s75all.tar.xz
# and .gpu/gpu_ab4.tar.xz (session 74's make_packs.sh, built here) and .peers/k (ase and vesin wheels); no op library
# at hand: it is built first (~120 s).
# The backward's A/B: GEN 48 against b1 (its part 1 with each path's scaled grad_y terms and weight gradient summed
# apart and then added, where GEN 48 chains them into the running sums; the double backward lost 1.6 % to that
# chaining, session 74), md_accel alone, float64, forward + backward and double backward: mace_mp0_medium in turn
# twice, then mace_large once each (shortened after 1,144 s of the budget went to refused starts).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
if [[ ! -f .gpu/gpu_lib.tar.xz ]]; then
  GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
  echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
fi
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48 WHEELS=.peers/k/wheels
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source "$(dirname "$0")/../2026-12-06-s74/ab_run.sh"
for round in 1 2; do
  for v in gen48 b1; do
    left=$((330 - SECONDS)); ((left < 30)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 60 ? left : 60)) --impls md_accel --dtypes float64 \
      --workloads mace_mp0_medium --passes fwd_bwd,dbwd --min-seconds 1.0
  done
done
for v in gen48 b1; do
  left=$((400 - SECONDS)); ((left < 40)) && { echo "skipped $v.large: ${left}s left"; continue; }
  run "$v.large" $v $((left < 60 ? left : 60)) --impls md_accel --dtypes float64 \
    --workloads mace_large --passes fwd_bwd,dbwd --min-seconds 1.0
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
