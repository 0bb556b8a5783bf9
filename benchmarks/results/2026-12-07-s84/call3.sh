#!/usr/bin/env bash
# Session 84, call 3: item 1 at the defaults (GEN 48, unchanged by session 84's removal of sender_parts): md_accel
# against cuEquivariance, mace_mp0_medium float64 double backward, random_sym:4000:312000, in two processes.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .peers/tab
set -u
source tools/gpu_call_start.sh
for i in 1 2; do
  timeout 110 python benchmarks/kernels.py --impls md_accel,cueq --dtypes float64 --workloads mace_mp0_medium \
    --passes dbwd --repeats 10 --min-seconds 1.0 --kernel-times --budget 95 --graph random_sym:4000:312000 \
    --reference-cache "$PWD/.gpu/refcache" --out "$R/peer$i" > "$R/peer$i.log" 2>&1
  echo "== peer$i rc=$? (${SECONDS}s)"; grep -E "^\| (md_accel|cueq|byte)" "$R/peer$i.log"; grep -E " dbwd .*op " "$R/peer$i.log"
done
smi_stop
find "$R" -name "*.png" -delete
cd "$OUT" && tar czf all.tar.gz r; rm -rf r; ls
