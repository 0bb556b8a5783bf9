#!/usr/bin/env bash
# Session 82, call 1: the forward's weight ring (Tuning.fwd_ring) on the GPU: the GPU tests under fwd_ring=2, then
# md_accel's forward alone, default / fwd_ring=1 / fwd_ring=2 in turn, twice, on nequip_l3 and sevennet_l3i5.
# carry: .gpu/gpu_lib.tar.xz .gpu/gpu_ring.tar.xz .gpu/gpu_ringtests.tar.xz .gpu/refcache
set -u
source tools/gpu_call_start.sh
[[ ${SKIP_TESTS:-0} == 1 ]] || MD_ACCEL_TP_TUNING=fwd_ring=2 timeout 170 python -m pytest -q -x tests/gpu/test_tp_conv_cuda.py \
  -k "matches_reference or graph_shapes or large_graph_forward or bitwise_deterministic" > "$R/gputests_ring2.log" 2>&1
echo "gpu tests fwd_ring=2: rc=$? (${SECONDS}s)"; tail -n 4 "$R/gputests_ring2.log"
SWEEP_RUN_S=80 tools/tuning_sweep.sh $((570 - SECONDS)) "default fwd_ring=1 fwd_ring=2 default fwd_ring=1 fwd_ring=2" \
  --passes fwd --workloads nequip_l3,sevennet_l3i5 --min-seconds 0.5
python - "$R" <<'PY'
import json, glob, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "kernels.json")), key=os.path.getmtime):
    recs = json.load(open(f))
    recs = recs.get("records", recs) if isinstance(recs, dict) else recs
    cells = [f"{r['workload']} {r['dtype'][5:]} {r.get('median_ms', float('nan')):.3f} ({r['median_ms'] / r['floor_ms']:.2f}x floor)"
             for r in recs if r.get("impl") == "md_accel" and r.get("pass") == "fwd" and "floor_ms" in r]
    print(os.path.basename(os.path.dirname(f)), " | ".join(cells))
PY
smi_stop
