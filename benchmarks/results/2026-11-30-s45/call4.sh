#!/usr/bin/env bash
# Session 45, call 4: Nsight Compute of mace_mp0_medium float64's two part-1 kernels under gy_smem=1 (call 3: 2 % slower
# there, 9 % faster on nequip_l3's float64 double backward), as call 2 profiled the default: does the variant issue fewer
# instructions, and where does its time go.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gysmem.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none LIMIT=300 MD_ACCEL_TP_TUNING=gy_smem=1
bash tools/gpu_ncu.sh gybwd:mace_mp0_medium:float64:dbwd:bwd_kernel_bd gydbwd:mace_mp0_medium:float64:dbwd:dbwd_kernel_dd \
  2>&1 | grep -v "^lib:\|^NVIDIA"
