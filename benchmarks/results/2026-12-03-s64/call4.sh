#!/usr/bin/env bash
# Session 64, call 4 (carry .gpu/gpu_lib.tar.xz; .gpu/gpu_k44b.tar.xz: tp-tests' and tests/gpu's kernels at GEN 44 as
# committed (the grad_out rule beside the grad_y rule), the default and g_spill_bytes=0, built here; .peers/tab: the lean
# peers bundle, tools/peers_tab.sh, whose wheels serve tools/gpu_call_env.sh here):
# 1. GEN 44's default against the same without the grad_out rule (GEN 43's kernels), md_accel alone, float64 forward +
#    backward and double backward of the six workloads, in turn twice;
# 2. tests/gpu/test_tp_conv_cuda.py at GEN 44's default;
# 3. mace_mp0_medium float64, forward + backward and double backward, md_accel against cuEquivariance in one process.
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=90 bash tools/tuning_sweep.sh 200 "default g_spill_bytes=0 default g_spill_bytes=0" \
  --dtypes float64 --passes fwd_bwd,dbwd --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.4
mkdir -p "$OUT/c"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=200 bash tools/gpu_check.sh > "$OUT/c/check_default.log" 2>&1
echo "gpu_check (test_tp_conv_cuda.py, default) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed" "$OUT/c/check_default.log" | cut -c1-200 | tail -4
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
left=$((585 - SECONDS))
PYTHONPATH=$PWD/.gpu/site${PYTHONPATH:+:$PYTHONPATH} TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 timeout $left \
  python benchmarks/kernels.py --impls md_accel,cueq --workloads mace_mp0_medium --dtypes float64 \
  --passes fwd_bwd,dbwd --repeats 10 --min-seconds 1.0 --graph random_sym:4000:312000 --reference-cache .gpu/refcache \
  --out "$R/peers_mm64" > "$R/peers_mm64.log" 2>&1
echo "== peers rc=$? (${SECONDS}s)"
grep -E " (fwd_bwd|dbwd) |check|Error|error" "$R/peers_mm64.log" | cut -c1-120 | head -20
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r c logs 2>/dev/null)
