#!/usr/bin/env bash
# The first device call of a session (a fresh machine): unpacks the peers bundle (.peers/full, tools/gpu_prepare.sh)
# into the git-ignored .gpu/site, JIT-builds the op library from this csrc (~3 minutes) into .gpu/build and
# .gpu/prebuilt and, at the same time, the generated kernels of tools/prebuild_gpu_kernels.py's STAGE_KERNELS (default
# "tp-tests tp-gpu-tests": the benchmark workloads and the tensor-product GPU tests) under each tuning of
# STAGE_TUNINGS (default "default"; e.g. "default fwd_acc=72" for an A/B): a new checkout carries none of them, and the
# device's 16 cores build both tunings of tp-tests in ~95 s. All stays on the warm machine for the next calls,
# launched within its idle time (PYTHONPATH=.gpu/site, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1); $OUT/gpu_lib.tar.xz and
# $OUT/gpu_k_<tuning>.tar.xz come back for later machines (copy them into .gpu/ and carry them), the logs in
# $OUT/stage_logs.tar.gz.
# Carry: .peers/full (or STAGE_PEERS=.peers/tab, or none)        Usage (device): bash tools/gpu_stage.sh
set -u
cd "$(dirname "$0")/.."
mkdir -p "$OUT/r"
peers=${STAGE_PEERS:-.peers/full}
if [[ -f $peers/setup-on-gpu.sh ]]; then
  (PEERS_SITE=$PWD/.gpu/site source "$peers/setup-on-gpu.sh" > "$OUT/r/stage.log" 2>&1) &
  pids=($!)
else
  pids=()
fi
(GPU_TESTS=none bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1) &
pids+=($!)
kernels=${STAGE_KERNELS-tp-tests tp-gpu-tests}
for v in ${kernels:+${STAGE_TUNINGS:-default}}; do
  name=k_$(tr -c 'A-Za-z0-9_\n' _ <<<"$v")
  # MD_ACCEL_NO_BUILD: the kernels' builds need no op library (importing md_accel.ops would JIT-build it too, after
  # waiting for gpu_check's build's lock)
  # shellcheck disable=SC2086
  MD_ACCEL_NO_BUILD=1 PYTHONPATH=$PWD python tools/prebuild_gpu_kernels.py $kernels --tuning "$v" --jobs 8 --name "$name" \
    > "$OUT/r/prebuild_$name.log" 2>&1 && cp ".gpu/gpu_$name.tar.xz" "$OUT/" &
  pids+=($!)
done
wait "${pids[@]}"
echo "staged in ${SECONDS}s"
[[ -f $peers/setup-on-gpu.sh ]] && PYTHONPATH=$PWD/.gpu/site python -c "import cuequivariance_torch; print('staged: cuequivariance_torch', cuequivariance_torch.__version__)" 2>&1 | tail -1
tail -n3 "$OUT/r/build.log"
for f in "$OUT"/r/prebuild_*.log; do [[ -f $f ]] && tail -n1 "$f"; done
# the device tool returns at most 8 files: the logs as one
(cd "$OUT" && dirs=() && for d in r logs; do if [[ -d $d ]]; then dirs+=("$d"); fi; done \
   && tar czf stage_logs.tar.gz "${dirs[@]}" && rm -rf "${dirs[@]}")
