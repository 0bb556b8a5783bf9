#!/usr/bin/env bash
# Session 28 call 4: the MD step (benchmarks/model_step.py, the Calculator's captured step) of the trained
# copper MACE, deterministic grad_x (default) vs atomic (MD_ACCEL_DETERMINISTIC=0), in turn.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/s28
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/k/wheels/ase-*.whl .peers/k/wheels/vesin-*.whl
export PYTHONPATH=$PWD:/tmp/site
for run in "float32 1" "float32 0" "float64 1" "float64 0" "float32 1" "float32 0" "float64 1" "float64 0"; do
  set -- $run
  left=$((440 - SECONDS)); [ $left -lt 40 ] && { echo "skipped $run: ${left}s left"; continue; }
  tag=${1}_det$2
  MD_ACCEL_DETERMINISTIC=$2 timeout $((left < 110 ? left : 110)) python benchmarks/model_step.py \
    --backends md_accel:models/mace_cu/mace_cu.mdx+graph,md_accel:models/mace_cu/mace_cu.mdx \
    --dtype $1 --sizes 4000,32000 --repeats 15 --out $R/step_$tag.$SECONDS > $R/step_$tag.$SECONDS.log 2>&1
  echo "== $tag (rc=$?)"; grep -E "^\| md_accel" $R/step_$tag.*.log | tail -4
done
(cd $OUT && tar czf results.tar.gz r)
