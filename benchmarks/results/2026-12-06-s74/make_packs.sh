#!/usr/bin/env bash
# Makes, here (nvcc, no GPU), the generated-kernel packs next_call.sh carries:
#   .gpu/gpu_s75all.tar.xz  the six kernels.py workloads at the tree's GEN (48)
#   .gpu/gpu_ab4.tar.xz     b1/: mace_mp0_medium and mace_large with ab_bwd.diff's AB_BWD=b1 (the backward's part 1
#                           with each path's scaled grad_y terms and weight gradient summed apart, then added), built
#                           from the tree with that diff applied, under the tree's file names
# Usage, from the repository root after tools/env.sh main: bash benchmarks/results/2026-12-06-s74/make_packs.sh
set -euo pipefail
root=$PWD py=$PWD/.venv/bin/python here=benchmarks/results/2026-12-06-s74
MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py tp-tests --tuning default --jobs 2 --name s75all
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/w" 2>/dev/null; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/w" HEAD
git -C "$work/w" apply "$root/$here/ab_bwd.diff"
(cd "$work/w" && AB_BWD=b1 PYTHONPATH=$work/w MD_ACCEL_BUILD_DIR=$work/b1 MD_ACCEL_NO_BUILD=1 "$py" \
   tools/prebuild_gpu_kernels.py tp-tests --tuning default --jobs 2 --workloads mace_mp0_medium,mace_large \
   > "$work/b1.log" 2>&1 || true)  # it builds, then declines to pack libraries outside .gpu: packed below
tail -n 4 "$work/b1.log"
mkdir -p "$work/pack/b1/tp_specs"
cp "$work"/b1/tp_specs/*.so "$work/pack/b1/tp_specs/"
(cd "$work/pack" && tar -I "xz -T2" -cf "$root/.gpu/gpu_ab4.tar.xz" b1)
ls -la .gpu/gpu_s75all.tar.xz .gpu/gpu_ab4.tar.xz
