#!/usr/bin/env bash
# Session 47, call 7: mace_mp0_medium float64's double backward at the power cap (1.25x the fastest peer) without
# the L2 prefetch of the next edge's weights in part 1 of the double backward (prefetch=7: no PF_DBWD) or of the
# float64 backward (prefetch=11: no PF_BWD64): fewer instructions per edge where the clock is set by the power.
# The default and the two variants in turn twice, md_accel alone, at least 1.5 s per cell, clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz .gpu/gpu_pf.tar.xz (tp-tests under prefetch=7 and prefetch=11)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100 SWEEP_RUN_S=40
source tools/gpu_call_env.sh 2> /dev/null
tools/tuning_sweep.sh $((190 - SECONDS)) "default prefetch=7 prefetch=11 default prefetch=7 prefetch=11" \
  --passes dbwd --workloads mace_mp0_medium --dtypes float64 --graph random_sym:4000:312000 --repeats 10
smi_stop
for j in $R/*/kernels.json; do python benchmarks/smi_join.py $j $R/smi.csv 2>&1 | grep dbwd | sed "s|^|${j#$R/} |" | cut -c1-150; done
(cd $OUT && tar czf results.tar.gz r)
