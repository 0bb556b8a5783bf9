#!/usr/bin/env bash
# Session 47, call 2 (after staging .peers/tab on the same warm machine): session 46's plan item 1, the two double
# backwards under 1.3x. kernels.py --kernel-times (md_accel at GEN 32 and cuEquivariance, the GPU's busy time per
# kernel) for sevennet_0 float32 and mace_mp0_medium float64, then Nsight Compute on sevennet_0 float32's
# double-backward kernels (md_accel).
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
for wd in sevennet_0:float32 mace_mp0_medium:float64; do
  IFS=: read -r wl dt <<<"$wd"
  timeout $((300 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --workloads $wl --dtypes $dt \
    --passes dbwd --repeats 10 --min-seconds 1.5 --kernel-times --graph random_sym:4000:312000 \
    --reference-cache .gpu/refcache --out $R/kt_${wl}_$dt > $R/kt_${wl}_$dt.log 2>&1
  echo "== kt $wl $dt rc=$? (${SECONDS}s)"
  grep -E " dbwd |check:" $R/kt_${wl}_$dt.log | cut -c1-120
done
smi_stop
python - "$R" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/kt_*/kernels.json")):
    for r in json.load(open(f))["results"]:
        if r.get("kernels"):
            print(r["workload"], r["dtype"], r["impl"], r["pass"], round(r["median_ms"], 3))
            for name, v in sorted(r["kernels"].items(), key=lambda kv: -kv[1]["us"]):
                print(f"   {v['us']:9.1f} us x{v['launches']:.0f}  {name[:110]}")
PY
LIMIT=$((590 - SECONDS)) bash tools/gpu_ncu.sh s0dbwd:sevennet_0:float32:dbwd:dbwd_kernel_ds \
  s0bwd:sevennet_0:float32:dbwd:bwd_kernel_bs s0dfwd:sevennet_0:float32:dbwd:dfwd_kernel 2>&1 | tail -80
