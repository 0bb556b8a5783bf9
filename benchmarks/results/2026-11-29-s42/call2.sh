#!/usr/bin/env bash
# Session 42, call 2 on call 1's warm machine: the tuning sweep of stage_w, md_accel alone, all six workloads, three
# passes, both dtypes; the variants in turn twice (default, stage_w=7 (all three), stage_w=4 (forward only)).
# Carry: .gpu/gpu_tab.tar.xz .gpu/gpu_stage7.tar.xz (tp-tests' kernels, default and the two stage_w tunings)
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=110 tools/tuning_sweep.sh $((575 - SECONDS)) "default stage_w=7 stage_w=4 default stage_w=7" \
  --graph random_sym:4000:312000 --repeats 10
(cd $OUT && tar czf results.tar.gz r)
