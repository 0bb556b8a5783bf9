#!/usr/bin/env bash
# Session 83, call 2: Tuning.st_evict (part 1's grad_w and grad_x-row stores L2 evict-first) on mace_mp0_medium
# float64: ncu of the double backward's part 1 under it; md_accel alone, default / st_evict=1 in turn twice (forward +
# backward and double backward); then st_evict=1 against cuEquivariance in one process with what is left.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_st.tar.xz .gpu/s83 .peers/tab
set -u
END=${END:-400}
export WHEELS=.peers/tab/wheels
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site
export NCU_ARGS="--section MemoryWorkloadAnalysis_Tables" NCU_METRICS=lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum
ncu_cell() {  # VARIANT TAG WORKLOAD_PASS_REGEX
  local t=$1; [[ $t == default ]] && t=""
  MD_ACCEL_TP_TUNING=$t LIMIT=100 bash tools/gpu_ncu.sh "$2:$3" 2>&1 | grep -vi "warning: target directory" | head -12
  mv "$OUT/results.tar.gz" "$OUT/results_$2.tar.gz"
}
ncu_cell st_evict=1 p1_st_evict mace_mp0_medium:float64:dbwd:dbwd_kernel
T1=$SECONDS; SECONDS=0
source tools/gpu_call_start.sh
SWEEP_RUN_S=60 tools/tuning_sweep.sh $((END - T1 - 130)) "default st_evict=1 default st_evict=1" --passes fwd_bwd,dbwd \
  --workloads mace_mp0_medium --dtypes float64 --graph random_sym:4000:312000 --min-seconds 0.5 --kernel-times
left=$((END - T1 - SECONDS - 10))
if ((left > 60)); then
  MD_ACCEL_TP_TUNING=st_evict=1 timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq \
    --dtypes float64 --workloads mace_mp0_medium --passes dbwd --repeats 10 --min-seconds 1.0 --kernel-times \
    --budget $((left - 15)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/peer" \
    > "$R/peer.log" 2>&1
  echo "== peer rc=$? (${SECONDS}s)"; grep -v "^\[" "$R/peer.log" | cut -c1-150 | tail -n 14
fi
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r results_*.tar.gz && cp r/ncu_p1_*[a-z0-9].txt . 2>/dev/null; rm -rf r results_*.tar.gz; ls
