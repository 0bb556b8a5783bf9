#!/usr/bin/env bash
# Prepared in session 76 for the next session's first call (a fresh machine; not run: session 76's device time went
# to refused starts). Carry .peers/tab and the packs of make_packs.sh (.gpu/gpu_s76gt.tar.xz, .gpu/gpu_s76mm.tar.xz:
# GEN 49's kernels, with the fixed-point ones, for tests/gpu/test_tp_conv_cuda.py and mace_mp0_medium); move other
# results folders out of the tree first if the carry exceeds 64 MiB. Every step under MD_ACCEL_TP_TUNING=fixed_gx=1
# (the libraries then also hold the kFixed kernels; their default kernels are the default library's).
# 1. the op library built (GEN 49, spec interface 12; returned as gpu_lib.tar.xz);
# 2. mace_mp0_medium float64 double backward and forward + backward: md_accel (rows), md_accel_fixed (set_fixed_gx)
#    and cuEquivariance in one process, with each pass's kernels (and kernels.py's checks against e3nn);
# 3. the fixed-point tests of tests/gpu/test_tp_conv_cuda.py, then the whole file if time is left.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
export MD_ACCEL_TP_TUNING=fixed_gx=1
GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
left=$((330 - SECONDS))
timeout "$left" python benchmarks/kernels.py --impls md_accel,md_accel_fixed,cueq --dtypes float64 \
  --workloads mace_mp0_medium --passes dbwd,fwd_bwd --repeats 10 --min-seconds 1.0 --kernel-times \
  --budget $((left - 15)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/mm" \
  > "$R/mm.log" 2>&1
echo "== rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/mm/kernels.json" "$R/smi.csv" > "$R/mm_smi.txt" 2>&1
cat "$R/mm_smi.txt"; grep -v "^\[" "$R/mm.log" | cut -c1-150 | tail -n 45
timeout 120 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider -k fixed_point \
  > "$R/gpu_fixed.log" 2>&1
echo "fixed-point tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_fixed.log"
timeout $((580 - SECONDS)) python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider \
  > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
