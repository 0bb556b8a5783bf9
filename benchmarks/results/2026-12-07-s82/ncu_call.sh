#!/usr/bin/env bash
# Session 82, call 2: ncu of mace_mp0_medium float64's double-backward part 1 (dbwd_kernel), default and
# sender_parts=4, with the L2 lookup misses of its reads and the DRAM bytes.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_s78wl.tar.xz .gpu/gpu_sp.tar.xz .gpu/s82 .peers/tab
set -u
export WHEELS=.peers/tab/wheels
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site
export NCU_METRICS=lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_sectors_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum
LIMIT=280 bash tools/gpu_ncu.sh p1def:mace_mp0_medium:float64:dbwd:dbwd_kernel
mv "$OUT/results.tar.gz" "$OUT/results_def.tar.gz"
MD_ACCEL_TP_TUNING=sender_parts=4 LIMIT=280 bash tools/gpu_ncu.sh p1k4:mace_mp0_medium:float64:dbwd:dbwd_kernel
