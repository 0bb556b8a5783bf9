#!/usr/bin/env bash
# Session 58, call 1 (a fresh machine; carry .peers/tab .gpu/gpu_k_acc32_72.tar.xz, the fwd_acc32=72 kernels of
# tp-tests and tp-gpu-tests built here): tools/gpu_stage.sh (the peers, the op library and, beside it, the default
# tp-tests + tp-gpu-tests kernels), tests/gpu/test_tp_conv_cuda.py under fwd_acc32=72 (float32's forward in one pass
# per multiplicity where 72 components allow: mace_large 2 -> 1, sevennet_l3i5 5 -> 4, nequip_l3 4 -> 3; float64's
# passes as the default's), then the float32 forward, md_accel alone, default and fwd_acc32=72 in turn, twice.
set -u
cd "$(dirname "$0")/../../.."
STAGE_PEERS=.peers/tab STAGE_TUNINGS="default" bash tools/gpu_stage.sh
mkdir -p "$OUT/c"
MD_ACCEL_TP_TUNING=fwd_acc32=72 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((420 - SECONDS)) \
  bash tools/gpu_check.sh > "$OUT/c/check.log" 2>&1
echo "gpu_check (fwd_acc32=72) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|SKIPPED|^build" "$OUT/c/check.log" | cut -c1-200 | tail -14
export SMI_LOG=100 WHEELS=.peers/tab/wheels PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=50 bash tools/tuning_sweep.sh $((585 - SECONDS)) "default fwd_acc32=72 default fwd_acc32=72" --passes fwd \
  --dtypes float32 --workloads mace_large,sevennet_l3i5,nequip_l3,mace_mp0_medium --graph random_sym:4000:312000 \
  --repeats 10 --min-seconds 0.3
smi_stop
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
