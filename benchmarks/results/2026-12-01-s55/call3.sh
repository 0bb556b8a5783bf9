#!/usr/bin/env bash
# Session 55, call 3 (the warm machine of calls 1-2, the workloads' kernels built there under both tunings):
# MACE-MP-0 medium, forward + backward and double backward, float64 and float32, md_accel alone, default and
# p1_tma=3 in turn, twice, one process each, at least 0.3 s per cell. Run as one command line from the repo root.
source tools/gpu_call_env.sh >/dev/null 2>&1; R=$OUT/r; mkdir -p $R
for run in 1 2; do for v in default p1_tma=3; do t=${v%%=*}; [[ $v == default ]] && v=
  MD_ACCEL_TP_TUNING=$v timeout 170 python benchmarks/kernels.py --impls md_accel --workloads mace_mp0_medium \
    --dtypes float64,float32 --passes fwd_bwd,dbwd --repeats 10 --min-seconds 0.3 --graph random_sym:4000:312000 \
    --reference-cache .gpu/refcache --out $R/${t}_$run > $R/${t}_$run.log 2>&1
  echo "== $t $run rc=$? ${SECONDS}s"; grep -E "md_accel +(fwd_bwd|dbwd)|reference" $R/${t}_$run.log
done; done
