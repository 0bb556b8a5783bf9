#!/usr/bin/env bash
# Session 85, call 1 (fresh machine): the op library, then session 84's planned call (wave; its script replaced by
# this one): ncu of dbwd part 1 under wave=3 and wave=3,wave_ctr=1,
# the sweep, then item 1 against cuEquivariance.
set -u
END=${END:-570}
mkdir -p "$OUT/r"
export WHEELS=.peers/tab/wheels
source tools/gpu_call_start.sh
echo "library at ${SECONDS}s"
export NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum
for t in wave=3 wave=3,wave_ctr=1; do
  MD_ACCEL_TP_TUNING=$t LIMIT=48 bash tools/gpu_ncu.sh "p1_${t//[=,]/}:mace_mp0_medium:float64:dbwd:dbwd_kernel" 2>&1 \
    | grep -E "^==|dram__|lookup_miss|Duration|Spilling Requests "
  mv "$OUT/results.tar.gz" "$OUT/results_${t//[=,]/}.tar.gz"
done
T1=$SECONDS; SECONDS=0
SWEEP_RUN_S=30 tools/tuning_sweep.sh $((END - T1 - 70)) \
  "default wave=3 wave=3,wave_ctr=1 wave=4,wave_ctr=1 wave=3,wave_bwd=3,wave_ctr=1 default wave=3,wave_ctr=1 wave=3" --passes fwd_bwd,dbwd \
  --workloads mace_mp0_medium --dtypes float64 --graph random_sym:4000:312000 --min-seconds 0.5
left=$((END - T1 - SECONDS - 5))
((left > 50)) && MD_ACCEL_TP_TUNING=${PEER_TUNING:-wave=3,wave_ctr=1} bash tools/gpu_item1.sh peer "$left"
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r results_*.tar.gz; rm -rf r results_*.tar.gz; ls
