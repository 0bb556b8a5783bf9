#!/usr/bin/env bash
# Benchmarks on the GPU machine: conv kernels (benchmarks/kernels.py), then whole-model MD steps
# (benchmarks/model_step.py), within one time budget; JSON, PNG and tables.md go to $OUT (or
# .out/bench). Peers come from .peers/ (tools: /work/shared/tools/gpu-peers.sh), installed by
# .peers/setup-on-gpu.sh into /tmp/peers-site. Whatever does not fit the budget is skipped and
# recorded as "budget"; a failing implementation is recorded with its reason.
#
# usage: tools/gpu_bench.sh [all|kernels|model]          (default all)
# env:   BENCH_BUDGET   total seconds (default 530; a run call may last 600)
#        KERNEL_SHARE   percent of the budget for kernels.py when both run (default 40)
#        KERNEL_ARGS    extra kernels.py arguments, e.g. "--workloads mace_mp0_medium --dtypes float32"
#        MODEL_ARGS     extra model_step.py arguments, e.g. "--mdx models/x.mdx --backends sevenn:cueq"
#        BENCH_SIZES    model sizes (default 864,4000,16384,32000)
#        REPEATS        timed repeats per measurement (default 20)
# NequIP rows only (nequip 0.19.1 + hydra-core/omegaconf/antlr4 wheels come from .peers/wheels;
# the model file is models/nequip_cu/nequip_cu_l3.ckpt unless --nequip-model says otherwise):
#   MODEL_ARGS="--backends md_accel:nequip,nequip:oeq,nequip:cueq,nequip:e3nn" tools/gpu_bench.sh model
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
t_start=$(date +%s)
budget=${BENCH_BUDGET:-530}
out=${OUT:-$PWD/.out/bench}
mkdir -p "$out"
PY=${PYTHON:-python3}
left() { echo $((budget - ($(date +%s) - t_start))); }

if [[ -f .peers/setup-on-gpu.sh ]]; then
  t=$(date +%s)
  # shellcheck disable=SC1091
  source .peers/setup-on-gpu.sh
  echo "[gpu_bench] peers installed into ${PEERS_SITE:-/tmp/peers-site} in $(($(date +%s) - t)) s"
else
  echo "[gpu_bench] no .peers/ (carry it to benchmark the peers); md_accel and what is installed only"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONUNBUFFERED=1
# same build directory and flags as tools/gpu_check.sh, so a warm machine reuses its build
export MD_ACCEL_BUILD_DIR=${MD_ACCEL_BUILD_DIR:-$PWD/.gpu/build}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-$(nproc)}
mkdir -p "$MD_ACCEL_BUILD_DIR"

# preflight: what imports, and md_accel's CUDA library (built JIT on first import, timed here)
"$PY" - <<'PY' 2>&1 | tee "$out/preflight.txt"
import importlib, time, torch
print(f"[preflight] torch {torch.__version__} cuda {torch.version.cuda} "
      f"device {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")
for m in ("e3nn", "cuequivariance_torch", "cuequivariance_ops_torch", "openequivariance", "sevenn",
          "torch_geometric", "mace", "mace.tools.cg", "mace.cli.convert_e3nn_cueq", "vesin", "matplotlib",
          "nequip", "hydra"):
    t = time.time()
    try:
        mod = importlib.import_module(m)
        print(f"[preflight] {m:26s} ok {getattr(mod, '__version__', '')} ({time.time() - t:.1f} s)")
    except Exception as e:
        print(f"[preflight] {m:26s} FAILED {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
t = time.time()
try:
    import md_accel.ops
    from md_accel.ops import _cuda
    print(f"[preflight] md_accel.ops imported in {time.time() - t:.1f} s; CUDA library: "
          f"{_cuda.library_path() or 'NOT LOADED: ' + str(_cuda.load_error())}")
except Exception as e:
    print(f"[preflight] md_accel.ops FAILED {type(e).__name__}: {e}")
PY

status=0
if [[ $part == all || $part == kernels ]]; then
  if [[ $part == all ]]; then kb=$(($(left) * ${KERNEL_SHARE:-40} / 100)); else kb=$(($(left) - 10)); fi
  echo "[gpu_bench] kernels.py, budget ${kb} s"
  # shellcheck disable=SC2086
  timeout $((kb + 30)) "$PY" benchmarks/kernels.py --budget "$kb" --repeats "${REPEATS:-20}" --out "$out" \
    ${KERNEL_ARGS:-} || { echo "[gpu_bench] kernels.py exited with $?"; status=1; }
fi
if [[ $part == all || $part == model ]]; then
  mb=$(($(left) - 10))
  if ((mb > 20)); then
    echo "[gpu_bench] model_step.py, budget ${mb} s"
    # shellcheck disable=SC2086
    timeout $((mb + 20)) "$PY" benchmarks/model_step.py --budget "$mb" --repeats "${REPEATS:-20}" \
      --sizes "${BENCH_SIZES:-864,4000,16384,32000}" --out "$out" ${MODEL_ARGS:-} \
      || { echo "[gpu_bench] model_step.py exited with $?"; status=1; }
  else
    echo "[gpu_bench] no time left for model_step.py"
  fi
fi
echo
echo "================ results ($(($(date +%s) - t_start)) s) ================"
[[ -f $out/tables.md ]] && cat "$out/tables.md"
exit $status
