#!/usr/bin/env bash
# Session 83, call 3: where part 1's extra DRAM reads go (mace_mp0_medium float64 dbwd_kernel under ncu): the default
# and st_evict=1 at 4,000 and at 2,000 nodes (78 edges each: x + gg_x rows 32 / 16 MB), st_evict=1,sender_parts=4 at
# 4,000; then, with what is left, default / st_evict=1,sender_parts=4 timed in turn (double backward, md_accel alone).
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_st.tar.xz .gpu/gpu_stsp.tar.xz .gpu/s83 .peers/tab
set -u
END=${END:-380}
export WHEELS=.peers/tab/wheels
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site
export NCU_ARGS="--section MemoryWorkloadAnalysis_Tables" NCU_METRICS=lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum
ncu_cell() {  # VARIANT TAG GRAPH
  local t=$1; [[ $t == default ]] && t=""
  MD_ACCEL_TP_TUNING=$t NCU_GRAPH=$3 LIMIT=100 bash tools/gpu_ncu.sh "$2:mace_mp0_medium:float64:dbwd:dbwd_kernel" 2>&1 \
    | grep -E "^==|dram__|lookup_miss|Duration|Spilling Requests |NVIDIA"
  mv "$OUT/results.tar.gz" "$OUT/results_$2.tar.gz"
}
ncu_cell default d4k random_sym:4000:312000
ncu_cell st_evict=1,sender_parts=4 stsp4k random_sym:4000:312000
ncu_cell default d2k random_sym:2000:156000
ncu_cell st_evict=1 st2k random_sym:2000:156000
ncu_cell st_evict=1 st4k random_sym:4000:312000
T1=$SECONDS; SECONDS=0
source tools/gpu_call_start.sh
SWEEP_RUN_S=40 tools/tuning_sweep.sh $((END - T1 - 10)) "default st_evict=1,sender_parts=4 default st_evict=1,sender_parts=4" \
  --passes dbwd --workloads mace_mp0_medium --dtypes float64 --graph random_sym:4000:312000 --min-seconds 0.5
smi_stop
cd "$OUT" && tar czf all.tar.gz r results_*.tar.gz; rm -rf r results_*.tar.gz; ls
