#!/usr/bin/env bash
# Session 80, call 2 (after call_sp.sh of session 79 on the same machine, or a fresh one): the verification of HEAD's
# kernels and the count session 79 asked for before any pass-major forward is written.
# Carry .peers/tab, .gpu/gpu_s77gt.tar.xz (tests/gpu's configurations, GEN 48), .gpu/gpu_s78wl.tar.xz (the six
# workloads, GEN 48) and .gpu/gpu_lib.tar.xz where call 1 returned it.
# 1. tests/gpu/test_tp_conv_cuda.py, the whole file (the default kernels: GEN 48, 117cde3's);
# 2. ncu of the slot plans' forwards (sevennet_l3i5 float64 and float32, nequip_l3 float64) with their DRAM bytes and
#    L2 misses (ncu's "Command line profiler metrics"), to set against these cells' byte floors in kernels.py's earlier
#    tables (this call does not time them): how much of the 1.5-1.7x is gathered rows read from DRAM twice or more,
#    how much is issue.
set -u
cd "$(dirname "$0")/../../.."
source tools/gpu_call_start.sh || exit 3
timeout 220 python -m pytest tests/gpu/test_tp_conv_cuda.py -q -rs -p no:cacheprovider > "$R/gpu_tests.log" 2>&1
echo "tests rc=$? (${SECONDS}s)"; tail -n 3 "$R/gpu_tests.log"
smi_stop
NCU_METRICS=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum \
LIMIT=$((${END:-570} - SECONDS)) bash tools/gpu_ncu.sh l3i5_64:sevennet_l3i5:float64:fwd:fwd_kernel \
  nq64:nequip_l3:float64:fwd:fwd_kernel l3i5_32:sevennet_l3i5:float32:fwd:fwd_kernel  # packs $OUT/r
