#!/usr/bin/env bash
# Session 48, call J: does LAMMPS' pair_style md_accel gain from its CUDA graph above AUTO_MAX_EDGES, as the ASE
# Calculator's step does (call I)? benchmarks/lammps_step.py (one rank, comm none, NVE from 600 K, 10 + 50 steps,
# LAMMPS' loop time) with cuda_graph yes against no (what auto runs above 300,000 edges), 32,000 Cu atoms, the copper
# MACE in float64 (models/mace_cu/mace_cu.mdx) and float32 (.gpu/lmp/mace_cu_f32.mdx, the same model cast).
# Carry: .gpu/lmp (gpu-peers.sh --lammps-only, with the ase and vesin wheels, and mace_cu_f32.mdx)
#        .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
mkdir -p $OUT/r
LAMMPS_TESTS=0 SIZES=32000 STEPS=50 WARMUP=10 \
  STYLES="device cuda comm none cuda_graph yes;device cuda comm none cuda_graph no" \
  timeout 480 bash tools/gpu_lammps.sh .gpu/lmp --check $OUT/r/lmp .gpu/lmp/mace_cu_f32.mdx > $OUT/r/gpu_lammps.log 2>&1
echo "rc=$?"; grep -E "^\||Loop|capture|error|Error" $OUT/r/gpu_lammps.log | tail -30
(cd $OUT && tar czf results.tar.gz r)
