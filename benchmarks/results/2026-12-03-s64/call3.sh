#!/usr/bin/env bash
# Session 64, call 3 (carry .gpu/gpu_lib.tar.xz; .gpu/gpu_k44.tar.xz: tp-tests' kernels at GEN 44, built here, the default
# and g_spill_bytes=0 (GEN 44 without the grad_out rule: GEN 43's kernels); .gpu/gpu_kt44.tar.xz: the configurations of
# tests/gpu/test_tp_conv_cuda.py at GEN 44, the default and g_smem=15; .peers/full/wheels):
# 1. GEN 44's default (grad_out through shared memory in the part-1 kernels whose float64 build spilled >= 128 bytes)
#    against the same without the rule, md_accel alone, forward + backward and double backward of the six workloads,
#    both dtypes, in turn twice;
# 2. tests/gpu/test_tp_conv_cuda.py at GEN 44's default, then with every part-1 kernel's grad_out in shared memory
#    (g_smem=15), against the CPU reference.
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
SWEEP_RUN_S=110 bash tools/tuning_sweep.sh 330 "default g_spill_bytes=0 default g_spill_bytes=0" \
  --passes fwd_bwd,dbwd --graph random_sym:4000:312000 --repeats 10 --min-seconds 0.4
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
grep -h "max relative error" -A16 "$R"/*.log | grep md_accel | sort | uniq -c | head -14
mkdir -p "$OUT/c"
for t in default g_smem=15; do
  left=$((590 - SECONDS)); ((left < 60)) && { echo "skipped tests under $t"; continue; }
  [[ $t == default ]] && unset MD_ACCEL_TP_TUNING || export MD_ACCEL_TP_TUNING=$t
  GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=$((left - 20)) bash tools/gpu_check.sh \
    > "$OUT/c/check_${t//=/}.log" 2>&1
  echo "gpu_check (test_tp_conv_cuda.py, $t) rc=$? (${SECONDS}s)"
  grep -E "^(FAILED|ERROR)|^E  |passed|failed" "$OUT/c/check_${t//=/}.log" | cut -c1-200 | tail -6
done
unset MD_ACCEL_TP_TUNING
(cd "$OUT" && tar czf results.tar.gz r c logs 2>/dev/null)
