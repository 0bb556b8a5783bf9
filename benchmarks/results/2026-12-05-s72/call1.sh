#!/usr/bin/env bash
# Session 72, call 1 (session 71's prepared call, widened to a full budget), a fresh machine (carry .peers/tab: cuEquivariance; .gpu/gpu_lib.tar.xz: session 70's op library,
# csrc unchanged; .gpu/gpu_s71gt.tar.xz: tests/gpu's tensor-product configurations at GEN 46; .gpu/gpu_s71new.tar.xz:
# mace_mp0_medium's kernels at GEN 46; .gpu/gpu_old45.tar.xz: its GEN 45 kernels under GEN 46's file name in a build
# folder of their own, .gpu/old). GEN 46 zeroes only the unwritten columns of grad_w and of the grad_x rows per edge
# (no per-column scan of the written ones). First the whole of tests/gpu/test_tp_conv_cuda.py at GEN 46 (CUDA against the CPU
# reference, outputs poisoned), then mace_mp0_medium float64 forward + backward and double backward under GEN 46 and
# GEN 45 in turn twice, md_accel and cuEquivariance in one process per run, the clock log running.
set -u
cd "$(dirname "$0")/../../.."
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
ls .gpu/old/tp_specs .gpu/build/tp_specs | tail -n 12
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
for round in 1 2 3; do
  for v in gen46 gen45; do
    left=$((545 - SECONDS)); ((left < 40)) && { echo "skipped $v.$round: ${left}s left"; continue; }
    dir=$PWD/.gpu/build; [[ $v == gen45 ]] && dir=$PWD/.gpu/old
    MD_ACCEL_BUILD_DIR=$dir timeout $((left < 60 ? left : 60)) python benchmarks/kernels.py --impls md_accel,cueq \
      --dtypes float64 --workloads mace_mp0_medium --passes fwd_bwd,dbwd --graph random_sym:4000:312000 --repeats 10 \
      --min-seconds 1.0 --reference-cache "$PWD/.gpu/refcache" --out "$R/$v.$round" > "$R/$v.$round.log" 2>&1
    echo "== $v.$round (rc=$?, ${SECONDS}s)"
    python benchmarks/smi_join.py "$R/$v.$round/kernels.json" "$R/smi.csv" > "$R/${v}.${round}_smi.txt" 2>&1
    cat "$R/${v}.${round}_smi.txt"; grep -h "check:" "$R/$v.$round.log"
  done
done
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
