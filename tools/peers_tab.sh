#!/usr/bin/env bash
# A lean peers bundle for kernel-table calls, made here from the full one (gpu-peers.sh OUT --keep ""): the
# cuEquivariance ops and the wheels that cuEquivariance and `from mace.tools.cg import O3_e3nn` (its e3nn basis,
# as mace-torch runs it) need; no sevenn, OpenEquivariance, ase or vesin. With the tree (~30 MB) and
# .gpu/gpu_lib.tar.xz it leaves room in a call's 64 MiB carry that the full bundle does not (session 41).
# Usage: bash tools/peers_tab.sh [.peers/full] [.peers/tab]; on the GPU machine, carry the output and
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
set -euo pipefail
src=${1:-.peers/full} out=${2:-.peers/tab}
[[ -f $src/peers.tar.xz && -d $src/wheels ]] || { echo "no full bundle in $src (gpu-peers.sh $src --keep \"\")" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xJf "$src/peers.tar.xz" -C "$work"
rm -rf "$work"/sevenn* "$work"/openequivariance* "$work"/include "$work"/lib64
rm -rf "$out"
mkdir -p "$out/wheels"
cp "$src/setup-on-gpu.sh" "$out/"
for w in cuequivariance-0 cuequivariance_torch- platformdirs- mace_torch- torch_ema-; do
  cp "$src"/wheels/"$w"*.whl "$out/wheels/"
done
(cd "$work" && tar -I "xz -9 -T2" -cf - .) > "$out/peers.tar.xz"
echo "$out: $(du -sb "$out" | cut -f1) bytes ($(ls "$out/wheels" | wc -l) wheels)"
