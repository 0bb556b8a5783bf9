#!/usr/bin/env bash
# Session 32, after call_stage.sh on the same warm machine: the SevenNet-0 float32 step (Calculator step, default)
# beside every sevenn backend there is here: cuEquivariance, OpenEquivariance (JIT on first use) and e3nn.
# Carry: .gpu/gpu_prebuilt.tar.xz .peers/full/wheels .gpu/sn_ckpt .gpu/s32
set -u
cd "$(dirname "$0")/../.."
[[ -d .gpu/site/sevenn ]] || { echo "no staged peers in .gpu/site"; exit 3; }
d=.gpu/site/sevenn/pretrained_potentials/SevenNet_0__11Jul2024; mkdir -p $d && cp .gpu/sn_ckpt/SevenNet_0__11Jul2024/*.pth $d/
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh > /dev/null 2>&1
timeout 400 python benchmarks/model_step.py --backends md_accel:sevenn+graph,sevenn:oeq,sevenn:cueq,sevenn:e3nn \
  --sevenn-checkpoint sevennet-0 --dtype float32 --sizes 864,4000,16384 --repeats 10 --out $R/sn0_peers > $R/sn0_peers.log 2>&1
echo "rc=$? ${SECONDS}s"; grep -E "^\| " $R/sn0_peers.log | tail -12; grep -iE "error|oom|fail" $R/sn0_peers.log | head -5
(cd $OUT && tar czf results.tar.gz r)
