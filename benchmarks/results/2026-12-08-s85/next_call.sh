#!/usr/bin/env bash
# Written in session 85 for the next session's first device call (~560 s; copy to .gpu/s86/, then
# `END=560 bash .gpu/s86/next_call.sh`): Tuning.wave=1 (the double backward's part 1 walking each receiver's edges
# from a rotated start, K from the launch bounds) before it becomes the default: the tensor-product GPU tests under
# it; every workload's double backward, wave=1 against the default in turn (random_sym graph, then copper); item 1
# under wave=1 against cuEquivariance, twice.
# Before (here, ~8 min on 2 cores): tools/env.sh main; ../shared/tools/gpu-peers.sh .peers/full --keep "" and
#   tools/peers_tab.sh; .venv/bin/python tools/prebuild_gpu_kernels.py tp-tests --tuning default --tuning wave=1 --name w1
#   MD_ACCEL_TP_TUNING=wave=1 .venv/bin/python tools/prebuild_gpu_kernels.py tp-gpu-tests --name gtw1
# carry: .gpu/gpu_w1.tar.xz .gpu/gpu_gtw1.tar.xz .gpu/s86 .peers/tab (no .gpu/gpu_lib.tar.xz on a new checkout: the
# op library is built here, ~150 s; with it carried, that time goes to the sweeps)
set -u
END=${END:-560}
export WHEELS=.peers/tab/wheels
source tools/gpu_call_start.sh
MD_ACCEL_TP_TUNING=wave=1 GPU_TESTS=tests/gpu/test_tp_conv_cuda.py GPU_TEST_LIMIT=200 bash tools/gpu_check.sh \
  > "$R/gpu_tests_wave1.log" 2>&1
echo "gpu tests under wave=1 (${SECONDS}s):"; grep -E "passed|failed|FAILED|Error" "$R/gpu_tests_wave1.log" | tail -n 6
for k in 1 2; do
  left=$((END - SECONDS - 10))
  ((left > 70)) && MD_ACCEL_TP_TUNING=wave=1 bash tools/gpu_item1.sh "peer$k" $((left < 90 ? left : 90))
done
left=$((END - SECONDS - 10))
((left > 60)) && SWEEP_RUN_S=55 tools/tuning_sweep.sh $((left < 170 ? left : 170)) "default wave=1 default" \
  --passes dbwd --dtypes float64,float32 --graph random_sym:4000:312000 --min-seconds 0.5
left=$((END - SECONDS - 10))
((left > 60)) && SWEEP_RUN_S=55 tools/tuning_sweep.sh $left "default wave=1" --passes dbwd --dtypes float64,float32 \
  --graph cu:4000:6.0 --min-seconds 0.5
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r logs 2>/dev/null; rm -rf r logs; ls
