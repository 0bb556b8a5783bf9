#!/usr/bin/env bash
# Session 61, call 2 (the machine of call 1; carry .peers/models, the model tests' bundle of tools/gpu_model_peers.sh:
# ase, vesin, sevenn with its checkpoints, nequip, mace-torch): the whole tests/gpu at GEN 42.
set -u
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/c"
source .peers/models/setup-on-gpu.sh > "$OUT/c/stage.log" 2>&1
echo "models bundle staged (${SECONDS}s)"
GPU_TESTS=tests/gpu GPU_TEST_LIMIT=$((570 - SECONDS)) bash tools/gpu_check.sh > "$OUT/c/check_all.log" 2>&1
echo "gpu_check (tests/gpu) rc=$? (${SECONDS}s)"
grep -E "^(FAILED|ERROR)|^E  |passed|failed|^build|SKIPPED" "$OUT/c/check_all.log" | cut -c1-220 | tail -30
