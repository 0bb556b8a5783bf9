#!/usr/bin/env bash
# Prepared in session 30: the forward with two channels per thread (MD_ACCEL_TP_TUNING=fwd_cpl=2: each product of a
# CG value and the edge's y serves two channels; ptxas nequip_l3 float32 128 registers, no spills, float64 1,056
# bytes of spills under the 12-warp bound), the accumulator budget 64 (fwd_acc=64), and both, against the default;
# md_accel alone, copper graph, forward only, in turn, twice. Specs: defaults in .gpu/gpu_wl.tar.xz, the variants
# for five workloads in .gpu/gpu_pf30.tar.xz (built in session 30 with the new variant names).
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_pf30.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/s30
set -u
cd "$(dirname "$0")/../.."
source tools/gpu_call_env.sh
V="default fwd_cpl=2 fwd_acc=64 fwd_cpl=2,fwd_acc=64"
SWEEP_RUN_S=110 tools/tuning_sweep.sh $((560 - SECONDS)) "$V $V" --passes fwd --repeats 20 \
  --workloads ${WL:-nequip_l3,sevennet_l3i5,mace_mp0_medium,mace_large,sevennet_0}
(cd $OUT && tar czf results.tar.gz r)
