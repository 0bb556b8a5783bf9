#!/usr/bin/env bash
# On the GPU machine: md_accel's conv kernels under code-generation variants (MD_ACCEL_TP_TUNING, see
# md_accel/ops/_codegen.py), one benchmarks/kernels.py run per variant through tools/gpu_check.sh on
# the same graph, one after another, then a side-by-side table (benchmarks/tuning_table.py; a variant
# whose results leave the tolerance on the check subgraph is marked WRONG). ase and vesin come from a
# peers bundle.
# Usage: tools/gpu_tuning.sh PEERS_DIR OUTDIR "" "prefetch=15" "merge_in1=0,bwd_g32=24" ...   ("" = the default)
# Env: WORKLOADS (mace_mp0_medium,sevennet_l3i5,nequip_l3), DTYPES (float32,float64), PASSES (all), REPEATS (10),
#      VARIANT_TIMEOUT (150 s). Carry .gpu/gpu_lib.tar.xz (and the variants' libraries prebuilt with
#      MD_ACCEL_TP_TUNING=... tools/prebuild_gpu_kernels.py, or they build here, ~20 s each).
set -uo pipefail
cd "$(dirname "$0")/.."
peers=${1:?usage: tools/gpu_tuning.sh PEERS_DIR OUTDIR VARIANT...} out=${2:?OUTDIR}
shift 2
# shellcheck disable=SC1091
source "$peers/setup-on-gpu.sh"
mkdir -p "$out"
for variant in "$@"; do
  label=${variant:-default}
  label=${label//[=,]/_}
  echo "[tuning] $label"
  MD_ACCEL_TP_TUNING=$variant GPU_TESTS=none timeout "${VARIANT_TIMEOUT:-150}" bash tools/gpu_check.sh \
    "benchmarks/kernels.py --impls md_accel --workloads ${WORKLOADS:-mace_mp0_medium,sevennet_l3i5,nequip_l3} --dtypes ${DTYPES:-float32,float64} --repeats ${REPEATS:-10} --warmup 2${PASSES:+ --passes $PASSES} --out $out/$label" \
    >"$out/$label.log" 2>&1 || echo "[tuning] $label: rc=$? (log $out/$label.log)"
done
python benchmarks/tuning_table.py "$out" | tee "$out/tuning.md"
