#!/usr/bin/env bash
# Session 59, call 2 (call 1's machine, warm: op library, kernels and peers in place; nothing more to carry): ncu of
# the first backward's part 1 in mace_mp0_medium float64's double backward, md_accel's (bwd_kernel_bd<double>) and
# cuEquivariance's (segmented_polynomial_bwd_algo1_1), then the float32 forwards furthest from their byte floor
# (nequip_l3, sevennet_l3i5) at GEN 39's defaults.
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site WHEELS=.peers/tab/wheels TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
LIMIT=570 bash tools/gpu_ncu.sh bwd64:mace_mp0_medium:float64:dbwd:bwd_kernel_bd \
  cqbwd64:mace_mp0_medium:float64:dbwd:^segmented_polynomial_bwd_algo:cueq \
  nequip32:nequip_l3:float32:fwd:fwd_kernel l3i532:sevennet_l3i5:float32:fwd:fwd_kernel
