#!/usr/bin/env bash
# Session 52, call 1: the forward's passes side by side (Tuning.fwd_par, opt-in) against the default (passes in
# turn), md_accel alone, forward only, nequip_l3 (four 32-channel passes) and mace_large (two 128-channel passes), both
# dtypes; the variants in turn, twice, one process each, at least 1.5 s per cell, clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen33.tar.xz .gpu/gpu_fwdpar.tar.xz .gpu/refcache .peers/k
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
tar -C .gpu -xJf .gpu/gpu_fwdpar.tar.xz
declare -A V=([default]="" [par]="fwd_par=1" [par_mw16]="fwd_par=1,min_warps32=16")
for run in 1 2; do
  for v in default par par_mw16; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((560 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
      --workloads nequip_l3,mace_large --dtypes float32,float64 --passes fwd --repeats 20 --min-seconds 1.5 \
      --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "md_accel +(fwd|check)" $R/${v}_$run.log | head -8
  done
done
smi_stop
(cd $OUT && tar czf results.tar.gz r)
