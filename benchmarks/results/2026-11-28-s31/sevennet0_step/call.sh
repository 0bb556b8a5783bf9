#!/usr/bin/env bash
# Session 31, call B (after call_stage_peers.sh on the same warm machine): the SevenNet-0 MD step
# (benchmarks/model_step.py: md_accel's Calculator step in a CUDA graph against sevenn + cuEquivariance, same run),
# float32 and float64, 4,000 / 16,384 / 32,000 atoms. The checkpoint is SevenNet-0 (11Jul2024) as the sevenn wheel
# ships it with its optimizer state dropped (model_state_dict, config unchanged; 3.5 MB instead of 9.8 MB): both
# backends load the same weights from it, md_accel by converting it in the run.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/sn0 .gpu/s31
set -u
cd "$(dirname "$0")/../.."
[[ -d .gpu/site/sevenn ]] || { echo "no staged peers in .gpu/site: run call_stage_peers.sh first"; exit 3; }
d=.gpu/site/sevenn/pretrained_potentials/SevenNet_0__11Jul2024; mkdir -p $d && cp .gpu/sn0/checkpoint_sevennet_0.pth $d/
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh
for run in float32 float64 float32 float64; do
  left=$((560 - SECONDS)); ((left < 60)) && { echo "skipped $run: ${left}s left"; continue; }
  tag=$run.$SECONDS
  timeout $((left < 160 ? left : 160)) python benchmarks/model_step.py --backends md_accel:sevenn+graph,sevenn:cueq \
    --sevenn-checkpoint sevennet-0 --dtype $run --sizes 4000,16384,32000 --repeats 10 --out $R/step_$tag \
    > $R/step_$tag.log 2>&1
  echo "== $tag (rc=$?, ${SECONDS}s)"; grep -E "^\| (md_accel|sevenn)" $R/step_$tag.log | tail -8
done
(cd $OUT && tar czf results.tar.gz r)
