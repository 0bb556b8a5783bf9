#!/usr/bin/env bash
# Session 43, call 2: the MD step (Calculator path, CUDA graph, radial weights shared by edge pairs through
# TPGraph::w_row) with GEN 30's evict-first weight loads (the default) against w_evict=0, md_accel alone, each
# variant its own process, in turn: the copper MACE and SevenNet-0 at 4,000 and 32,000 atoms, float32 then float64.
# Carry: .gpu/gpu_lib.tar.xz .peers/full/wheels .gpu/sevennet0.mdx .gpu/gpu_steprows.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
common=(--backends md_accel:models/mace_cu/mace_cu.mdx+graph,md_accel:.gpu/sevennet0.mdx+graph --sizes 4000,32000
        --repeats 20)
SWEEP_SCRIPT=model_step SWEEP_RUN_S=100 bash tools/tuning_sweep.sh 330 "default w_evict=0 default w_evict=0" \
  "${common[@]}" --dtype float32
SWEEP_SCRIPT=model_step SWEEP_RUN_S=100 bash tools/tuning_sweep.sh $((570 - SECONDS)) "default w_evict=0" \
  "${common[@]}" --dtype float64
(cd $OUT && tar czf results.tar.gz r)
