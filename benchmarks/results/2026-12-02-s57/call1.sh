#!/usr/bin/env bash
# Session 57, call 1 (a fresh machine; carry .peers/tab .peers/oeq): tools/gpu_stage.sh (the peers, the op library,
# the tp-tests + tp-gpu-tests kernels under the default tuning and p1_tma=3, side by side), the OpenEquivariance
# bundle, tests/gpu/test_tp_conv_cuda.py at the default tuning (this commit's kernels: fwd_tma=3 taken out, the
# generated defaults unchanged), then the p1_tma A/B on the two MACE shapes session 55 did not time (md_accel alone,
# forward + backward and double backward, default and p1_tma=3 in turn, twice).
set -u
cd "$(dirname "$0")/../../.."
STAGE_PEERS=.peers/tab STAGE_TUNINGS="default p1_tma=3" bash tools/gpu_stage.sh
(PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > /dev/null 2>&1) && echo "staged: openequivariance"
mkdir -p "$OUT/c"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((400 - SECONDS)) bash tools/gpu_check.sh > "$OUT/c/check.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|SKIPPED|^build" "$OUT/c/check.log" | cut -c1-200 | tail -14
export SMI_LOG=100 WHEELS=.peers/tab/wheels PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
source tools/gpu_call_env.sh 2> /dev/null
SWEEP_RUN_S=60 bash tools/tuning_sweep.sh $((580 - SECONDS)) "default p1_tma=3 default p1_tma=3" --passes fwd_bwd,dbwd \
  --workloads mace_large,mace_first --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.3
smi_stop
find $R -name "*.png" -delete
mv "$OUT/c" "$R/check"
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
