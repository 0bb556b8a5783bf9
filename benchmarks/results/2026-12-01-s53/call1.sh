#!/usr/bin/env bash
# Session 53, call 1: where the GEN 34 forward stalls (ncu: speed of light, occupancy, warp states, memory, the
# source counters' top stall lines) on the cells furthest from / nearest to the byte floor, and the forward
# kernels' SASS opcode counts (cuobjdump). Graph random_sym:4000:312000, as the kernel table.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen34.tar.xz
set -u
cd "$(dirname "$0")/../../.."
source tools/gpu_call_env.sh 2> /dev/null
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
echo "ncu: $NCU  cuobjdump: $CUOBJ"
declare -A H=([mace_mp0_medium]=fcd07242251a3b3b403b [sevennet_l3i5]=030273bf83a5f8aa6a9d [mace_large]=18c0bb51761e0b583ffd
              [mace_first]=893b232a578667c9d390 [sevennet_0]=22a082e00e54d610c21b [nequip_l3]=36f39f8c80f2edaff6f2)
for wl in "${!H[@]}"; do
  so=.gpu/build/tp_specs/${H[$wl]}-sm_90-v34.so
  $CUOBJ -sass "$so" > $R/sass_$wl.txt 2>&1 || echo "cuobjdump failed on $wl"
done
echo "sass done (${SECONDS}s)"
prof() {  # tag workload dtype
  local left=$((560 - SECONDS)); [ $left -lt 30 ] && { echo "skipped $1"; return; }
  timeout $left $NCU --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters --section InstructionStats \
    -k "regex:fwd_kernel" --launch-count 1 python benchmarks/conv_profile.py --workloads $2 --dtypes $3 --passes fwd \
    --graph random_sym:4000:312000 > $R/ncu_$1.txt 2>&1
  echo "== $1 rc=$? (${SECONDS}s)"
  grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Executed Ipc A" $R/ncu_$1.txt \
    | sed -E 's/ +/ /g' | head -12
}
prof medium_f32 mace_mp0_medium float32
prof medium_f64 mace_mp0_medium float64
prof first_f32 mace_first float32
prof s0_f32 sevennet_0 float32
prof large_f32 mace_large float32
prof nequip_f32 nequip_l3 float32
true
