#!/usr/bin/env bash
# Session 66, call 5, a fresh machine (carry .peers/full .gpu/gpu_lib.tar.xz: call 4's op library): tp-tests'
# kernels at GEN 45's default and the peers (tools/gpu_stage.sh), then kernels.py's float32 double backward of the
# three workloads whose float32 backward kernel GEN 45 changed (the double-backward pass runs a backward), with e3nn,
# cuEquivariance and OpenEquivariance in one process.
set -u
cd "$(dirname "$0")/../../.."
STAGE_KERNELS=tp-tests STAGE_TUNINGS=default bash tools/gpu_stage.sh
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
export PYTHONPATH=$PYTHONPATH:$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,e3nn,cueq,oeq_det,oeq_atomic --dtypes float32 \
  --workloads sevennet_0,nequip_l3,sevennet_l3i5 --passes dbwd --graph random_sym:4000:312000 --repeats 10 \
  --min-seconds 0.4 --reference-cache "$PWD/.gpu/refcache" --out "$R/peers32dd" > "$R/peers32dd.log" 2>&1
echo "table rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/peers32dd/kernels.json" "$R/smi.csv" > "$R/peers32dd_smi.txt" 2>&1
find "$R" -name "*.png" -delete
grep -E "^\*\*|^\| (md_accel|e3nn|cueq|oeq)" "$R/peers32dd/tables.md" | head -20
(cd "$OUT" && tar czf results.tar.gz r)
