#!/usr/bin/env bash
# Session 52, call 6: the model step (energy + forces, benchmarks/model_step.py) of two NequIP shapes converted here
# (models/build_nequip_shape.py: `benchmark`, 64 channels, l 2, whose plans run two edge slots in the GEN 34 forward;
# `l3`, 32 channels, four), float32, md_accel alone at 4,000 and 32,000 atoms: GEN 34's default against its
# forward in blocks of one or two warps as before (`fwd_min_block=32`), in turn, twice; clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_nq.tar.xz .gpu/nq .peers/k
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
declare -A V=([gen34]="" [narrow]="fwd_min_block=32")
for run in 1 2; do
  for v in gen34 narrow; do
    MD_ACCEL_TP_TUNING=${V[$v]} timeout $((400 - SECONDS)) python benchmarks/model_step.py --backends "" \
      --mdx .gpu/nq/nequip_b64.mdx .gpu/nq/nequip_l3.mdx --sizes 4000,32000 --dtype float32 --repeats 20 \
      --min-seconds 1.0 --out $R/${v}_$run > $R/${v}_$run.log 2>&1
    echo "== $v run $run rc=$? (${SECONDS}s)"
    grep -E "^\| md_accel" $R/${v}_$run.log
  done
done
smi_stop
(cd $OUT && tar czf results.tar.gz r)
