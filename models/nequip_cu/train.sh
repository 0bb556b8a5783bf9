#!/usr/bin/env bash
# Train, test and package one of the NequIP copper models with nequip's own tools.
# usage: ./train.sh [l2|l1|l3] [extra hydra overrides...]    (default: l2)
# Writes nequip_cu_<variant>.ckpt and nequip_cu_<variant>.nequip.zip next to this script.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VARIANT="${1:-l2}"
shift || true
VENV="${NEQUIP_VENV:-$HERE/../../.venv-nequip}"
source "$VENV/bin/activate"
# one thread: on a shared 2-core machine torch's thread pool oversubscribes (~15x slower)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

export NEQUIP_CU_DATA="$HERE/data"
[ -f "$NEQUIP_CU_DATA/train.xyz" ] || python "$HERE/make_data.py" --out "$NEQUIP_CU_DATA"

RUN="$HERE/runs/$VARIANT"
rm -rf "$RUN"
nequip-train -cp "$HERE" -cn "nequip_cu_$VARIANT" "hydra.run.dir=$RUN" "$@"

cp "$RUN/best.ckpt" "$HERE/nequip_cu_$VARIANT.ckpt"
nequip-package build "$RUN/best.ckpt" "$HERE/nequip_cu_$VARIANT.nequip.zip"
ls -l "$HERE/nequip_cu_$VARIANT".*
