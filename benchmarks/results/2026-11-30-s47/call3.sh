#!/usr/bin/env bash
# Session 47, call 3: Tuning.pipe (part 1's software pipeline: the next edge's loads one iteration ahead; pipe=1 the
# weights, pipe=3 also y and the sender's x) against the default, in turn twice, md_accel alone, forward + backward
# and double backward, four workloads, both dtypes, at least 1 s per cell, clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz .gpu/gpu_pipe.tar.xz (tp-tests under pipe=1 and pipe=3)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100 SWEEP_RUN_S=95
source tools/gpu_call_env.sh 2> /dev/null
ls .gpu/build/tp_specs | grep -c -- "-v32"
tools/tuning_sweep.sh $((580 - SECONDS)) "default pipe=1 pipe=3 default pipe=1 pipe=3" --passes fwd_bwd,dbwd \
  --workloads sevennet_0,mace_mp0_medium,mace_large,nequip_l3 --graph random_sym:4000:312000 --repeats 10 \
  --min-seconds 1
smi_stop
grep -h "check:" $R/*.log | sort | uniq -c | sort -rn | head -6
(cd $OUT && tar czf results.tar.gz r)
