#!/usr/bin/env bash
# The test suite: sets up the environments (tools/env.sh) and runs pytest in each.
# CPU-only machines run everything except tests/gpu (skipped without CUDA).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/env.sh all || exit 1
status=0
run() {  # run VENV PYTEST-ARGS...
  local venv=$1; shift
  "$venv/bin/python" -m pytest -q "$@"
  local rc=$?
  [[ $rc == 0 || $rc == 5 ]] || status=1   # 5: nothing collected
}
export MD_ACCEL_LAMMPS_PLUGIN_DIR=$(.venv/bin/python -c "import md_accel.lammps as l; print(l.plugin_dir())")
run .venv tests --ignore=tests/mace
if [[ -d tests/mace ]]; then
  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 run .venv-mace tests/mace
fi
exit $status
