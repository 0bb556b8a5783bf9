#!/usr/bin/env bash
# Prepared in session 72 for the next session's first call, a fresh machine (carry .peers/tab: cuEquivariance;
# .gpu/gpu_lib.tar.xz: session 70's op library, csrc unchanged; .gpu/gpu_s72gt.tar.xz: tests/gpu's tensor-product
# configurations at GEN 47; .gpu/gpu_s72all.tar.xz: the six kernels.py workloads at GEN 47; .gpu/gpu_old46.tar.xz:
# their GEN 46 libraries under GEN 47's file names in a build folder of their own, .gpu/old). GEN 47 sums the CG
# non-zeros of one (i, j) pair over k before the part-1 contractions (and of one i over j in the forward's message).
# First the whole of tests/gpu/test_tp_conv_cuda.py at GEN 47 (CUDA against the CPU reference, outputs poisoned),
# then mace_mp0_medium float64 forward + backward and double backward under GEN 47 and GEN 46 in turn twice,
# cuEquivariance in each process, then the six workloads in both dtypes, md_accel alone, GEN 47 and GEN 46 in turn,
# the clock log running. Copy it into the next session's results folder before running it there.
set -u
cd "$(dirname "$0")/../../.."
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
ls .gpu/old/tp_specs | head -n 8
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
run() {  # run NAME GEN LIMIT kernels.py-arguments...
  local name=$1 gen=$2 limit=$3; shift 3
  local dir=$PWD/.gpu/build; [[ $gen == gen46 ]] && dir=$PWD/.gpu/old
  MD_ACCEL_BUILD_DIR=$dir timeout "$limit" python benchmarks/kernels.py "$@" --graph random_sym:4000:312000 \
    --repeats 10 --reference-cache "$PWD/.gpu/refcache" --out "$R/$name" > "$R/$name.log" 2>&1
  echo "== $name (rc=$?, ${SECONDS}s)"
  python benchmarks/smi_join.py "$R/$name/kernels.json" "$R/smi.csv" > "$R/${name}_smi.txt" 2>&1
  cat "$R/${name}_smi.txt"; grep -h "check:" "$R/$name.log"
}
for round in 1 2; do
  for v in gen47 gen46; do
    left=$((380 - SECONDS)); ((left < 40)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    run "$v.$round" $v $((left < 60 ? left : 60)) --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
      --passes fwd_bwd,dbwd --min-seconds 1.0
  done
done
for v in gen47 gen46; do
  end=570; [[ $v == gen47 ]] && end=470
  left=$((end - SECONDS)); ((left < 40)) && { echo "skipped all.$v: ${left}s left"; continue; }
  run "all.$v" $v "$left" --impls md_accel --dtypes float64,float32 --min-seconds 0.3 --budget $((left - 15))
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
