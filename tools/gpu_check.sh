#!/usr/bin/env bash
# On the GPU machine (repo copied there, no install): JIT-build md_accel's CUDA library into
# .gpu/build, run the GPU tests, then each benchmark script given as an argument.
# Usage: tools/gpu_check.sh ["benchmarks/kernels.py --args" ...]   (env GPU_TESTS: test paths, or none;
#        GPU_TEST_LIMIT: seconds for the tests; GPU_FUSED=1 also tests the opt-in fused-radial kernels, minutes of nvcc on a fresh machine)
# Build cache across fresh machines: with $OUT set, the built op library and the generated kernel
# libraries are packed into $OUT/gpu_lib.tar.xz and (GPU_PACK_SPECS=1) $OUT/gpu_specs.tar.xz (each
# file that comes back must stay under 16 MiB; tools/prebuild_gpu_kernels.py builds specs here);
# carried .gpu/gpu_*.tar.xz
# are unpacked first, and the library is used when it was built from this very source tree and
# torch (else: JIT build). GPU_PACK_OUT=1: at the end, every other file under $OUT goes into
# $OUT/results.tar.gz (the device tool returns only a handful of files per call).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export MD_ACCEL_BUILD_DIR="$ROOT/.gpu/build"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
PYTHON=${PYTHON:-python}
LOGS=${OUT:+$OUT/logs}  # under $OUT when set (the device tool brings $OUT back, even after a timeout)
LOGS=${LOGS:-$ROOT/.gpu/logs}
mkdir -p "$MD_ACCEL_BUILD_DIR" "$LOGS"
summary=()

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# shellcheck source=tools/gpu_cache.sh
source tools/gpu_cache.sh

t0=$SECONDS
if "$PYTHON" - <<'PY' 2>&1 | tee "$LOGS/build.log"; then
import sys
from md_accel.ops import _cuda
ok = _cuda.load(verbose=True)
print("library:", _cuda.library_path() if ok else _cuda.load_error())
sys.exit(0 if ok else 1)
PY
  summary+=("build: ok ($((SECONDS - t0)) s)")
else
  summary+=("build: FAILED ($((SECONDS - t0)) s), see $LOGS/build.log")
  printf '%s\n' "--- summary ---" "${summary[@]}"
  exit 1
fi

# the GPU tests and benchmarks import ase, vesin and vesin_torch (absent on the GPU machine): carried wheels
# (.peers/*/wheels, from gpu-peers.sh) are installed into a scratch site when they are missing
if ! "$PYTHON" -c "import ase, vesin, vesin_torch" 2>/dev/null; then
  wheels=$(find .peers -name 'ase-*.whl' -o -name 'vesin-[0-9]*.whl' -o -name 'vesin_torch-[0-9]*.whl' 2>/dev/null \
    | sort -u)
  if [[ -n $wheels ]]; then
    # shellcheck disable=SC2086
    "$PYTHON" -m pip install -q --no-index --no-deps --target /tmp/gpu-check-site $wheels \
      && export PYTHONPATH="$PYTHONPATH:/tmp/gpu-check-site" && echo "installed: $(basename -a $wheels | tr '\n' ' ')"
  else
    echo "warning: ase / vesin not importable and no carried wheels (.peers/*/wheels): tests needing them fail"
  fi
fi

rc=0
if [[ ${GPU_TESTS:-} != none ]]; then  # GPU_TESTS=none: benchmarks only
  [[ ${GPU_FUSED:-0} == 1 ]] || export MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1
  t0=$SECONDS
  # GPU_TEST_LIMIT (s): stop the tests in time for the benchmarks and the build cache to follow
  timeout "${GPU_TEST_LIMIT:-0}" "$PYTHON" -m pytest ${GPU_TESTS:-tests/gpu} --maxfail=20 -v -rs --durations=15 \
    2>&1 | tee "$LOGS/pytest.log"
  rc=${PIPESTATUS[0]}
  summary+=("pytest tests/gpu: rc=$rc ($((SECONDS - t0)) s): $(tail -1 "$LOGS/pytest.log")")
fi

i=0
for bench in "$@"; do  # each argument: a script and its arguments, e.g. "benchmarks/x.py --out DIR"
  t0=$SECONDS
  i=$((i + 1))
  read -ra words <<<"$bench"
  log="$LOGS/$i-$(basename "${words[0]}" .py).log"
  "$PYTHON" "${words[@]}" 2>&1 | tee "$log"
  summary+=("$bench: rc=${PIPESTATUS[0]} ($((SECONDS - t0)) s), log $log")
done

if [[ -n ${OUT:-} ]]; then  # the build cache, for the next fresh machine
  mkdir -p .gpu/prebuilt
  [[ -f $MD_ACCEL_BUILD_DIR/$TAG/md_accel_ops.so ]] && cp "$MD_ACCEL_BUILD_DIR/$TAG/md_accel_ops.so" ".gpu/prebuilt/$TAG.so"
  (cd .gpu && tar cJf "$OUT/gpu_lib.tar.xz" "prebuilt/$TAG.so" \
     && if [[ ${GPU_PACK_SPECS:-0} == 1 ]]; then tar cJf "$OUT/gpu_specs.tar.xz" build/*_specs; fi) \
    && summary+=("build cache: $(du -ch "$OUT"/gpu_*.tar.xz | tail -1 | cut -f1) in \$OUT/gpu_{lib,specs}.tar.xz")
fi

printf '%s\n' "--- summary ---" "${summary[@]}" | tee "$LOGS/summary.txt"
if [[ -n ${OUT:-} && ${GPU_PACK_OUT:-0} == 1 ]]; then
  # the device tool brings back only a few files per call: everything else under $OUT as one archive
  (cd "$OUT" && find . -type f ! -name 'gpu_*.tar.xz' ! -name results.tar.gz -print0 \
     | tar czf results.tar.gz --null -T - --remove-files) && echo "packed \$OUT into \$OUT/results.tar.gz"
fi
exit $rc
