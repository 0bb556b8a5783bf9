#!/usr/bin/env bash
# Session 51, call 5 (fresh machine): kernels.py --kernel-times (each kernel's device time per call, torch.profiler)
# for the double-backward pass of mace_mp0_medium float64 and sevennet_0 float32: md_accel's default (GEN 33, the
# donated gg_w), its atomic mode and cuEquivariance, one process per cell, at least 1.5 s per cell.
# Carry: .peers/tab .gpu/gpu_lib.tar.xz (call 1's) .gpu/gpu_gen33.tar.xz .gpu/refcache
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage_tab.log" 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
for wd in mace_mp0_medium:float64 sevennet_0:float32; do
  IFS=: read -r wl dt <<<"$wd"
  timeout $((230 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_atomic,cueq --workloads $wl \
    --dtypes $dt --passes dbwd --repeats 10 --min-seconds 1.5 --kernel-times --graph random_sym:4000:312000 \
    --reference-cache .gpu/refcache --out $R/kt_${wl}_$dt > $R/kt_${wl}_$dt.log 2>&1
  echo "== kt $wl $dt rc=$? (${SECONDS}s)"
done
python - "$R" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/kt_*/kernels.json")):
    for r in json.load(open(f))["results"]:
        if r.get("kernels"):
            print(r["workload"], r["dtype"], r["impl"], r["pass"], round(r["median_ms"], 3))
            for name, v in sorted(r["kernels"].items(), key=lambda kv: -kv[1]["us"])[:8]:
                print(f"   {v['us']:9.1f} us x{v['launches']:.0f}  {name[:100]}")
PY
(cd $OUT && tar czf results.tar.gz r)
