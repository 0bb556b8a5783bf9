#!/usr/bin/env bash
# Builds the bundle the GPU model tests need (tests/gpu/test_model_cuda.py, test_cuda_graph.py, the fused SevenNet
# model test: every model family against its source library) small enough to carry beside the working tree:
# - the small wheels of a peers bundle made by ../shared/tools/gpu-peers.sh (ase, vesin, vesin-torch, mace-torch,
#   matscipy, ...; not cuEquivariance, which these tests do not run);
# - sevenn from that bundle, with the SevenNet-0 (11Jul2024) and SevenNet-l3i5 checkpoints of this machine's .venv
#   with their optimizer state dropped (model weights and config unchanged: 3.5 and 4.9 MB instead of 9.8 and 14);
# - nequip and the packages it needs beyond the GPU machine's image (tools/nequip_wheels.sh).
# Usage: tools/gpu_model_peers.sh PEERS_DIR OUT_DIR   (then carry OUT_DIR; on the GPU: source OUT_DIR/setup-on-gpu.sh)
# Its bundle (19 MiB) ran the model tests in session 32: 49 passed, 0 skipped (H200).
set -euo pipefail
cd "$(dirname "$0")/.."
peers=${1:?usage: tools/gpu_model_peers.sh PEERS_DIR OUT_DIR} out=${2:?usage: tools/gpu_model_peers.sh PEERS_DIR OUT_DIR}
mkdir -p "$out/wheels"; out=$(cd "$out" && pwd)
find "$peers/wheels" -name "*.whl" ! -name "cuequivariance*" -exec cp {} "$out/wheels/" \;
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar xJf "$peers/peers.tar.xz" -C "$work" --wildcards ./sevenn "./sevenn-*.dist-info"
.venv/bin/python tools/strip_sevenn_checkpoints.py "$work/sevenn/pretrained_potentials"
(cd "$work" && tar cf - sevenn sevenn-*.dist-info | xz -T2 -6 > "$out/peers.tar.xz")
tools/nequip_wheels.sh "$out" >/dev/null
cp "$peers/setup-on-gpu.sh" "$out/"
du -sh "$out"
