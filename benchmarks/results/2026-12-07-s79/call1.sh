#!/usr/bin/env bash
# Session 79, call 1 (a fresh machine): the verification of HEAD's kernels (GEN 48, spec interface 11; csrc/ and the
# generated code are d683daa's). Carry .peers/tab (ase and vesin wheels in its wheels/), .gpu/gpu_s77gt.tar.xz
# (tests/gpu's configurations) and .gpu/gpu_s78wl.tar.xz (the six workloads), both made at GEN 48 by the make_packs.sh
# scripts of sessions 77 and 78.
# 1. the op library built (returned as gpu_lib.tar.xz for later calls);
# 2. tests/gpu/test_tp_conv_cuda.py, the whole file;
# 3. mace_mp0_medium float64, forward + backward and double backward, md_accel against cuEquivariance in one process;
# 4. with what is left (END: the seconds the call may run): the forwards of the six workloads, md_accel alone.
set -u
cd "$(dirname "$0")/../../.."
source tools/gpu_call_start.sh || exit 3
end=${END:-570}
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
run_kernels() {  # seconds, output name, kernels.py arguments...
  local s=$1 name=$2; shift 2
  ((s > 60)) || { echo "no time left for $name (${s}s)"; return; }
  timeout "$s" python benchmarks/kernels.py --repeats 10 --kernel-times --budget $((s - 15)) \
    --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/$name" "$@" > "$R/$name.log" 2>&1
  echo "== $name rc=$? (${SECONDS}s)"
  grep -v "^\[" "$R/$name.log" | cut -c1-150 | tail -n 30
}
run_kernels $((end - 110 - SECONDS)) mm --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
  --passes fwd_bwd,dbwd --min-seconds 1.0
run_kernels $((end - 10 - SECONDS)) fwd --impls md_accel --dtypes float32,float64 --passes fwd --min-seconds 0.5 \
  --workloads nequip_l3,sevennet_l3i5,sevennet_0,mace_mp0_medium,mace_large,mace_first
smi_stop
for n in mm fwd; do [ -f "$R/$n/kernels.json" ] && python benchmarks/smi_join.py "$R/$n/kernels.json" "$R/smi.csv" \
  > "$R/${n}_smi.txt" 2>&1; done
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
