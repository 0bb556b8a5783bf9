#!/usr/bin/env bash
# Session 31: SevenNet-0's step with the memory-lean pair op (the default up to 8 GiB of per-edge weights: no rows
# kept, weights recomputed in the backward, which runs in 6 edge chunks) against keeping the rows
# (MD_ACCEL_LEAN_WEIGHTS_MIB=0), md_accel alone, the Calculator's step, float32 and float64, 4,000 / 16,384 / 32,000
# atoms (profile: the recompute and chunked backward GEMMs are ~20 % of the float32 16k step).
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/sn0mdx .gpu/s31
set -u
cd "$(dirname "$0")/../.."
source tools/gpu_call_env.sh
M=.gpu/sn0mdx/sevennet0_f64.mdx
for run in float32 float64 float32 float64; do
  left=$((250 - SECONDS)); ((left < 50)) && { echo "skipped $run: ${left}s left"; continue; }
  tag=$run.$SECONDS
  timeout $((left < 100 ? left : 100)) python benchmarks/model_step.py --backends md_accel:$M+graph,md_accel:$M+graph+lean=0 \
    --dtype $run --sizes 4000,16384,32000 --repeats 10 --out $R/lean_$tag > $R/lean_$tag.log 2>&1
  echo "== $tag (rc=$?, ${SECONDS}s)"; grep -E "^\| md_accel" $R/lean_$tag.log | tail -3
done
(cd $OUT && tar czf results.tar.gz r)
