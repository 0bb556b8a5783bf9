#!/usr/bin/env bash
# Session 38, after tools/gpu_stage.sh on the same warm machine (peers in .gpu/site, the op library built from this
# csrc): g_grad_out summed in the double backward's part 1 (Tuning.dbwd_fuse). TESTS=1: the GPU tests first
# (tests/gpu/test_tp_conv_cuda.py). SWEEP=1: md_accel alone per MD_ACCEL_TP_TUNING variant (tools/tuning_sweep.sh),
# double backward, all six workloads: dbwd_fuse=0 (session 37's kernels), the default, smaller double-backward
# budgets. AB=1: md_accel alone, double backward, session 37's code (.gpu/base: its md_accel and benchmarks, GEN 26
# kernels prebuilt beside this code's) and this code, in turn, twice. KERNELS=1: benchmarks/kernels.py on session 30's symmetric random graph, md_accel's three grad_x modes
# and cuEquivariance, forward + backward and the double backward.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/refcache .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
[[ -d .gpu/site/cuequivariance_torch ]] || { echo "no staged peers in .gpu/site: run tools/gpu_stage.sh first"; exit 3; }
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
LIMIT=${LIMIT:-560}
WORKLOADS=${WORKLOADS:-mace_mp0_medium,mace_large,mace_first,sevennet_0,sevennet_l3i5,nequip_l3}
if [[ ${TESTS:-0} == 1 ]]; then
  MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1 timeout 240 python -m pytest -q -rs --maxfail=10 tests/gpu/test_tp_conv_cuda.py \
    > $R/tests.log 2>&1
  echo "== tests rc=$? (${SECONDS}s): $(tail -1 $R/tests.log)"; grep -E "^(FAILED|ERROR)" $R/tests.log | head -20
fi
if [[ ${SWEEP:-0} == 1 ]]; then
  SWEEP_RUN_S=${SWEEP_RUN_S:-110} bash tools/tuning_sweep.sh $((LIMIT - SECONDS)) \
    "${VARIANTS:-dbwd_fuse=0 default dbwd_g32=32,dbwd_g64=16}" --graph random_sym:4000:312000 --passes dbwd \
    --repeats 10 --workloads "$WORKLOADS"
fi
if [[ ${AB:-0} == 1 ]]; then
  root=$PWD
  for v in base new base new; do
    dir=$root; [[ $v == base ]] && dir=$root/.gpu/base
    (cd $dir && PYTHONPATH=$dir:/tmp/site:$root/.gpu/site timeout 100 python benchmarks/kernels.py --impls md_accel \
      --graph random_sym:4000:312000 --passes dbwd --repeats 10 --workloads "$WORKLOADS" \
      --reference-cache "$root/.gpu/refcache" --out "$R/ab_$v.$SECONDS" > "$R/ab_$v.$SECONDS.log" 2>&1)
    echo "== $v (rc=$?, ${SECONDS}s)"
    awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +(fwd|fwd_bwd|dbwd) / {printf "%s %s %s | ", c, $2, $3} END {print ""}' \
      "$(ls -t $R/ab_$v.*.log | head -1)"
  done
fi
if [[ ${KERNELS:-0} == 1 ]]; then
  timeout $((LIMIT - SECONDS)) python benchmarks/kernels.py --graph random_sym:4000:312000 --workloads "$WORKLOADS" \
    --impls md_accel_scratch,md_accel_gwrows,md_accel_atomic,cueq --passes fwd_bwd,dbwd --repeats 10 \
    --budget $((LIMIT - SECONDS - 15)) --reference-cache .gpu/refcache --out $R/kern > $R/kern.log 2>&1
  echo "== kernels rc=$? (${SECONDS}s)"
  python benchmarks/kernel_ratios.py $R/kern/kernels.json 2>&1 | head -14
  grep -E "^\| (md_accel|cueq)" $R/kern.log | head -60
fi
(cd $OUT && tar czf results.tar.gz r)
