#!/usr/bin/env bash
# Written in session 84 for the next device call (~220 s; copy it to .gpu/s85/, then `END=220 bash
# .gpu/s85/next_call.sh`): Tuning.wave and wave_bwd (the part-1 kernels of the double backward and of the backward
# walking each receiver's edges from a rotated start, so that the blocks in flight read one band of senders). ncu of
# the double backward's part 1 (mace_mp0_medium float64) under wave=3 (session 84's call 1 measured the default:
# 8.58 GB read); default / wave=3 / wave=2 / wave=4 / wave=3,wave_bwd=3, then default / wave=3 / wave=3,wave_bwd=3
# again, timed in turn (forward + backward and double backward, md_accel alone); then, with what is left, the faster
# against cuEquivariance in one process (PEER_TUNING, default wave=3).
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_wave.tar.xz .gpu/s85 .peers/tab (gpu_wave: mace_mp0_medium
# under wave=2, 3, 4 and wave=3,wave_bwd=3: tools/prebuild_gpu_kernels.py tp-tests --workloads mace_mp0_medium
# --tuning wave=2 --tuning wave=3 --tuning wave=4 --tuning wave=3,wave_bwd=3 --name wave)
set -u
END=${END:-220}
mkdir -p "$OUT/r"
export WHEELS=.peers/tab/wheels
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
MD_ACCEL_TP_TUNING=wave=3 LIMIT=45 bash tools/gpu_ncu.sh "p1_wave3:mace_mp0_medium:float64:dbwd:dbwd_kernel" 2>&1 \
  | grep -E "^==|dram__|lookup_miss|Duration|Spilling Requests "
mv "$OUT/results.tar.gz" "$OUT/results_wave3.tar.gz"
T1=$SECONDS; SECONDS=0
source tools/gpu_call_start.sh
SWEEP_RUN_S=30 tools/tuning_sweep.sh $((END - T1 - 60)) \
  "default wave=3 wave=2 wave=4 wave=3,wave_bwd=3 default wave=3 wave=3,wave_bwd=3" --passes fwd_bwd,dbwd \
  --workloads mace_mp0_medium --dtypes float64 --graph random_sym:4000:312000 --min-seconds 0.5
left=$((END - T1 - SECONDS - 5))
((left > 50)) && MD_ACCEL_TP_TUNING=${PEER_TUNING:-wave=3} bash tools/gpu_item1.sh peer "$left"
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r results_*.tar.gz; rm -rf r results_*.tar.gz; ls
