#!/usr/bin/env bash
# Session 79: Tuning.sender_parts (part 1 of the backward and double backward over K parts of every receiver's
# edges, the blocks numbered part-major so that the blocks in flight gather the sender rows of one part: on edges
# sorted by (receiver, sender) a 1/K range of the nodes) against the defaults, md_accel alone, mace_mp0_medium
# float64 (WORKLOADS=a,b: those), forward + backward and double backward, in turn (END: the seconds the call may run;
# VARIANTS: the sweep's list), then with what is left PEER_TUNING against cuEquivariance.
# Carry .peers/tab (ase and vesin wheels in its wheels/), .gpu/gpu_s78wl.tar.xz (the six workloads, default) and
# .gpu/gpu_sp.tar.xz (mace_mp0_medium and mace_large under sender_parts=2 and =4); .gpu/gpu_lib.tar.xz if at hand.
set -u
cd "$(dirname "$0")/../../.."
source tools/gpu_call_start.sh || exit 3
end=${END:-570}
SWEEP_RUN_S=${RUN_S:-75} bash tools/tuning_sweep.sh $((end - 10 - SECONDS)) \
  "${VARIANTS:-default sender_parts=2 sender_parts=4 default sender_parts=2 sender_parts=4 default}" \
  --passes fwd_bwd,dbwd --dtypes float64 --workloads ${WORKLOADS:-mace_mp0_medium} --min-seconds 0.5 \
  --kernel-times --graph random_sym:4000:312000
# with what is left: PEER_TUNING (default sender_parts=4) against cuEquivariance in one process, double backward
left=$((end - 10 - SECONDS))
if ((left > 100)); then
  MD_ACCEL_TP_TUNING=${PEER_TUNING:-sender_parts=4} timeout "$left" python benchmarks/kernels.py --impls md_accel,cueq \
    --dtypes float64 --workloads mace_mp0_medium --passes dbwd --repeats 10 --min-seconds 1.0 --kernel-times \
    --budget $((left - 15)) --graph random_sym:4000:312000 --reference-cache "$PWD/.gpu/refcache" --out "$R/peer" \
    > "$R/peer.log" 2>&1
  echo "== peer rc=$? (${SECONDS}s)"; grep -v "^\[" "$R/peer.log" | cut -c1-150 | tail -n 20
fi
smi_stop
find "$R" -name "*.png" -delete
(cd "$OUT" && tar czf results.tar.gz r)
