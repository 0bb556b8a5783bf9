#!/usr/bin/env bash
# Session 31, call A of two: unpack the peers bundle (.peers/full: sevenn 0.13 without checkpoints, cuEquivariance
# 0.13 with its ops, ase, vesin) into the git-ignored .gpu/site, which the next call on the same warm machine finds
# (the bundle and the next call's carry do not fit one call together). Carry: .peers/full .gpu/s31
set -u
cd "$(dirname "$0")/../.."
PEERS_SITE=$PWD/.gpu/site source .peers/full/setup-on-gpu.sh
python -c "import sevenn, cuequivariance_torch, ase, vesin; print('staged: sevenn', sevenn.__version__)"
du -sh .gpu/site
