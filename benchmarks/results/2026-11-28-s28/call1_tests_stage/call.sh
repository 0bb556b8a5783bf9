#!/usr/bin/env bash
# Prepared in session 27 for the next device session: build the op library, GPU tests of session 27's
# unmeasured code (atomic pair / chunk path, the rest of the conv files), then warp-private staging
# (Tuning.stage) against the defaults, md_accel alone, each setting twice in turn.
# Carry: .gpu/gpu_prebuilt.tar.xz .gpu/gpu_st.tar.xz .peers/k/wheels .peers/vt .gpu/s27
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
pack() { (cd $OUT && tar czf results.tar.gz r); }
export PYTHON=python
GPU_TESTS="tests/gpu/test_tp_conv_cuda.py tests/gpu/test_tp_conv_fused_cuda.py tests/gpu/test_cuda_graph.py tests/gpu/test_model_cuda.py" \
  GPU_TEST_LIMIT=300 bash tools/gpu_check.sh > $R/gpu_check.log 2>&1
grep -A8 -- "--- summary ---" $R/gpu_check.log; grep -E "FAILED|ERROR" $R/gpu_check.log | head -20; pack
export MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
export PYTHONPATH=$PWD:/tmp/gpu-check-site
for t in "" stage=3 stage=2 "" stage=3 stage=2; do
  left=$((585 - SECONDS)); [ $left -lt 30 ] && { echo "skipped '$t': ${left}s left" >> $R/stage.txt; continue; }
  MD_ACCEL_TP_TUNING=$t WLS=mace_mp0_medium,mace_large,sevennet_0,mace_first timeout $((left < 70 ? left : 70)) python .gpu/s27/stage.py 2>&1 \
    | grep -v Warn | tee -a $R/stage.txt
done
pack
