#!/usr/bin/env bash
# Session 75, call 2 (call 1's machine, warm), run with gen49.diff applied to the tree (GEN 49: the backward's part 1
# with each path's grad_y terms and weight gradient summed apart, b1 of call 1). Carry .gpu/gpu_g49gt.tar.xz and
# .gpu/gpu_g49all.tar.xz (GEN 49's tests/gpu configurations and six workloads, built here) and .peers/tab.
# 1. tests/gpu/test_tp_conv_cuda.py at GEN 49 (CUDA against the CPU reference, outputs poisoned);
# 2. GEN 49's float64 kernel table against cuEquivariance (all six workloads, the three passes, one process).
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
timeout 200 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
dt=float64 left=$((585 - SECONDS))
timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq --dtypes $dt --repeats 10 --min-seconds 0.6 \
  --budget $((left - 25)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/$dt" \
  > "$R/$dt.log" 2>&1
echo "== $dt rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/$dt/kernels.json" "$R/smi.csv" > "$R/${dt}_smi.txt" 2>&1
grep -E "^\[kernels\] [a-z_0-9]+ float| (fwd|fwd_bwd|dbwd) |check:|floor" "$R/$dt.log" | cut -c1-120
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
