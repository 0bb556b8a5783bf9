#!/usr/bin/env bash
# Session 73, call 2 (carry .gpu/gpu_lib.tar.xz from call 1, .gpu/gpu_s73g48.tar.xz, .gpu/gpu_ab2.tar.xz). Call 1 had
# GEN 47's double backward 1.4 % slower than GEN 46's on mace_mp0_medium float64, its forward + backward 2.8 % faster.
# GEN 48 (the tree) is GEN 47 with the double backward's part 1 as in GEN 46 (its generated source for
# mace_mp0_medium the same as GEN 46's there, GEN 47's elsewhere). All libraries here carry GEN 48's file names: GEN 46's
# six (built at 3aaa9e0) in .gpu/old, GEN 47's mace_mp0_medium (4bb9fb8) in .gpu/gen47, and h1's in .gpu/h1: GEN 47
# with the double backward's (i, j) pair sums kept but its grad_y terms and weight gradients summed per path and
# added (benchmarks/results/2026-12-06-s73/ab_dbwd.diff, AB_DBWD=h1). First mace_mp0_medium float64's double backward,
# md_accel alone, under GEN 46, GEN 48, h1 and GEN 47 in turn; then the six workloads in both dtypes, md_accel alone,
# under GEN 48 and GEN 46.
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 SMI_LOG=200 TREE_GEN=gen48
source tools/gpu_call_env.sh > /dev/null 2>&1 || exit 3
source benchmarks/results/2026-12-06-s73/ab_run.sh
ls .gpu/build/tp_specs .gpu/old/tp_specs .gpu/gen47/tp_specs .gpu/h1/tp_specs | head -n 20
for round in 1 2 3; do
  for v in gen46 gen48 h1 gen47; do
    left=$((170 - SECONDS)); ((left < 25)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 45 ? left : 45)) --impls md_accel --dtypes float64 --workloads mace_mp0_medium \
      --passes dbwd --min-seconds 1.0
  done
done
for v in gen48 gen46; do
  end=380; [[ $v == gen48 ]] && end=$((SECONDS + (380 - SECONDS) / 2))
  left=$((end - SECONDS)); ((left < 50)) && { echo "skipped all.$v: ${left}s left"; continue; }
  run "all.$v" $v "$left" --impls md_accel --dtypes float64,float32 --min-seconds 0.3 --budget $((left - 15))
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
