#!/usr/bin/env bash
# Session 53, call 3: GEN 35 (the forward's edge rows by bulk copies, Tuning.fwd_tma, where every forward pass has one
# edge slot): tests/gpu/test_tp_conv_cuda.py (whole file), then the three workloads whose forward kernel changed
# (mace_mp0_medium, mace_large, mace_first) with every peer, forward only, both dtypes, at least 1.5 s per cell.
# Carry: .peers/tab .peers/oeq .gpu/gpu_lib.tar.xz .gpu/gpu_gen35.tar.xz .gpu/refcache
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > "$OUT/r/stage_tab.log" 2>&1)
(PEERS_SITE=$PWD/.gpu/site source .peers/oeq/setup-on-gpu.sh > "$OUT/r/stage_oeq.log" 2>&1)
echo "staged: $(ls .gpu/site | wc -l) entries in .gpu/site (${SECONDS}s)"
GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=240 bash tools/gpu_check.sh > "$OUT/r/check.log" 2>&1
echo "gpu_check rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build" "$OUT/r/check.log" | cut -c1-200 | tail -12
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
export TORCH_EXTENSIONS_DIR=$PWD/.gpu/torch_ext
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq,oeq_det,oeq_atomic,e3nn \
  --workloads mace_mp0_medium,mace_large,mace_first --dtypes float32,float64 --passes fwd --repeats 10 --min-seconds 1.5 --budget $((565 - SECONDS)) \
  --graph random_sym:4000:312000 --reference-cache .gpu/refcache --out $R/peers_fwd > $R/peers_fwd.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E " (fwd|fwd_bwd|dbwd) |check:" $R/peers_fwd.log | cut -c1-100 | head -60
python benchmarks/smi_join.py $R/peers_fwd/kernels.json $R/smi.csv > $R/smi_join.txt 2>&1
(cd $OUT && tar czf r.tar.gz r logs 2>/dev/null && rm -rf r logs)
