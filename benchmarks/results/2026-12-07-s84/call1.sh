#!/usr/bin/env bash
# Written in session 83 for the next device call (~360 s; `END=360 bash .gpu/s83/next_call.sh`). Session 83 found the
# double backward's part 1 rereading its gathered x / gg_x rows as if they kept only ~7-8 MB of L2 (32 MB and 16 MB
# row sets alike). This call: (1) tools/l2_gather_probe.cu under ncu (is that share set by the other streams or by the
# L2?); (2) ncu of part 1 (mace_mp0_medium float64) at sender_parts=8 and 16, whose row working sets (4 / 2 MB) sit
# inside that share where K = 4's (8 MB) did not, against the default; (3) default / sender_parts=8 / sender_parts=16
# timed in turn twice, md_accel alone; (4) with what is left, the faster K against cuEquivariance in one process.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_sp816.tar.xz .gpu/s83 .peers/tab
set -u
END=${END:-360}
mkdir -p "$OUT/r"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
nvcc -O3 -arch=sm_90 -o /tmp/l2_gather_probe tools/l2_gather_probe.cu && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
/tmp/l2_gather_probe | tee "$OUT/r/probe_times.txt"
timeout 90 "$NCU" --clock-control none -k probe_kernel --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
  /tmp/l2_gather_probe > "$OUT/r/probe_ncu.txt" 2>&1
echo "== probe ncu rc=$? (${SECONDS}s)"; grep -E "dram__bytes|gpu__time" "$OUT/r/probe_ncu.txt" | awk '{print $1, $(NF-1), $NF}' | paste - - -
export WHEELS=.peers/tab/wheels
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
for v in default sender_parts=8 sender_parts=16; do
  t=$v; [[ $t == default ]] && t=""
  MD_ACCEL_TP_TUNING=$t LIMIT=60 bash tools/gpu_ncu.sh "p1_${v//=/}:mace_mp0_medium:float64:dbwd:dbwd_kernel" 2>&1 \
    | grep -E "^==|dram__|lookup_miss|Duration|Spilling Requests "
  mv "$OUT/results.tar.gz" "$OUT/results_${v//=/}.tar.gz"
done
T1=$SECONDS; SECONDS=0
source tools/gpu_call_start.sh
SWEEP_RUN_S=40 tools/tuning_sweep.sh $((END - T1 - 90)) \
  "default sender_parts=8 sender_parts=16 default sender_parts=8 sender_parts=16" --passes fwd_bwd,dbwd \
  --workloads mace_mp0_medium --dtypes float64 --graph random_sym:4000:312000 --min-seconds 0.5
left=$((END - T1 - SECONDS - 10))
if ((left > 60)); then
  MD_ACCEL_TP_TUNING=${PEER_TUNING:-sender_parts=8} timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq \
    --dtypes float64 --workloads mace_mp0_medium --passes dbwd --repeats 10 --min-seconds 1.0 --kernel-times \
    --budget $((left - 15)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/peer" \
    > "$R/peer.log" 2>&1
  echo "== peer rc=$? (${SECONDS}s)"; grep -E "^\| (md_accel|cueq|byte)" "$R/peer.log"
fi
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r results_*.tar.gz; rm -rf r results_*.tar.gz; ls
