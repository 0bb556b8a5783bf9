# Sourced by a device call's script, from the repository root, before it runs benchmarks: the carried build caches
# (tools/gpu_cache.sh, with the generated kernels under .gpu/build), the results folder R=$OUT/r, a line naming the
# op library and the GPU, and ase + vesin from the carried wheels folder WHEELS (default .peers/k/wheels) on
# PYTHONPATH (the device's Python lacks them). SMI_LOG=MS also logs the GPU's clocks (below).
export PYTHON=${PYTHON:-python} MD_ACCEL_BUILD_DIR=$PWD/.gpu/build
export R=$OUT/r
mkdir -p "$R"
source tools/gpu_cache.sh >/dev/null
echo "lib: ${MD_ACCEL_OPS_LIBRARY:-none (JIT build)}"
# Without a prebuilt op library every benchmark run would first compile it (~150 s, inside its time limit): stop,
# unless ALLOW_JIT=1. A staged machine (tools/gpu_stage.sh) has one; a fresh one needs .gpu/gpu_lib.tar.xz carried,
# built from this very csrc/ (the stage call returns it).
if [[ -z ${MD_ACCEL_OPS_LIBRARY:-} && ${ALLOW_JIT:-0} != 1 ]]; then
  echo "no op library for this csrc/ and torch: carry .gpu/gpu_lib.tar.xz or stage first (ALLOW_JIT=1 to build)" >&2
  exit 3
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# SMI_LOG=MS: the GPU's clocks, power, temperature and clock-event reasons every MS milliseconds into $R/smi.csv
# (nvidia-smi's errors into $R/smi.err) until `smi_stop`, which a call script runs before it packs $R
# (benchmarks/smi_join.py matches the log with kernels.py's cells); at the shell's exit too, unless the caller has an
# EXIT trap of its own. The logger is disowned, so that a bare `wait` in the call script (for its own background
# builds) does not wait for it until the call's time limit (session 55 lost two calls so).
smi_stop() {
  [[ -n ${SMI_PID:-} ]] || return 0
  kill "$SMI_PID" 2>/dev/null
  while kill -0 "$SMI_PID" 2>/dev/null; do sleep 0.05; done
  SMI_PID=
}
if [[ -n ${SMI_LOG:-} ]]; then
  # power.draw is the mean of the last second on Ampere and newer; power.draw.instant (newer drivers) where queried
  instant=,power.draw.instant
  nvidia-smi --query-gpu=power.draw.instant --format=csv,noheader > /dev/null 2>&1 || instant=
  query=timestamp,clocks.sm,clocks.mem,power.draw$instant,temperature.gpu,clocks_event_reasons.active
  nvidia-smi --query-gpu=$query --format=csv,nounits -lms "$SMI_LOG" > "$R/smi.csv" 2> "$R/smi.err" &
  SMI_PID=$!
  disown "$SMI_PID"
  if [[ -z $(trap -p EXIT) ]]; then trap smi_stop EXIT; fi
fi
wheels=${WHEELS:-.peers/k/wheels}
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$wheels"/ase-*.whl "$wheels"/vesin-*.whl
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
