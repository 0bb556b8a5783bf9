#!/usr/bin/env bash
# Session 48, call B (session 47's plan item 1): the SevenNet-l3i5 MD step at GEN 32, whose libraries sum grad_y
# through shared memory (gy_smem, set by itself where the float64 double backward spills), against
# gy_spill_bytes=0 (never: the step before GEN 32), in turn twice: the Calculator's step in a CUDA graph, md_accel
# alone, 4,000 and 32,000 atoms, float32 then float64, clocks logged.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps_l3i5.tar.xz .gpu/sevennet_l3i5.mdx .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl
for dt in float32:290 float64:580; do
  IFS=: read -r dt end <<<"$dt"
  SWEEP_SCRIPT=model_step SWEEP_RUN_S=75 bash tools/tuning_sweep.sh $((end - SECONDS)) \
    "default gy_spill_bytes=0 default gy_spill_bytes=0" --backends md_accel:.gpu/sevennet_l3i5.mdx+graph \
    --sizes 4000,32000 --repeats 20 --dtype $dt
done
smi_stop
(cd $OUT && tar czf results.tar.gz r)
