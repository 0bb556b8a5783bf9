#!/usr/bin/env bash
# The test suite: sets up the environments (tools/env.sh) and runs pytest in each.
# CPU-only machines run everything except tests/gpu (skipped without CUDA).
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/env.sh all || exit 1
status=0
# The main suite on TEST_WORKERS pytest-xdist workers (default 2: CI's cores), a test file to a worker (its
# module fixtures, e.g. an emulated kernel library, are built once); 0 runs it in this process. --durations: the
# slow tests, in CI's log.
workers=${TEST_WORKERS:-2}
run() {  # run VENV PYTEST-ARGS...
  local venv=$1; shift
  "$venv/bin/python" -m pytest -q --durations=15 "$@"
  local rc=$?
  [[ $rc == 0 || $rc == 5 ]] || status=1   # 5: nothing collected
}
export MD_ACCEL_LAMMPS_PLUGIN_DIR=$(.venv/bin/python -c "import md_accel.lammps as l; print(l.plugin_dir())")
if [[ $workers == 0 ]]; then
  run .venv tests --ignore=tests/mace
else
  run .venv -n "$workers" --dist loadfile tests --ignore=tests/mace
fi
if [[ -d tests/mace ]]; then
  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 run .venv-mace tests/mace
fi
exit $status
