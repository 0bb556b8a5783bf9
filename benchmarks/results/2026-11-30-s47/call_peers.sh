#!/usr/bin/env bash
# Session 47, calls 5-6 (after staging on the same warm machine: carry .peers/tab and run
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
# ): the kernel table with every peer at GEN 32 (session 46 took it at GEN 31, then GEN 32 changed the float64
# double backward of nequip_l3 and sevennet_l3i5). md_accel's default, cuEquivariance, OpenEquivariance in both
# modes and e3nn, the six workloads, the three passes, one dtype per call ($1), at least 1.5 s per cell, the clocks
# logged. The graph has both directions of every edge (OpenEquivariance's deterministic backward needs it).
# Carry: .peers/oeq (openequivariance 0.7.0 alone, from .peers/full) .gpu/gpu_lib.tar.xz .gpu/gpu_gen32.tar.xz
# The commands are session 46's call_peers.sh, unchanged (its lines 9-22 were this file's as it ran); only the
# generated kernels carried differ (GEN 32).
exec bash "$(dirname "$0")/../2026-11-30-s46/call_peers.sh" "$@"
