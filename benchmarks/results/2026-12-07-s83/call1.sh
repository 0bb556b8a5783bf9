#!/usr/bin/env bash
# Session 82, call 3: where part 1's extra DRAM reads come from. ncu of mace_mp0_medium float64's dbwd_kernel: default,
# without the weights' L2 prefetch (prefetch=7), with it at evict-last priority (pf_last=1), without evict-first weight
# loads (w_evict=0); the backward's part 1; md_accel's double backward timed, default / pf_last=1 in turn, twice.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_p1var.tar.xz .gpu/s82 .peers/tab
set -u
END=${END:-330}  # seconds: what the call may take
export WHEELS=.peers/tab/wheels
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site
export NCU_ARGS="--section MemoryWorkloadAnalysis_Tables" NCU_METRICS=lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
ncu_cell() {  # VARIANT TAG WORKLOAD_PASS_REGEX
  local t=$1; [[ $t == default ]] && t=""
  MD_ACCEL_TP_TUNING=$t LIMIT=100 bash tools/gpu_ncu.sh "$2:$3" 2>&1 | grep -vi "warning: target directory"
  mv "$OUT/results.tar.gz" "$OUT/results_$2.tar.gz"
}
ncu_cell default p1_default mace_mp0_medium:float64:dbwd:dbwd_kernel
ncu_cell prefetch=7 p1_prefetch7 mace_mp0_medium:float64:dbwd:dbwd_kernel
ncu_cell pf_last=1 p1_pf_last mace_mp0_medium:float64:dbwd:dbwd_kernel
T1=$SECONDS; SECONDS=0
source tools/gpu_call_start.sh
SWEEP_RUN_S=60 tools/tuning_sweep.sh $((END - T1)) "default pf_last=1 default pf_last=1" --passes dbwd --workloads mace_mp0_medium \
  --dtypes float64 --graph random_sym:4000:312000 --min-seconds 0.5
smi_stop; unset SMI_LOG
((T1 + SECONDS < END - 40)) && ncu_cell w_evict=0 p1_w_evict0 mace_mp0_medium:float64:dbwd:dbwd_kernel
((T1 + SECONDS < END - 40)) && ncu_cell default b1_default mace_mp0_medium:float64:fwd_bwd:bwd_kernel_bd
for rep in /tmp/ncu_*.ncu-rep; do
  "$NCU" --import "$rep" --page details --print-details all > "$OUT/r/all_$(basename "$rep" .ncu-rep).txt" 2>&1
done
"$NCU" --query-metrics --chip gh100 2>&1 | grep -iE "^(lts__d|lts__t_sectors_srcunit_tex|lts__t_sectors_srcunit_ltcfabric|dram__sectors)" > "$OUT/r/metrics.txt"
# at most a few files come back: one archive of everything, and the ncu details of each cell
cd "$OUT" && tar czf all.tar.gz r && cp r/ncu_p1_*[a-z0-9].txt r/ncu_b1_*[a-z0-9].txt . 2>/dev/null; rm -rf r results_*.tar.gz; rm -f ncu_*_top.txt; ls
