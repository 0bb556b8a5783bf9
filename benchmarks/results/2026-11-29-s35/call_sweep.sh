#!/usr/bin/env bash
# Session 35, call 5: code-generation variants for the two float64 cells under 1.3x (nequip_l3 forward + backward,
# mace_mp0_medium double backward), md_accel alone on session 30's symmetric random graph; the variants' kernels
# compiled here (MD_ACCEL_TP_TUNING at prebuild) and carried in .gpu/gpu_sweep.tar.xz.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_sweep.tar.xz .gpu/refcache .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
G="--graph random_sym:4000:312000 --repeats 20"
bash tools/tuning_sweep.sh $((270 - SECONDS)) "default bwd_g64=64 merge_g64=48 min_warps64=10 prefetch=11 default" \
  --passes fwd_bwd --workloads nequip_l3 --dtypes float64 $G
bash tools/tuning_sweep.sh $((550 - SECONDS)) "default dbwd_g64=32 dbwd_acc=24 min_warps64=10 prefetch=7 default" \
  --passes dbwd --workloads mace_mp0_medium --dtypes float64 $G
(cd $OUT && tar czf sweep.tar.gz r)
