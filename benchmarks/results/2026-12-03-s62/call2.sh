#!/usr/bin/env bash
# Session 62, call 2 (a fresh machine; carry .gpu/gpu_lib.tar.xz: call 1's op library, csrc unchanged since;
# .gpu/gpu_k43.tar.xz: GEN 43's kernels of tp-tests and tp-gpu-tests; .gpu/gpu_k43v.tar.xz: the MACE workloads' under
# w_evict=0 and under out_evict=0; .peers/full/wheels). GEN 43: the forward's bulk copies of the weight rows under
# the L2 evict-first policy (Tuning.w_evict, as the other kernels' loads of them), part 1's stores of grad_w and of
# the grad_x rows streaming (__stcs, Tuning.out_evict).
# 1. tests/gpu/test_tp_conv_cuda.py at GEN 43.
# 2. md_accel alone, each variant against GEN 43's default in turn, twice: the forwards of the three MACE shapes
#    (the bulk-copy forward), both dtypes, against w_evict=0; mace_mp0_medium's forward + backward and double
#    backward, both dtypes, against out_evict=0.
# 3. ncu at GEN 43: mace_large float64's forward (call 1 profiled it at GEN 42), mace_mp0_medium float64's part 1
#    of the first backward and of the double backward in the double-backward pass (session 59 and 45 at GEN 39 / 31).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=200 bash tools/gpu_check.sh > "$OUT/r/check_tp_conv.log" 2>&1
echo "gpu_check (test_tp_conv_cuda.py) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/r/check_tp_conv.log" | cut -c1-200 | tail -6
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
ab() {  # $1: tag, $2: the variant, then kernels.py's arguments
  local tag=$1 variant=$2; shift 2
  for run in 1 2; do
    for v in default "$variant"; do
      local name=${tag}_${v//=/}_$run
      if [[ $v == default ]]; then unset MD_ACCEL_TP_TUNING; else export MD_ACCEL_TP_TUNING=$v; fi
      timeout $((560 - SECONDS)) python benchmarks/kernels.py --impls md_accel "$@" --repeats 20 --min-seconds 1.0 \
        --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out "$R/$name" > "$R/$name.log" 2>&1
      echo "== $name rc=$? (${SECONDS}s)"
      grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:" "$R/$name.log" | cut -c1-100 | head -20
    done
  done
  unset MD_ACCEL_TP_TUNING
}
ab fwd w_evict=0 --workloads mace_large,mace_mp0_medium,mace_first --dtypes float64,float32 --passes fwd
ab bwd out_evict=0 --workloads mace_mp0_medium --dtypes float64,float32 --passes fwd_bwd,dbwd
smi_stop
for j in "$R"/*/kernels.json; do python benchmarks/smi_join.py "$j" "$R/smi.csv" > "${j%/kernels.json}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
LIMIT=$((590 - SECONDS)) bash tools/gpu_ncu.sh ml64:mace_large:float64:fwd:fwd_kernel \
  bwd64:mace_mp0_medium:float64:dbwd:bwd_kernel_bd dbwd64:mace_mp0_medium:float64:dbwd:dbwd_kernel_dd  # packs $OUT/r
