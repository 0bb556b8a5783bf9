#!/usr/bin/env bash
# Session 32, call A (fresh machine): unpack the peers bundle (.peers/full: mace-torch, sevenn 0.13 without
# checkpoints, cuEquivariance 0.13 with its ops, OpenEquivariance 0.7, ase, vesin) into the git-ignored .gpu/site,
# and JIT-build the op library from this csrc (the session-28 build cache did not survive the new checkout) into
# .gpu/build + .gpu/prebuilt; both stay on the warm machine for the next calls, and gpu_lib.tar.xz comes back.
# Carry: .peers/full .gpu/s32
set -u
cd "$(dirname "$0")/../.."
mkdir -p $OUT/r
PEERS_SITE=$PWD/.gpu/site source .peers/full/setup-on-gpu.sh > $OUT/r/stage.log 2>&1
python -c "import sevenn, cuequivariance_torch, mace, ase, vesin; print('staged: sevenn', sevenn.__version__, 'mace', mace.__version__)" 2>&1 | tail -2
du -sh .gpu/site
GPU_TESTS=none bash tools/gpu_check.sh > $OUT/r/build.log 2>&1; echo "gpu_check rc=$?"
tail -4 $OUT/r/build.log
ls -la .gpu/prebuilt $OUT
