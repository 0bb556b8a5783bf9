#!/usr/bin/env bash
# Session 73, call 2 (carry .gpu/gpu_lib.tar.xz from call 1, .gpu/gpu_s73all.tar.xz, .gpu/gpu_old46.tar.xz,
# .gpu/gpu_ab.tar.xz). Call 1 had GEN 47's double backward 1.3 % slower than GEN 46's on mace_mp0_medium float64 (its
# forward + backward 2.8 % faster). First that double backward, md_accel alone, under four builds in turn three times:
# GEN 46, GEN 47, and two of GEN 47 with the double backward's part 1 taken back (h0: all of it, i.e. GEN 46's; h1:
# the (i, j) pair sums kept, the grad_y terms and weight gradient summed per path and added as in GEN 46; built here
# with a throwaway switch of the generator, AB_DBWD=h0 / h1, mace_mp0_medium only). Then the six workloads in both
# dtypes, md_accel alone, under GEN 47 and GEN 46.
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source benchmarks/results/2026-12-06-s73/ab_run.sh
ls .gpu/h0/tp_specs .gpu/h1/tp_specs .gpu/old/tp_specs | head -n 12
for round in 1 2 3; do
  for v in gen46 h0 h1 gen47; do
    left=$((270 - SECONDS)); ((left < 25)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 45 ? left : 45)) --impls md_accel --dtypes float64 --workloads mace_mp0_medium \
      --passes dbwd --min-seconds 1.0
  done
done
for v in gen47 gen46; do
  end=570; [[ $v == gen47 ]] && end=$((SECONDS + (570 - SECONDS) / 2))
  left=$((end - SECONDS)); ((left < 50)) && { echo "skipped all.$v: ${left}s left"; continue; }
  run "all.$v" $v "$left" --impls md_accel --dtypes float64,float32 --min-seconds 0.3 --budget $((left - 15))
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
