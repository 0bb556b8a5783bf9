#!/usr/bin/env bash
# Session 36, one H200: pair_style md_accel at this checkout against the plugin of 57469b7 (session 35's last
# plugin change), in turn, twice, in one call: SevenNet-0 float32, 32,000 fcc copper atoms, comm none and comm
# layer, 16 host threads, phase timer on. Carry: .gpu/lmp .gpu/gpu_lib.tar.xz .gpu/gpu_lmpkern.tar.xz .gpu/old
# (.gpu/old/lammps_plugin: `git archive 57469b7 lammps_plugin | tar x -C .gpu/old`).
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${1:-$OUT/ab}
export GPUS=1 BIG_GPUS=0 CASES="weak-none weak-layer" MD_ACCEL_LAMMPS_TIMING=1 THREADS=${THREADS:-16}
for r in 1 2; do
  bash tools/gpu_lammps_scaling.sh .gpu/lmp .gpu/lmp/sevennet0-f32.mdx "$out/new$r" 2>&1 | grep -v "^unpacked"
  PLUGIN_FROM=.gpu/old bash tools/gpu_lammps_scaling.sh .gpu/lmp .gpu/lmp/sevennet0-f32.mdx "$out/old$r" 2>&1 \
    | grep -v "^unpacked"
done
for d in "$out"/*/; do
  echo "== $d"
  grep -h "md_accel timing" "$d"/log_*.txt 2>/dev/null | grep -v "4 evaluations"
  grep -h "^Loop time" "$d"/log_*.txt
done
