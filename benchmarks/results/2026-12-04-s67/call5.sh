#!/usr/bin/env bash
# Session 67, call 5, a fresh machine (carry as calls 3-4): the double backward of the MACE shapes, sevennet_0 and
# nequip_l3 in both dtypes with md_accel's grad_x-row modes beside its default (md_accel_gwrows: the rows in grad_w
# columns in every backward, the final double backward's grad_w in a buffer of its own; md_accel_scratch: the rows in
# the scratch everywhere; md_accel_keep_ggw: the default but for that grad_w) and cuEquivariance, in one process.
set -u
cd "$(dirname "$0")/../../.."
if [[ ! -d .gpu/site/cuequivariance_torch ]]; then
  (PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
fi
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh 2> /dev/null
timeout $((570 - SECONDS)) python benchmarks/kernels.py \
  --impls md_accel,md_accel_gwrows,md_accel_scratch,md_accel_keep_ggw,cueq --dtypes float64,float32 \
  --workloads mace_mp0_medium,mace_large,sevennet_0,nequip_l3 --passes dbwd --repeats 10 --min-seconds 1.0 \
  --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out "$R/modes" > "$R/modes.log" 2>&1
echo "== modes rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/modes/kernels.json" "$R/smi.csv" > "$R/smi_join.txt" 2>&1
find "$R" -name "*.png" -delete
grep -E "^\[kernels\] [a-z_0-9]+ float| dbwd " "$R/modes.log" | cut -c1-100
(cd "$OUT" && tar czf results.tar.gz r)
