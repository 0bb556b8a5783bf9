#!/usr/bin/env bash
# Prepared in session 30: the part-1 kernels (backward and double backward) with two variants against the default,
# on the cells closest to 1.3x (mace_large, mace_mp0_medium, sevennet_0), md_accel alone, copper graph, forward +
# backward and the double-backward pass, float32 and float64, in turn, twice:
# - stream_out=1 (new, opt-in): each grad_w / grad_x-row element's last write as a streaming store (st.global.cs),
#   so that those lines leave L2 first (part 1's L2 hit rate was 55-64 %, ncu, session 28);
# - dbwd_g32=64: the float32 double backward's grad_out budget per pass (48 by default; mace_large float32 needs
#   ~2 % for 1.3x).
# The specs are in .gpu/gpu_pf30.tar.xz (dbwd_g32=32 too, if a run is left).
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_pf30.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/s30
set -u
cd "$(dirname "$0")/../.."
source tools/gpu_call_env.sh
V="default stream_out=1 dbwd_g32=64"
SWEEP_RUN_S=100 tools/tuning_sweep.sh $((560 - SECONDS)) "$V $V" --passes fwd_bwd,dbwd --repeats 10 \
  --workloads ${WL:-mace_large,mace_mp0_medium,sevennet_0}
(cd $OUT && tar czf results.tar.gz r)
