#!/usr/bin/env bash
# Session 78, call 1 (a fresh machine): Tuning.fwd_cgy (the forward's sums over j formed once per warp and edge in
# shared memory) against the defaults. Carry .peers/tab (ase and vesin wheels in its wheels/) and make_packs.sh's
# .gpu/gpu_s78wl.tar.xz, .gpu/gpu_cgy.tar.xz, .gpu/gpu_cgygt.tar.xz (and .gpu/gpu_s77gt.tar.xz for call 2's tests).
# 1. the op library built (returned as gpu_lib.tar.xz for the calls after);
# 2. the forwards of the three workloads whose passes run several edge slots (the others' forward is the bulk-copy
#    kernel, which fwd_cgy leaves), md_accel alone, default / fwd_cgy=1 in turn twice, both dtypes;
# 3. tests/gpu/test_tp_conv_cuda.py under fwd_cgy=1 with what time is left (END: the seconds the call may run).
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/r"
GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=200
source tools/gpu_call_env.sh > /dev/null || exit 3
end=${END:-570}
sweep=$((end - 150 - SECONDS)); ((sweep < 200)) && sweep=$((end - 15 - SECONDS))  # the tests get what is left
SWEEP_RUN_S=70 bash tools/tuning_sweep.sh $sweep "default fwd_cgy=1 default fwd_cgy=1" --passes fwd \
  --dtypes float32,float64 --workloads nequip_l3,sevennet_l3i5,sevennet_0 --min-seconds 0.5 \
  --graph random_sym:4000:312000
left=$((end - 15 - SECONDS))
if ((left > 60)); then
  MD_ACCEL_TP_TUNING=fwd_cgy=1 timeout "$left" python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -x \
    -p no:cacheprovider > "$R/gpu_tests_cgy.log" 2>&1
  echo "tests under fwd_cgy=1: rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests_cgy.log"
else
  echo "no time left for the tests (${left}s)"
fi
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
