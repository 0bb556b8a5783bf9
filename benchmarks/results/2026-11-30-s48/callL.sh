#!/usr/bin/env bash
# Session 48, call L: the LAMMPS CUDA graph step with its padded buffers filled on the host threads (call J: the graph
# lost 7-11 ms a step at 32,000 atoms; its fill ran on one thread over the padded capacity, the plain step's upload on
# OMP_NUM_THREADS): tests/lammps/test_lammps_cuda.py (graph against eager), then call J's benchmark again.
# Carry: .gpu/lmp .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p $OUT/r
SIZES=32000 STEPS=50 WARMUP=10 STYLES="device cuda comm none cuda_graph yes;device cuda comm none cuda_graph no" \
  timeout 300 bash tools/gpu_lammps.sh .gpu/lmp --check $OUT/r/lmp .gpu/lmp/mace_cu_f32.mdx > $OUT/r/gpu_lammps.log 2>&1
echo "rc=$?"; grep -E "^\||passed|failed|error|Error" $OUT/r/gpu_lammps.log | tail -30
(cd $OUT && tar czf results.tar.gz r)
