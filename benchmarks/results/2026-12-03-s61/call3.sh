#!/usr/bin/env bash
# Session 61, call 3 (the machine of calls 1-2, peers unpacked by call 1): nequip_l3 float32 with every peer, then
# mace_mp0_medium float64 (the cell under 1.3x in session 60) with every peer, each its own process.
set -u
cd "$(dirname "$0")/../../.."
WORKLOADS=nequip_l3 bash tools/gpu_peer_table.sh float32
mv "$OUT/r/smi_join.txt" "$OUT/r/smi_join_float32.txt"; mv "$OUT/r/smi.csv" "$OUT/r/smi_float32.csv"
WORKLOADS=mace_mp0_medium timeout $((590 - SECONDS)) bash tools/gpu_peer_table.sh float64
