#!/usr/bin/env bash
# Makes, here (nvcc, no GPU; ~10 minutes on two cores), the generated-kernel packs next_call.sh carries:
#   .gpu/gpu_s74gt.tar.xz   tests/gpu's tensor-product configurations at the tree's GEN (48)
#   .gpu/gpu_s74all.tar.xz  the six kernels.py workloads at the tree's GEN
#   .gpu/gpu_ab3.tar.xz     under the tree's file names: old/ GEN 46's six (built at 3aaa9e0), gen47/ GEN 47's
#                           mace_mp0_medium (4bb9fb8), h1/ GEN 47 with ab_dbwd.diff's AB_DBWD=h1 (mace_mp0_medium)
# Usage, from the repository root after tools/env.sh main: bash benchmarks/results/2026-12-06-s73/make_packs.sh
set -euo pipefail
root=$PWD py=$PWD/.venv/bin/python
gen=$("$py" -c "from md_accel.ops._codegen import GEN_VERSION; print(GEN_VERSION)")
prebuild() { MD_ACCEL_NO_BUILD=1 "$py" tools/prebuild_gpu_kernels.py --tuning default --jobs 2 "$@"; }
prebuild tp-gpu-tests --name s74gt
prebuild tp-tests --name s74all
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/w46" 2>/dev/null; git -C "$root" worktree remove --force "$work/w47" 2>/dev/null; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/w46" 3aaa9e0
git worktree add -q --detach "$work/w47" 4bb9fb8
git -C "$work/w47" apply "$root/benchmarks/results/2026-12-06-s73/ab_dbwd.diff"
# other generations' libraries: built in their worktree, renamed to this tree's GEN under $work/pack/<folder>
build_old() {  # build_old FOLDER WORKTREE [tp-tests arguments]; env AB_DBWD passes through
  local folder=$1 tree=$2; shift 2
  (cd "$tree" && PYTHONPATH=$tree MD_ACCEL_BUILD_DIR=$work/b_$folder MD_ACCEL_NO_BUILD=1 "$py" \
     tools/prebuild_gpu_kernels.py tp-tests --tuning default --jobs 2 "$@" > "$work/$folder.log" 2>&1 || true)
  mkdir -p "$work/pack/$folder/tp_specs"
  for f in "$work/b_$folder"/tp_specs/*.so; do
    cp "$f" "$work/pack/$folder/tp_specs/$(basename "$f" | sed "s/-v[0-9]*\.so$/-v$gen.so/")"
  done
}
build_old old "$work/w46"
AB_DBWD= build_old gen47 "$work/w47" --workloads mace_mp0_medium
AB_DBWD=h1 build_old h1 "$work/w47" --workloads mace_mp0_medium
(cd "$work/pack" && tar -I "xz -T2" -cf "$root/.gpu/gpu_ab3.tar.xz" old gen47 h1)
ls -la .gpu/gpu_s74gt.tar.xz .gpu/gpu_s74all.tar.xz .gpu/gpu_ab3.tar.xz
