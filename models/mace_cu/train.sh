#!/usr/bin/env bash
# Train the small Cu MACE model with mace-torch's own trainer (CPU, float64, ~10 CPU-minutes).
# Usage: bash train.sh [WORK_DIR]   (default: a new temp dir; needs mace-torch 0.3.16's
# mace_run_train on PATH, e.g. source .venv-mace/bin/activate)
# Writes WORK_DIR/mace_cu.model and copies it next to this script as mace_cu.model.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
python "$here/make_data.py" --out "$work/data" --seed 0
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
cd "$work"
mace_run_train \
    --name mace_cu --seed 0 --device cpu --default_dtype float64 \
    --train_file data/train.xyz --valid_file data/valid.xyz \
    --energy_key REF_energy --forces_key REF_forces --stress_key REF_stress \
    --model ScaleShiftMACE --interaction_first RealAgnosticResidualInteractionBlock \
    --interaction RealAgnosticResidualInteractionBlock \
    --num_channels 16 --max_L 1 --max_ell 2 --correlation 3 --num_interactions 2 \
    --r_max 4.5 --num_radial_basis 8 --num_cutoff_basis 5 --radial_MLP '[32, 32]' \
    --MLP_irreps 16x0e --scaling rms_forces_scaling \
    --loss stress --energy_weight 1 --forces_weight 100 --stress_weight 10 \
    --batch_size 2 --valid_batch_size 10 --lr 0.01 --max_num_epochs 16 \
    --ema --ema_decay 0.99 --eval_interval 2 --error_table PerAtomRMSEstressvirials \
    --compute_stress True --save_cpu
cp "$work/mace_cu.model" "$here/mace_cu.model"
