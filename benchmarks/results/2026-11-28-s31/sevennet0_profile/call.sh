#!/usr/bin/env bash
# Session 31, after call_stage_peers.sh on the same warm machine: where the SevenNet-0 float32 step's time goes at
# 16,384 atoms (benchmarks/profile_step.py: md_accel's Calculator step beside sevenn + cuEquivariance, kernel time
# by part), the size where md_accel's lead is least (1.33x, call_sn0_step.sh).
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/gpu_lib.tar.xz .peers/k/wheels .gpu/sn0 .gpu/s31
set -u
cd "$(dirname "$0")/../.."
[[ -d .gpu/site/sevenn ]] || { echo "no staged peers in .gpu/site: run call_stage_peers.sh first"; exit 3; }
d=.gpu/site/sevenn/pretrained_potentials/SevenNet_0__11Jul2024; mkdir -p $d && cp .gpu/sn0/checkpoint_sevennet_0.pth $d/
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh
for dt in float32 float64; do
  left=$((540 - SECONDS)); ((left < 60)) && { echo "skipped $dt: ${left}s left"; continue; }
  timeout $((left < 200 ? left : 200)) python benchmarks/profile_step.py --model sevennet-0 --sizes 16384 --dtype $dt \
    --steps 5 --repeats 10 --peers sevenn:cueq --out $R/prof_$dt > $R/prof_$dt.log 2>&1
  echo "== $dt (rc=$?, ${SECONDS}s)"; grep -v "^\[" $R/prof_$dt.log | grep "|" | tail -30
done
(cd $OUT && tar czf results.tar.gz r)
