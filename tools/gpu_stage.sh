#!/usr/bin/env bash
# The first device call of a session (a fresh machine): unpacks the peers bundle (.peers/full, tools/gpu_prepare.sh)
# into the git-ignored .gpu/site and JIT-builds the op library from this csrc (~2 minutes) into .gpu/build and
# .gpu/prebuilt. Both stay on the warm machine for the next calls, launched within its idle time (PYTHONPATH=.gpu/site,
# TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1); $OUT/gpu_lib.tar.xz comes back for later machines.
# Carry: .peers/full        Usage (device): bash tools/gpu_stage.sh
set -u
cd "$(dirname "$0")/.."
mkdir -p "$OUT/r"
PEERS_SITE=$PWD/.gpu/site source .peers/full/setup-on-gpu.sh > "$OUT/r/stage.log" 2>&1
python -c "import sevenn, cuequivariance_torch, mace, ase, vesin; print('staged: sevenn', sevenn.__version__, 'mace', mace.__version__)" 2>&1 | tail -1
GPU_TESTS=none bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1; echo "gpu_check rc=$?"
tail -3 "$OUT/r/build.log"
