#!/usr/bin/env bash
# The main job end to end: convert the SevenNet-0 checkpoint shipped in the sevenn wheel
# (verified against sevenn before it is written), then a short copper MD with md_accel's ASE
# calculator, printing the speed. Usage: tools/demo.sh [CELLS (box of CELLS^3 fcc cells)] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/env.sh main
mkdir -p .out
.venv/bin/md-accel convert sevennet-0 -o .out/sevennet-0.mdx
.venv/bin/python examples/ase_md_copper.py .out/sevennet-0.mdx --cells "${1:-3}" --steps "${2:-20}"
