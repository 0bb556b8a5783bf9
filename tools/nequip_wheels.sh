#!/usr/bin/env bash
# Adds nequip and the pure-Python packages it needs beyond the GPU machine's torch/e3nn/numpy to a
# peers bundle made by ../shared/tools/gpu-peers.sh (which has no nequip): its setup-on-gpu.sh
# installs every wheel in DIR/wheels. nequip's version is the one md_accel's NequIP converter and
# models/nequip_cu were made with (the .venv's).
# Usage: tools/nequip_wheels.sh .peers        (then carry .peers/wheels as usual)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: tools/nequip_wheels.sh PEERS_DIR}
PIP=${PIP:-.venv/bin/pip}
VERSION=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('nequip'))")
mkdir -p "$DIR/wheels"
# antlr4 4.9.3 (omegaconf's pin) is an sdist: build its wheel here, none is built there
"$PIP" wheel -q --no-deps -w "$DIR/wheels" "nequip==$VERSION" hydra-core omegaconf "antlr4-python3-runtime==4.9.3" \
  lightning lightning-utilities torchmetrics 2>&1 | grep -v "^WARNING: Location" || true
ls "$DIR/wheels" | grep -iE "nequip|hydra|omegaconf|antlr|lightning|torchmetrics"
