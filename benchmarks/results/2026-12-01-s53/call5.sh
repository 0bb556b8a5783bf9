#!/usr/bin/env bash
# Session 53, call 5: the model step (energy + forces, benchmarks/model_step.py) of a MACE-MP-0-medium-shaped model
# (models/build_mace_mp0_medium_shape.py, random weights, float32, converted here with `md-accel convert --dtype
# float32`), md_accel alone at 4,000 and 32,000 atoms: GEN 35's default (the bulk-copy forward in both
# interaction blocks' convolutions) against fwd_tma=0 (GEN 34's forward), in turn, twice; clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_macestep.tar.xz .gpu/mace .peers/k
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
declare -A V=([gen35]="" [notma]="fwd_tma=0")
for run in 1 2; do
  for v in gen35 notma; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((330 - SECONDS)) python benchmarks/model_step.py --backends "" \
      --mdx .gpu/mace/mace_med.mdx --sizes 4000,32000 --dtype float32 --repeats 20 \
      --min-seconds 1.0 --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "^\| md_accel" $R/${v}_$run.log
  done
done
smi_stop
(cd $OUT && tar czf r.tar.gz r && rm -rf r)
