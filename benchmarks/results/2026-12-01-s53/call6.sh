#!/usr/bin/env bash
# Session 53, call 6: GEN 36 (GEN 35 plus the producer's fence.proxy.async before each refill of a stage, the
# launcher's compute-capability test per device): tests/gpu/test_tp_conv_cuda.py (with the new check that the 128-channel
# plan's forward is fwd_kernel_tma and a misaligned x gets the forward without copies), then the forward of the three
# MACE workloads, md_accel alone, GEN 36 and fwd_tma=0 in turn (GEN 36, fwd_tma=0, GEN 36), at least 0.5 s per cell.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen36.tar.xz .gpu/refcache .peers/k
set -u
cd "$(dirname "$0")/../../.."
export SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=150 bash tools/gpu_check.sh > $R/check.log 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|bulk_copies" $R/check.log | cut -c1-200 | tail -12
declare -A V=([gen36]="" [notma]="fwd_tma=0")
for v in gen36_1:gen36 notma_1:notma gen36_2:gen36; do
  tag=${v%%:*}; tune=${V[${v##*:}]}
  MD_ACCEL_TP_TUNING=$tune timeout $((245 - SECONDS)) python benchmarks/kernels.py --impls md_accel \
    --workloads mace_mp0_medium,mace_large,mace_first --dtypes float32,float64 --passes fwd --repeats 20 \
    --min-seconds 0.5 --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/$tag > $R/$tag.log 2>&1
  echo "== $tag rc=$? (${SECONDS}s)"
  grep -E "md_accel +fwd" $R/$tag.log | awk '{printf "%s ", $3}'; echo
done
smi_stop
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
