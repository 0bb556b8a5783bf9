#!/usr/bin/env bash
# Session 33, after tools/gpu_stage.sh on the same warm machine (peers in .gpu/site, the op library built): the
# Calculator's step with session 32's memory-lean default (per-edge weights up to 1.5 GiB per layer) and with the old
# one (+lean=8192), beside the model's cuEquivariance peer, same run (session 32's call_lean.sh with +lean=8192 for
# +lean=0 / +lean=512). Arguments: MODEL:DTYPE ... with MODEL mace (MP-0-medium shape, seed 0), SevenNet_l3i5 or
# sevennet-0 (the wheel's checkpoints, optimizer state dropped, in .gpu/sn_ckpt); SIZES (default 4000,16384).
# Carry: .gpu/gpu_prebuilt.tar.xz .peers/full/wheels .gpu/sn_ckpt
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/sevenn ]] || { echo "no staged peers in .gpu/site: run tools/gpu_stage.sh first"; exit 3; }
for d in SevenNet_0__11Jul2024 SevenNet_l3i5; do
  mkdir -p .gpu/site/sevenn/pretrained_potentials/$d && cp .gpu/sn_ckpt/$d/*.pth .gpu/site/sevenn/pretrained_potentials/$d/
done
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-560}; n=$#; i=0
for job in "$@"; do
  model=${job%%:*} dt=${job##*:}; i=$((i + 1))
  left=$((LIMIT - SECONDS)); share=$((left / (n - i + 1)))
  ((share < 45)) && { echo "skipped $job: ${left}s left"; continue; }
  if [[ $model == mace ]]; then
    what=mace peer=mace:cueq extra=()
  else
    what=sevenn peer=sevenn:cueq extra=(--sevenn-checkpoint $model)
  fi
  tag=${model}_$dt.$SECONDS
  timeout $share python benchmarks/model_step.py \
    --backends md_accel:$what+graph,md_accel:$what+graph+lean=8192,$peer \
    "${extra[@]}" --dtype $dt --sizes ${SIZES:-4000,16384} --repeats 10 --out $R/lean_$tag > $R/lean_$tag.log 2>&1
  echo "== $tag (rc=$?, ${SECONDS}s)"; grep -E "^\| (md_accel|mace|sevenn)" $R/lean_$tag.log | tail -14
done
(cd $OUT && tar czf results.tar.gz r)
