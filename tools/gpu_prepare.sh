#!/usr/bin/env bash
# Makes here (no GPU) everything a device session carries that git does not keep; a new checkout has none of it.
# Each step is skipped when its output exists. Needs .venv and .venv-mace (tools/env.sh all) and network access.
#   .peers/full             mace-torch, sevenn (no checkpoints), cuEquivariance + ops, OpenEquivariance, ase, vesin
#                           (../shared/tools/gpu-peers.sh; 35 MiB): the peers of the step benchmarks
#   .peers/models           the GPU model tests' bundle (tools/gpu_model_peers.sh; 19 MiB)
#   .gpu/sn_ckpt            SevenNet-0 and SevenNet-l3i5 checkpoints without optimizer state (8 MiB)
#   .gpu/gpu_prebuilt.tar.xz  the generated kernels of SevenNet-0, SevenNet-l3i5, the MACE shapes (both dtypes) and the
#                           conv workloads of benchmarks/kernels.py (tools/gpu_ncu.sh, tuning sweeps),
#                           compiled with nvcc for sm_90 (tools/prebuild_gpu_kernels.py; MACE's symmetric
#                           contractions take minutes of nvcc each; ~15 MiB)
# The op library needs the GPU machine's torch: tools/gpu_stage.sh builds it there in the first call, and with it the
# tensor-product kernels of the benchmarks and GPU tests (STAGE_KERNELS; faster there than here on 2 cores).
# Usage: tools/gpu_prepare.sh            (about 10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d .peers/full ]] || bash ../shared/tools/gpu-peers.sh .peers/full --keep ""
[[ -d .peers/models ]] || bash tools/gpu_model_peers.sh .peers/full .peers/models
[[ -d .gpu/sn_ckpt ]] || .venv/bin/python tools/strip_sevenn_checkpoints.py .gpu/sn_ckpt
if [[ ! -f .gpu/gpu_prebuilt.tar.xz ]]; then  # the second run packs both runs' libraries (and any older ones)
  .venv/bin/python tools/prebuild_gpu_kernels.py sevenn tp-tests
  .venv-mace/bin/python tools/prebuild_gpu_kernels.py mace --pack all
fi
du -sh .peers/full .peers/models .gpu/sn_ckpt .gpu/gpu_prebuilt.tar.xz
