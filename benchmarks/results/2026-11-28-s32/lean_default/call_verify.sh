#!/usr/bin/env bash
# Session 32 (fresh machine): the lean threshold at its new default (1.5 GiB of per-edge weights per layer, csrc
# changed: the op library JIT-builds first) against the old one (+lean=8192), md_accel alone, the Calculator step:
# SevenNet-0 float32 and float64, SevenNet-l3i5 float64 and float32, at 4,000 / 16,384 atoms (the models converted
# here with md-accel convert, float64 files loaded in the timed dtype). Expected: the cells whose largest layer's
# weights exceed 1.5 GiB (SevenNet-0 16k, SevenNet-l3i5 f64 4k and 16k, f32 16k) run like call_lean.sh's +lean=0
# rows; the others (SevenNet-0 f64 4k: 1,254 MiB; f32 4k) like its default rows.
# Carry: .gpu/gpu_sn.tar.xz .gpu/w .gpu/mdx .gpu/s32
set -u
cd "$(dirname "$0")/../.."
export WHEELS=.gpu/w
source tools/gpu_call_env.sh
t0=$SECONDS; python -c "from md_accel.ops import _cuda; print('built', _cuda.load(), _cuda.library_path())" > $R/build.log 2>&1
echo "op library: $(tail -1 $R/build.log) ($((SECONDS - t0)) s)"
for job in sevennet0:float32:4000,16384 l3i5:float64:4000,16384 sevennet0:float64:4000,16384 l3i5:float32:4000,16384; do
  IFS=: read -r m dt sizes <<<"$job"
  left=$((520 - SECONDS)); ((left < 40)) && { echo "skipped $job: ${left}s left"; continue; }
  M=.gpu/mdx/$m.mdx; tag=${m}_$dt.$SECONDS
  timeout $((left < 110 ? left : 110)) python benchmarks/model_step.py --backends md_accel:$M+graph,md_accel:$M+graph+lean=8192 \
    --dtype $dt --sizes $sizes --repeats 10 --out $R/verify_$tag > $R/verify_$tag.log 2>&1
  echo "== $tag (rc=$?, ${SECONDS}s)"; grep -E "^\| md_accel" $R/verify_$tag.log | tail -2
done
(cd $OUT && tar czf results.tar.gz r)
