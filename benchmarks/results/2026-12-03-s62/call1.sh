#!/usr/bin/env bash
# Session 62, call 1 (a fresh machine; carry .gpu/gpu_k42.tar.xz: GEN 42's kernels of tp-tests and tp-gpu-tests, built
# here, and .peers/full/wheels: ase and vesin for the graphs): the op library built, then Nsight Compute of the float64
# forwards furthest from their byte floor, none profiled before in float64: nequip_l3, sevennet_l3i5, sevennet_0,
# mace_large (tools/gpu_ncu.sh, one launch each, clocks not locked).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=none bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
echo "op library build rc=$? (${SECONDS}s)"
tail -n 3 "$OUT/r/build.log"
WHEELS=.peers/full/wheels LIMIT=$((585 - SECONDS)) bash tools/gpu_ncu.sh nq64:nequip_l3:float64:fwd:fwd_kernel \
  l3i564:sevennet_l3i5:float64:fwd:fwd_kernel s064:sevennet_0:float64:fwd:fwd_kernel \
  ml64:mace_large:float64:fwd:fwd_kernel
