#!/usr/bin/env bash
# Session 67, calls 3 and 4, each a fresh machine (carry .peers/tab, .peers/oeq, .gpu/gpu_lib.tar.xz: the op library
# of this csrc, and .gpu/gpu_k45.tar.xz: tp-tests' kernels at GEN 45's default, built here): #3's kernel table with
# every peer at GEN 45 (md_accel, cuEquivariance, OpenEquivariance deterministic and atomic, e3nn), one dtype per call,
# all six workloads, the three passes, in one process (tools/gpu_peer_table.sh).
# Usage (device): bash benchmarks/results/2026-12-04-s67/call3.sh float64|float32
set -u
cd "$(dirname "$0")/../../.."
LIMIT=585 bash tools/gpu_peer_table.sh "${1:?float64|float32}"
