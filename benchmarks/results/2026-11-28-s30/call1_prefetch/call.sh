#!/usr/bin/env bash
# Prepared in session 29: the prefetch bits on the copper graph, md_accel alone, all three passes, defaults and
# MD_ACCEL_TP_TUNING=prefetch=63 (PF_ALL: the forward's and part 1's next-edge y / x lines) in turn twice, then prefetch=31 (forward
# only) and prefetch=47 (part 1 only) as time allows; e3nn's check results cached across runs
# (--reference-cache), the time-based warm-up in common.time_gpu. Session 29's call 1 (one run each):
# prefetch=31 1.7-6.1 % faster forward in 4 of 5 cells, 5 % slower on mace_mp0_medium float64.
# Then nequip_l3 / sevennet_l3i5 forwards with min_warps32=20 and fwd_acc=64 (specs also in gpu_pf, 26 MiB).
# Carry: .gpu/gpu_wl.tar.xz .gpu/gpu_pf.tar.xz .gpu/gpu_lib.tar.xz (valid while csrc/ is 127c39f's) .peers/k/wheels .gpu/s30
set -u
cd "$(dirname "$0")/../.."
R=$OUT/r; mkdir -p $R
export PYTHON=python MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .peers/k/wheels/ase-*.whl .peers/k/wheels/vesin-*.whl
export PYTHONPATH=$PWD:/tmp/site
WL=${WL:-mace_mp0_medium,mace_large,sevennet_0,sevennet_l3i5,nequip_l3}
for t in "" prefetch=63 "" prefetch=63 prefetch=31 prefetch=47; do
  left=$((440 - SECONDS)); [ $left -lt 50 ] && { echo "skipped '$t': ${left}s left"; continue; }
  tag=${t:-default}; tag=${tag//=/}.$SECONDS
  MD_ACCEL_TP_TUNING=$t timeout $((left < 150 ? left : 150)) python benchmarks/kernels.py --impls md_accel \
    --workloads $WL --repeats 10 --reference-cache $PWD/.gpu/refcache --out $R/$tag > $R/$tag.log 2>&1
  echo "== ${t:-default} (rc=$?)"
  awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +(fwd|fwd_bwd|dbwd) / {printf "%s %s %s | ", c, $2, $3} END {print ""}' $R/$tag.log
done
# then the 32-channel forwards with launch bounds for 20 warps per SM (96 registers, no spills; session 29's sweep
# reached only mace_mp0_medium with it) and with a budget of 64 (ptxas, nequip_l3: float32 128 registers, no spills,
# fewer passes over the edges; float64 spills 1,444 bytes, so a win would make the budget per dtype): forward
# only, in turn
for t in "" min_warps32=20 fwd_acc=64 "" min_warps32=20 fwd_acc=64; do
  left=$((585 - SECONDS)); [ $left -lt 25 ] && { echo "skipped fwd '$t': ${left}s left"; continue; }
  tag=fwd.${t:-default}; tag=${tag//=/}.$SECONDS
  MD_ACCEL_TP_TUNING=$t timeout $((left < 60 ? left : 60)) python benchmarks/kernels.py --impls md_accel --passes fwd \
    --workloads nequip_l3,sevennet_l3i5 --repeats 20 --reference-cache $PWD/.gpu/refcache --out $R/$tag > $R/$tag.log 2>&1
  echo "== fwd ${t:-default} (rc=$?)"
  awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +fwd / {printf "%s %s | ", c, $3} END {print ""}' $R/$tag.log
done
(cd $OUT && tar czf results.tar.gz r)
