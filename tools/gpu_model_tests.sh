#!/usr/bin/env bash
# On the GPU machine: the GPU model tests with every source library (tests/gpu/test_model_cuda.py,
# test_cuda_graph.py and the fused-radial SevenNet model test) using the bundle of tools/gpu_model_peers.sh
# (.peers/models: sevenn with both checkpoints, nequip, mace-torch, ase, vesin); the model specs compile on the
# device unless carried (.gpu/gpu_prebuilt.tar.xz, tools/gpu_prepare.sh). Results under $OUT/r.
# Carry: .peers/models [.gpu/gpu_lib.tar.xz] [a pack of the MACE models' kernels, whose symmetric contractions take
# minutes of nvcc each: session 43 carried .peers/models, gpu_lib and mace_small + the copper MACE (6 MiB), within the
# carry limit; the SevenNet and NequIP kernels compile there in seconds]     Usage (device): bash tools/gpu_model_tests.sh
set -u
cd "$(dirname "$0")/.."
mkdir -p "$OUT/r"
source .peers/models/setup-on-gpu.sh > "$OUT/r/peers.log" 2>&1
export PYTHON=python GPU_FUSED=1 GPU_TEST_LIMIT=${GPU_TEST_LIMIT:-520} \
  GPU_TESTS=${GPU_TESTS:-"tests/gpu/test_model_cuda.py tests/gpu/test_cuda_graph.py tests/gpu/test_tp_conv_fused_cuda.py::test_sevennet_model_fused_equals_unfused"}
bash tools/gpu_check.sh > "$OUT/r/gpu_check.log" 2>&1
grep -A4 -- "--- summary ---" "$OUT/r/gpu_check.log"; grep -E "FAILED|ERROR|SKIPPED" "$OUT/r/gpu_check.log" | head -30
(cd "$OUT" && tar czf results.tar.gz r)
