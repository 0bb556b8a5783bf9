#!/usr/bin/env bash
# On the GPU machine: Nsight Compute counters (occupancy, issue rate, warp stall reasons, shared-memory
# bank conflicts, tensor pipe use) of the fused-radial kernels and the materialised-weight kernels they
# replace, first float32 launch of each, MACE-MP-0 medium convolution (benchmarks/fused_radial.py's graph).
# Usage: tools/profile_fused.sh OUT_DIR [CONFIG]   (env NCU_KERNELS: kernel-name regex, NCU_LAUNCHES: how many)
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1; cfg=${2:-mace_mp0_medium}; mkdir -p "$out"
m=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem
m=$m,launch__occupancy_limit_registers,launch__registers_per_thread,launch__grid_size,launch__block_size
m=$m,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes.sum
m=$m,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
m=$m,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_dmma.sum
for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected \
         lg_throttle dispatch_stall no_instruction branch_resolving membar tex_throttle misc; do
  m=$m,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
ncu --clock-control none -k "regex:${NCU_KERNELS:-fused_(fwd|bwd)|fwd_kernel|bwd_kernel}" --launch-count "${NCU_LAUNCHES:-4}" \
    --metrics "$m" python benchmarks/fused_radial.py "$out/fr" --configs "$cfg" --reps 1 \
    >"$out/ncu_$cfg.txt" 2>&1
grep -E "^  [a-zA-Z_]+.*\(|gpu__time|warps_active|occupancy_limit|registers_per|inst_executed|issue_active|dram__bytes|bank_conf|wavefronts|tensor_op|stalled" \
    "$out/ncu_$cfg.txt" | sed -E 's/smsp__average_warps_issue_stalled_(.*)_per_issue_active.ratio/stall_\1/' | awk '{$1=$1; print}'
