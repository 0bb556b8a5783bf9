#!/usr/bin/env bash
# Session 45, call 2 (after staging on the same warm machine, as call 1): session 44's plan item 2. Nsight Compute
# of mace_mp0_medium float64's double-backward pass, md_accel's two per-edge kernels (the first backward's part 1,
# bwd_kernel_bd, and the double backward's part 1, dbwd_kernel_dd) beside cuEquivariance's two (its backward and
# its double backward), one launch each: instructions by opcode, DRAM / L2 bytes, stall reasons.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen31.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels LIMIT=580
bash tools/gpu_ncu.sh mdbwd:mace_mp0_medium:float64:dbwd:bwd_kernel_bd \
  cqbwd:mace_mp0_medium:float64:dbwd:segmented_polynomial_bwd_algo:cueq \
  mddbwd:mace_mp0_medium:float64:dbwd:dbwd_kernel_dd \
  cqdbwd:mace_mp0_medium:float64:dbwd:segmented_polynomial_bwd_bwd:cueq 2>&1 | grep -v "^lib:\|^NVIDIA"
