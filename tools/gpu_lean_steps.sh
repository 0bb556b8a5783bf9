#!/usr/bin/env bash
# On the GPU machine, after tools/gpu_stage.sh on the same warm machine (peers in .gpu/site, the op library built):
# benchmarks/model_step.py, md_accel's Calculator step by default and with each memory-lean threshold of LEAN (MiB of
# per-edge weights per layer: `+lean=N`, default "0 512"), or with each of OPTS instead (model_step.py's md_accel
# options, e.g. OPTS="+rows=1 +rows=1+lean=0"), beside the model's cuEquivariance peer, same run, at SIZES
# atoms (default 864,4000,16384). Arguments: MODEL:DTYPE ... with MODEL mace (the MP-0-medium shape, seed 0),
# SevenNet_l3i5 or sevennet-0 (the sevenn wheel's checkpoints without optimizer state, .gpu/sn_ckpt). Each job gets
# an equal share of what is left of LIMIT (default 560 s). Results in $OUT/r/lean_MODEL_DTYPE.SECONDS{,.log}.
# Carry: .gpu/gpu_prebuilt.tar.xz .peers/full/wheels .gpu/sn_ckpt
# Usage (device): LEAN=8192 SIZES=4000,16384 bash tools/gpu_lean_steps.sh SevenNet_l3i5:float64 mace:float32
set -u
cd "$(dirname "$0")/.."
[[ -d .gpu/site/sevenn ]] || { echo "no staged peers in .gpu/site: run tools/gpu_stage.sh first"; exit 3; }
for d in .gpu/sn_ckpt/*/; do  # the folders tools/strip_sevenn_checkpoints.py wrote, as sevenn names them
  d=$(basename "$d"); mkdir -p .gpu/site/sevenn/pretrained_potentials/$d
  cp .gpu/sn_ckpt/$d/*.pth .gpu/site/sevenn/pretrained_potentials/$d/
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
  backends=md_accel:$what+graph
  opts=${OPTS-}
  [[ -z ${OPTS+set} ]] && for mib in ${LEAN-0 512}; do opts+=" +lean=$mib"; done
  for o in $opts; do backends+=,md_accel:$what+graph$o; done
  tag=${model}_$dt.$SECONDS
  timeout $share python benchmarks/model_step.py --backends $backends,$peer "${extra[@]}" --dtype $dt \
    --sizes ${SIZES:-864,4000,16384} --repeats 10 --out $R/lean_$tag > $R/lean_$tag.log 2>&1
  echo "== $tag (rc=$?, ${SECONDS}s)"; grep -E "^\| (md_accel|mace|sevenn)" $R/lean_$tag.log | tail -14
done
(cd $OUT && tar czf results.tar.gz r)
