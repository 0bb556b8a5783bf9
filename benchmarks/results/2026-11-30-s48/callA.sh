#!/usr/bin/env bash
# Session 48, call A: Tuning.pf_ahead (the L2 prefetch of the weights asks for the edge 2 or 4 iterations on instead of
# the next) against the default, in turn twice, md_accel alone, clocks logged: first the forwards (six workloads, both
# dtypes, at least 1.5 s per cell: the byte-floor target), then forward + backward and double backward (four
# workloads, both dtypes, at least 1 s per cell).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz .gpu/gpu_pfa.tar.xz (tp-tests under pf_ahead=2 and pf_ahead=4)
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/none SMI_LOG=100 SWEEP_RUN_S=60
source tools/gpu_call_env.sh 2> /dev/null
ls .gpu/build/tp_specs | grep -c -- "-v32"
tools/tuning_sweep.sh $((265 - SECONDS)) "default pf_ahead=2 pf_ahead=4 default pf_ahead=2 pf_ahead=4" --passes fwd \
  --graph random_sym:4000:312000 --repeats 10 --min-seconds 1.5
tools/tuning_sweep.sh $((585 - SECONDS)) "default pf_ahead=2 pf_ahead=4 default pf_ahead=2 pf_ahead=4" \
  --passes fwd_bwd,dbwd --workloads sevennet_0,mace_mp0_medium,mace_large,nequip_l3 --graph random_sym:4000:312000 \
  --repeats 10 --min-seconds 1
smi_stop
grep -h "check:" $R/*.log | sort | uniq -c | sort -rn | head -6
(cd $OUT && tar czf results.tar.gz r)
