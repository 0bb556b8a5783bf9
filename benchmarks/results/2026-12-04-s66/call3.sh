#!/usr/bin/env bash
# Session 66, call 3, a fresh machine (carry .peers/full): tools/gpu_stage.sh as in call 2 (default tuning only),
# then tests/gpu's tensor-product and CUDA-graph tests at GEN 45's default, then kernels.py's float32 forward +
# backward of the three workloads whose kernels GEN 45's rule changed, with e3nn, cuEquivariance and
# OpenEquivariance in the same run.
set -u
cd "$(dirname "$0")/../../.."
STAGE_KERNELS=tp-tests STAGE_TUNINGS=default bash tools/gpu_stage.sh &
(MD_ACCEL_NO_BUILD=1 PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py tp-gpu-tests --jobs 4 --name kt45 \
  > /tmp/prebuild_kt45.log 2>&1; tail -1 /tmp/prebuild_kt45.log) &
wait
export WHEELS=.peers/full/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null
export PYTHONPATH=$PYTHONPATH:$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
timeout 220 python -m pytest tests/gpu/test_tp_conv_cuda.py tests/gpu/test_cuda_graph.py -q -rs -p no:cacheprovider \
  > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 4 "$R/gpu_tests.log"
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,e3nn,cueq,oeq_det,oeq_atomic --dtypes float32 \
  --workloads sevennet_0,nequip_l3,sevennet_l3i5 --passes fwd_bwd --graph random_sym:4000:312000 --repeats 10 \
  --min-seconds 0.4 --reference-cache "$PWD/.gpu/refcache" --out "$R/peers32" > "$R/peers32.log" 2>&1
echo "table rc=$? (${SECONDS}s)"
smi_stop
python benchmarks/smi_join.py "$R/peers32/kernels.json" "$R/smi.csv" > "$R/peers32_smi.txt" 2>&1
find "$R" -name "*.png" -delete
cat "$R/peers32/tables.md" 2>/dev/null | head -40
(cd "$OUT" && tar czf results.tar.gz r)
