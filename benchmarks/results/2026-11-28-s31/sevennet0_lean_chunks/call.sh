#!/usr/bin/env bash
# Session 31: SevenNet-0's lean step with its backward in 1 or 2 edge chunks (MD_ACCEL_LEAN_CHUNKS; default 6)
# beside the default and the rows kept (lean=0), md_accel alone, float32 then float64, 4,000 / 16,384 / 32,000 atoms.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/sn0mdx .gpu/s31
set -u
cd "$(dirname "$0")/../.."
source tools/gpu_call_env.sh
M=.gpu/sn0mdx/sevennet0_f64.mdx
for run in float32 float64; do
  left=$((125 - SECONDS)); ((left < 30)) && { echo "skipped $run: ${left}s left"; continue; }
  tag=$run.$SECONDS
  timeout $((left < 70 ? left : 70)) python benchmarks/model_step.py --backends \
    md_accel:$M+graph,md_accel:$M+graph+lean_chunks=1,md_accel:$M+graph+lean_chunks=2,md_accel:$M+graph+lean=0 \
    --dtype $run --sizes 4000,16384,32000 --repeats 8 --out $R/chunks_$tag > $R/chunks_$tag.log 2>&1
  echo "== $tag (rc=$?, ${SECONDS}s)"; grep -E "^\| md_accel" $R/chunks_$tag.log | tail -4
done
(cd $OUT && tar czf results.tar.gz r)
