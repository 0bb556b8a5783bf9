#!/usr/bin/env bash
# Adds nequip and the pure-Python packages it needs beyond the GPU machine's torch/e3nn/numpy to a
# peers bundle made by ../shared/tools/gpu-peers.sh (which has no nequip): its setup-on-gpu.sh
# installs every wheel in DIR/wheels. Every version is the .venv's: nequip's is the one md_accel's NequIP
# converter and models/nequip_cu were made with.
# Usage: tools/nequip_wheels.sh .peers        (then carry .peers/wheels as usual)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: tools/nequip_wheels.sh PEERS_DIR}
PIP=${PIP:-.venv/bin/pip}
# each at the .venv's version (pip wheel --no-deps resolves no constraints: hydra-core 1.3 wants omegaconf < 2.4)
PINS=$(.venv/bin/python -c "
import importlib.metadata as m
names = ['nequip', 'hydra-core', 'omegaconf', 'antlr4-python3-runtime', 'lightning', 'lightning-utilities', 'torchmetrics']
print(' '.join(f'{n}=={m.version(n)}' for n in names))")
mkdir -p "$DIR/wheels"
# antlr4 4.9.3 (omegaconf's pin) is an sdist: build its wheel here, none is built there
# shellcheck disable=SC2086
"$PIP" wheel -q --no-deps -w "$DIR/wheels" $PINS 2>&1 | grep -v "^WARNING: Location" || true
ls "$DIR/wheels" | grep -iE "nequip|hydra|omegaconf|antlr|lightning|torchmetrics"
