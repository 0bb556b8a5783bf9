#!/usr/bin/env bash
# Session 47, call 4: the MD step at GEN 32 with the clocks logged (session 46's plan item 3), the default against
# Tuning.pipe=3 (part 1's software pipeline) in turn twice: the Calculator's step in a CUDA graph, md_accel alone,
# the copper MACE and SevenNet-0 at 4,000 and 32,000 atoms, float32.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .gpu/gpu_pipesteps.tar.xz .gpu/sevennet0.mdx .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEELS"/vesin_torch-*.whl
SWEEP_SCRIPT=model_step SWEEP_RUN_S=120 bash tools/tuning_sweep.sh $((570 - SECONDS)) \
  "default pipe=3 default pipe=3" --backends md_accel:models/mace_cu/mace_cu.mdx+graph,md_accel:.gpu/sevennet0.mdx+graph \
  --sizes 4000,32000 --repeats 20 --dtype float32
smi_stop
(cd $OUT && tar czf results.tar.gz r)
