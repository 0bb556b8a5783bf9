#!/usr/bin/env bash
# Session 83, call 4: the L2 probe (tools/l2_gather_probe.cu) under ncu, then #3's item 1 at HEAD (default kernels):
# mace_mp0_medium float64's double backward, md_accel against cuEquivariance, one process (kernels.py, the symmetric
# random graph) and, time permitting, a second.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/s83 .peers/tab
set -u
END=${END:-300}
mkdir -p "$OUT/r"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
nvcc -O3 -arch=sm_90 -o /tmp/l2_gather_probe tools/l2_gather_probe.cu && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
/tmp/l2_gather_probe | tee "$OUT/r/probe_times.txt"
timeout 120 "$NCU" --clock-control none -k probe_kernel --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum \
  /tmp/l2_gather_probe > "$OUT/r/probe_ncu.txt" 2>&1
echo "== probe ncu rc=$? (${SECONDS}s)"; grep -E "dram__bytes|gpu__time|lookup_miss" "$OUT/r/probe_ncu.txt" | awk '{print $1, $(NF-1), $NF}' | paste - - - -
source tools/gpu_call_start.sh
for k in 1 2; do
  left=$((END - 10 - SECONDS)); ((left < 75)) && break
  timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
    --passes dbwd --repeats 10 --min-seconds 1.0 --kernel-times --budget $((left - 15)) --graph random_sym:4000:312000 \
    --reference-cache "$PWD/.gpu/refcache" --out "$R/peer$k" > "$R/peer$k.log" 2>&1
  echo "== peer$k rc=$? (${SECONDS}s)"; grep -E "^\| (md_accel|cueq|byte)" "$R/peer$k.log"
done
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r; rm -rf r; ls
