#!/usr/bin/env bash
# Session 77's verification call, on the withdrawn fixed point's tree (GEN 48 again, spec interface 11), a fresh
# machine. Carry .peers/tab (with ase and vesin wheels in it) and make_packs.sh's .gpu/gpu_s77gt.tar.xz,
# .gpu/gpu_s77mm.tar.xz; move other results folders out of the tree first if the carry exceeds 64 MiB.
# 1. the op library built (returned as gpu_lib.tar.xz);
# 2. tests/gpu/test_tp_conv_cuda.py, the whole file;
# 3. mace_mp0_medium float64, the three passes, md_accel against cuEquivariance in one process, with each pass's kernels.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
left=$((${END:-560} - SECONDS))  # END: the seconds the call may run
[ "$left" -gt 60 ] || { echo "no time left for the timings"; left=0; }
[ "$left" -gt 0 ] && timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 \
  --workloads mace_mp0_medium --passes fwd,fwd_bwd,dbwd --repeats 10 --min-seconds 1.0 --kernel-times \
  --budget $((left - 15)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/mm" \
  > "$R/mm.log" 2>&1
echo "== rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/mm/kernels.json" "$R/smi.csv" > "$R/mm_smi.txt" 2>&1
cat "$R/mm_smi.txt"; grep -v "^\[" "$R/mm.log" | cut -c1-150 | tail -n 40
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
