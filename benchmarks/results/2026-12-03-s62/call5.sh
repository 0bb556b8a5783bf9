#!/usr/bin/env bash
# Session 62, call 5 (a fresh machine; carry .gpu/gpu_lib.tar.xz, .gpu/gpu_k43.tar.xz as in call 3, and
# .peers/full/wheels): where the extra DRAM bytes of mace_mp0_medium float64's part-1 kernels go (reads against
# writes, and the L2's misses by operation), at the final GEN 43: ncu metrics of bwd_kernel_bd and dbwd_kernel_dd in
# the double-backward pass, and of mace_large float64's bulk-copy forward.
set -u
cd "$(dirname "$0")/../../.."
export WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,\
lts__t_sectors_srcunit_tex_op_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,\
lts__t_sectors_srcunit_tex_op_write_lookup_miss.sum,lts__t_sectors_srcunit_tex_op_atom.sum,gpu__time_duration.sum
for cell in bwd64:mace_mp0_medium:dbwd:bwd_kernel_bd dbwd64:mace_mp0_medium:dbwd:dbwd_kernel_dd \
            gx64:mace_mp0_medium:dbwd:gx_sum_kernel ml64:mace_large:fwd:fwd_kernel; do
  IFS=: read -r tag wl pass regex <<<"$cell"
  left=$((160 - SECONDS)); ((left < 25)) && { echo "skipped $tag: ${left}s left"; continue; }
  timeout $left "$NCU" --clock-control none --metrics "$metrics" -k "regex:$regex" --launch-count 1 \
    python benchmarks/conv_profile.py --workloads "$wl" --dtypes float64 --passes "$pass" \
    --graph random_sym:4000:312000 > "$R/ncu_$tag.txt" 2>&1
  echo "== $tag rc=$? (${SECONDS}s)"
  grep -E "dram__|lts__|gpu__time" "$R/ncu_$tag.txt" | sed -E 's/ +/ /g'
done
(cd "$OUT" && tar czf results.tar.gz r)
