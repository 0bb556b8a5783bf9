"""Plan-specialised CUDA kernels for ``md_accel::tp_conv_{fwd,bwd,dbwd}``: CUDA source generated from a
lowered plan (paths table + Clebsch-Gordan sparsity and values), built with nvcc into a small
shared library, and loaded by the op library (``csrc/tp_spec_abi.h``).

What the generated kernels fix at compile time: every path's offsets, multiplicities and l's,
the (i, j, k) positions of its CG non-zeros (loops fully unrolled, zeros never visited) and their
values (exact constants ``kCg<q>``: no load per non-zero; the op library uses a library only for
calls whose ``cg_val`` equals them in the call's dtype). Mapping:

* fwd: one block per receiver; passes over its incoming edges, each for a group of output blocks
  of one multiplicity (accumulators out[u, k] in registers, at most FWD_ACC_BUDGET per channel; FWD_ACC_NARROW in
  float64 where no multiplicity exceeds FWD_NARROW_MUL, FWD_ACC32_BUDGET in float32).
  Thread (slot, u) = channel u of every S-th edge: a 32-channel block in a 64-thread kernel uses
  both warps; the slots' partial sums are added in slot order at the end (no atomics:
  bit-reproducible). The forward's block has at least FWD_MIN_BLOCK threads (``kFwdThreads``): a plan whose
  channels fit one warp sums each receiver on four edge slots there. Opt-in (``fwd_cpl=2``): a thread holds two
  channels of a block of 32, 64, .. channels, u and u + M / 2, so that each product of a CG value and the edge's y
  (the same in every lane) serves both.
* bwd: one block per receiver (or TPDims::split blocks, each a contiguous part of its edges: the
  kernel writes per-edge rows only); one pass per in1 block (split over its output blocks when their
  grad_out components exceed BWD_G_BUDGET per channel, per dtype; consecutive whole blocks of one
  multiplicity share a pass while they fit, in float64 at most MERGE_G64), grad_out of the pass held in
  registers; per edge grad_w (direct), grad_y (fixed-order warp butterfly, or shared memory: gy_smem, + cross-warp sum,
  accumulated over passes) and the edge's contribution to grad_x, written to a scratch row; a
  second kernel sums the scratch rows of each sender in src_perm order (with TPDims::atomic_gx,
  opt-in: added atomically into grad_x instead, no rows, no second kernel). Same edge slots.
* dbwd: the same two kernels with substituted arguments (tp_reference.tp_conv_dbwd_ref):
  g_grad_out = fwd-like kernel with message w (ggx, y) + w (x, ggy) + ggw (x, y) (skipped when the
  op library passes no output for it: grad_out needs no gradient); g_x, g_y, g_w = bwd-like kernel
  (each non-zero feeds both substitutions), then the per-sender sum. Part 1 may be given one buffer as ggw and
  g_w (a final double backward writing its g_w over a gg_w nobody else holds, TPSpec::dbwd_in_gg_w): each thread
  reads its ggw elements (coherent loads, neither pointer __restrict__) before it writes those g_w elements.

Cache: ``$MD_ACCEL_BUILD_DIR/tp_specs/<structure hash>-<arch>-v<GEN_VERSION>.so`` (default base
``~/.cache/md_accel``).

Tuning experiments: ``MD_ACCEL_TP_TUNING="bwd_g32=24,min_warps32=32,prefetch=15,merge_in1=0"``
overrides the register budgets below, asks the compiler for a minimum of resident warps per SM
(``__launch_bounds__``), chooses the kernels that prefetch each thread's next edge weights into L2
and the edge loops that prefetch its y and x lines too (``PF_*`` bits), whether backward passes merge
in1 blocks of one multiplicity, up to how many components in float64, the forward's channels per thread and
whether part 1 sums grad_y through shared memory (``gy_smem``, set by itself where the float64 double backward spills:
below) (fields of ``Tuning``); such builds
are cached under a name of their own
(``...-v<GEN_VERSION>-t<hash>.so``).
Without it the generated source is the measured default.

Register cap by measurement (``Tuning.dbwd_auto_warps32``): the first nvcc build reports each kernel's registers
(``-Xptxas -v``); where the double backward's float32 per-edge kernel needed more than a minimum of
``dbwd_auto_warps32`` resident warps per SM allows, the library is built again with that minimum
(``dbwd_min_warps32``), under the same cache name. Likewise (``Tuning.fwd_auto_warps64``): where the float64 forward
kernel spilled at least ``fwd_spill_bytes``, the second build gives the forward alone that (lower) minimum
(``fwd_min_warps64``); where the float64 double backward's part 1 spilled at least ``gy_spill_bytes``, the second
build sums grad_y through shared memory (``gy_smem``).
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
import textwrap
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import _codegen_mma
from ._rows_plan import RowsPlan, rows_in_grad_w

GEN_VERSION = 48  # bump when the generated code changes: names the cache entries
_CSRC = Path(__file__).resolve().parent.parent.parent / "csrc"

FWD_ACC_BUDGET = 48   # output components per channel kept in registers per fwd edge pass
# float32's budget for its forward passes (fwd_plans; float64's passes would spill, session 56, so it keeps
# FWD_ACC_BUDGET). mace_large's forward in one pass of 71 components, 1.040 / 1.052 ms against 1.184 / 1.176 in two
# (session 58, H200, float32); with the slots' sums counted at 4 bytes (Tuning.fwd_slots32), sevennet_l3i5's 32-channel
# passes 52 + 49 components on four slots, 1.237 / 1.233 ms against 1.368 / 1.370 (three passes on four, three and
# three), nequip_l3's 76 + 80, 0.745 / 0.744 against 0.859 / 0.859 (four passes; session 59, H200, float32, GEN 39's
# defaults and fwd_slots32=1,fwd_acc32=96 in turn).
FWD_ACC32_BUDGET = 96
# float64's forward budget where no multiplicity exceeds FWD_NARROW_MUL channels (Tuning.fwd_acc_narrow): every pass
# then runs on several edge slots of the block, and a wider pass costs no pass that had the block to itself (sessions 56
# and 60: the register count FWD_ACC_BUDGET keeps those at). nequip_l3's float64 forward in three passes of 56, 51 and
# 49 components, 1.608 / 1.616 ms against 1.680 / 1.698 in four; the same budget for every kernel took sevennet_l3i5's
# float64 forward (a one-slot pass of 128 channels besides its 32-channel ones) from 2.283 / 2.308 to 2.647 / 2.663 ms
# (255 registers, 8 resident warps per SM instead of 12); mace_mp0_medium's unchanged (session 60, H200, float64,
# fwd_acc=64 and the defaults in turn).
FWD_ACC_NARROW = 64
FWD_NARROW_MUL = 32
DBWD_ACC_BUDGET = 32  # the same for g_grad_out of the double backward (x, ggx, y, ggy live too)
# shared-memory bytes for the forward's edge slots' partial sums (Tuning.fwd_slot_smem, at most this: 48 KiB of
# static memory). sevennet_l3i5's float64 forward with its 32-channel passes on four slots each (24 KiB gave two of
# them three): 2.317 / 2.293 ms against 2.460 / 2.443 (session 59, H200, float64, 24 and 46 KiB in turn).
FWD_SLOT_SMEM = 46 * 1024
DFWD_SLOT_SMEM = 24 * 1024  # the same for the double backward's g_grad_out kernel (dfwd_kernel)
# The forward's block has at least this many threads: plans whose channels fit one warp (32 threads for the other
# kernels) run 4 edge slots per receiver in the forward, and those of 64 channels 2. Session 52 (H200, kernels.py, the
# random symmetric graph of 4,000 nodes and 312,000 edges, default and variant in turn twice): nequip_l3 forward
# 0.86 against 0.99-1.01 ms (float32), 1.68 against 1.81-1.87 (float64); its float32 forward at 128 registers per
# thread either way (16 resident warps per SM). One-warp blocks left each receiver's 78 edges to one warp, 1.89 waves.
# Widening the other five workloads' blocks (2x, 4x) lost time in 7 and 8 of their 10 cells, wherever it cost resident
# warps (registers per block, float64's launch bounds); the best gain was mace_first float32's 6-9 % at 4x.
FWD_MIN_BLOCK = 128
# Tuning.fwd_tma: the forward's edge loop reads the weights, the sender's x row and the y row of each edge from shared
# memory, where the block's thread 0 has copied them with the bulk-copy engine (cp.async.bulk, sm_90) a few edges ahead,
# each stage completing on an mbarrier (FWD_TMA_STAGES at most, within FWD_TMA_SMEM bytes). Session 53 (ncu, H200,
# kernels.py's random graph): the GEN 34 forwards waited on their global loads (L1TEX scoreboard 53-75 % of the stall
# cycles on mace_mp0_medium, mace_first and sevennet_0 float32) with L2 75-93 % busy; the bulk copies move each row
# once, with no load instruction per thread nor register held for the data in flight. Default and fwd_tma in turn, twice:
# mace_mp0_medium 0.534 against 0.659-0.667 ms (float32), 1.036-1.077 against 1.172-1.175 (float64); mace_large
# 1.20-1.21 / 2.40-2.44 against 1.37 / 2.82-2.83; mace_first 0.235-0.244 / 0.406-0.420 against 0.307-0.313 /
# 0.483-0.487. Where a pass ran several edge slots per block (the SevenNet shapes' 32- and 64-channel passes, one
# producer thread per slot) it lost up to 14 % (sevennet_l3i5 float32) or gained under 3 %: the kernel is generated
# only where every forward pass has one edge slot, the rows' runs allow the copies (_tma_rows) and
# two stages fit; the launcher takes it where the device has bulk copies and the call's x and w rows are 16-byte
# aligned (fwd_tma_ok), else the forward above. Sessions 55-56 tried one producer per block for passes of several slots
# (a stage holding each slot's next edge): it lost on all six SevenNet / NequIP cells, 0.59 against 0.69 ms up to 1.44
# against 2.62 (sevennet_l3i5 float32), and was taken out (its code: commit a9ef71d). The same copies for part 1 of the
# backward and double backward (GEN 37's Tuning.p1_tma, sessions 54-57) bought at most 4 % on forward + backward and
# cost 1-12 % on the double backward of the three MACE shapes, and were taken out too (commit a0c5bab).
FWD_TMA_STAGES = 4
FWD_TMA_SMEM = 46 * 1024
FWD_TMA_VEC = 4  # elements: every copied run starts and ends on a multiple (16 bytes in float32, 32 in float64)
# grad_out components per channel held in registers by one bwd / dbwd pass, (float32, float64).
# float32 64 (was 48): SevenNet-l3i5 fwd + bwd 4.96 / 4.97 vs 5.18 / 5.19 ms, MACE medium unchanged
# (session 14, H200, kernels.py, two runs each). float64 48 (was 24): fwd + bwd SevenNet-l3i5 9.73 -> 8.72 ms,
# NequIP l = 3 7.74 -> 6.63, MACE large 10.13 -> 9.25; SevenNet-l3i5 float64 32k step 247 -> 234 ms
# (session 25, H200, one call).
BWD_G_BUDGET = (64, 48)
# float64: whole in1 blocks share a backward pass only while their grad_out components fit this (the
# budget above still sets how finely one block is split). MACE-MP-0 medium float64 fwd + bwd with both
# its blocks in one pass of 40: 5.10 ms, against 4.48 in two passes of 16 and 24 (session 25, H200).
MERGE_G64 = 24
# double backward: (48, 24), was (32, 16): MACE-MP-0 medium dbwd 9.52 -> 9.28 ms (float32), 17.78 -> 17.01
# (float64); MACE large 17.70 -> 17.13, 34.97 -> 33.69; SevenNet-0 float64 14.50 -> 13.71 (session 25,
# H200, kernels.py, one call; 16 in float32 and 8 in float64 slower).
DBWD_G_BUDGET = (48, 24)
# Minimum resident warps per SM asked of the compiler for the float64 kernels (__launch_bounds__):
# 12 caps them at ~168 registers. Session 14 (H200, kernels.py, 312k edges): SevenNet-l3i5 float64
# fwd 1.23x, fwd + bwd 1.08x, double backward 1.06x faster than without (up to 254 registers, a few
# small spills now); MACE medium float64 1.01-1.04x. The float32 kernels get no minimum (0): 20 warps made the
# NequIP l = 3 float32 forward 19 % slower (session 30, H200: 1.114 vs 0.937 ms), no change on MACE medium (29).
MIN_WARPS64 = 12
GY_CHUNK = 8          # edge iterations whose cross-warp grad_y sums share one barrier
W_SLOTS = 4           # the deferred paths' weight-gradient kernel: threads per block over part 1's (_rows_source)
MAX_IN2 = 32          # grad_y butterfly reduces at most 32 used y columns
GY_SMEM_BYTES = 48 * 1024  # Tuning.gy_smem: a block's static shared memory limit, for s_gy and s_red in float64
_GY_SMEM_CALL = "warp_sum_smem<T, "  # how a kernel calls _GY_SMEM's template (generate includes it only then)
DBWD_AUTO_WARPS32 = 12  # _second_look: the float32 double backward's per-edge kernel, capped where it needs it
# _second_look: where the first build's float64 forward spills at least FWD_SPILL_BYTES (ptxas's spill stores
# per thread), the second build gives the forward alone a minimum of FWD_AUTO_WARPS64 warps per SM (255 registers for
# 256 threads). Session 44 (H200, kernels.py, 50 calls per cell, default and variant in turn twice): nequip_l3
# (560 bytes) float64 forward 0.83x the time (1.78 against 2.11-2.18 ms), its forward + backward 0.96x;
# sevennet_l3i5 (24 bytes) 1.14x slower (2.77-2.79 against 2.42-2.44 ms), so a few spilled words are cheaper than
# one resident block less.
FWD_AUTO_WARPS64 = 8
FWD_SPILL_BYTES = 128
# _second_look: where the first build's float64 double backward, part 1, spills at least GY_SPILL_BYTES (either
# instantiation), the second build sums grad_y through shared memory (gy_smem). Session 46 (H200, kernels.py, default
# and gy_smem in turn twice): nequip_l3 (2,704 bytes) float64 double backward 0.91x the time, sevennet_l3i5 (2,204)
# 0.985x, their other passes 0.98-1.00x; mace_mp0_medium (240 bytes) 1.012x slower in float64 (mace_large,
# 412 bytes: 1.005x in session 45's form).
GY_SPILL_BYTES = 1024
# Tuning.g_smem: part-1 kernels (bits by kernel tag: the backward's float32-or-shared and float64 kernels, the double
# backward's) that stage their pass's grad_out components in shared memory, each path reading its own inside the edge
# loop (lds_each), instead of holding all of them in registers across it. ptxas (session 64): the float64 kernels
# spill far less at the 168-register cap (nequip_l3's double backward 1,912 -> 276 bytes, sevennet_l3i5's
# backward 764 -> 4), the float32 ones use 96-128 registers instead of 127-222. kernels.py (H200, the default and
# every kernel with it, in turn twice, ms ratios): sevennet_l3i5 float64 forward + backward 0.96x, double backward
# 0.935x; nequip_l3 float64 0.947x / 0.968x; mace_large float64 0.973x / 0.979x; but where the float64 kernel did
# not spill it lost (mace_mp0_medium's backward: forward + backward 1.036x; sevennet_0's 1.011x), as did some
# float32 kernels (mace_mp0_medium 1.015-1.024x). _second_look gives it to the kernels whose float64
# instantiation spilled at least G_SPILL_BYTES in the first build.
G_SMEM_BIT = {"bs": 1, "bd": 2, "ds": 4, "dd": 8}
G_SMEM_ALL = 15
G_SPILL_BYTES = 128
# Tuning.g32_auto: the float32 backward's kernel (bs) spills nowhere, but with grad_out in shared memory it needs
# fewer registers, which paid where they fell by a third or less and so raised the resident blocks per SM (ptxas
# registers of the worst variant, blocks per SM; float32 forward + backward, H200, kernels.py, in turn twice,
# session 64 with every part-1 kernel given the bit, session 66 with this rule's kernels alone): nequip_l3
# 168 -> 128, 12 -> 16 blocks, 0.90x / 0.91x the time; sevennet_0 128 -> 96, 4 -> 5, 0.93x / 0.93x (its kernel
# serves float64 too: 1.02x there, inside the +-2 % that session 66's control moved); sevennet_l3i5 168 -> 128, 3 -> 4,
# 0.98x / 1.00x. Where they fell by more, grad_out had been most of the kernel's registers and each path reads it
# from shared memory inside the edge loop instead: mace_mp0_medium 167 -> 96, 3 -> 5 blocks, 1.02x in session 64;
# mace_large 167 -> 96, 1.00x. A rule fitted to these shapes: a trial build gives that kernel the bit, kept where its
# blocks per SM (resident_blocks) rise and its registers fall by at most G32_MAX_REGISTER_DROP.
G32_MAX_REGISTER_DROP = Fraction(1, 3)
SMEM_PER_SM = 228 * 1024  # sm_90: shared memory per SM (resident_blocks)
MAX_BUILDS = 3        # compile_cached: the first build and at most two revisions (build's _Revisions)
MAX_NNZ = 2048        # compile time (and the fused kernels' shared-memory staging of the values)
MAX_THREADS = 1024
TUNING_ENV = "MD_ACCEL_TP_TUNING"
# Tuning.prefetch bits: the kernels whose edge loops prefetch the next edge's weight lines into L2.
PF_FWD, PF_BWD32, PF_BWD64, PF_DBWD = 1, 2, 4, 8  # fwd and dfwd; bwd float32; bwd float64; dbwd part 1
# Session 8 (H100, tools/gpu_tuning.sh): the prefetch made the forward up to 1.3x faster and the fp32
# MACE backward 1.07x, but the fp64 SevenNet-l3i5 backward ~20 % slower (182 instead of 168 registers:
# one resident block less per SM). Session 11 (H200): the fp64 MACE-medium backward 1.07x faster with
# it, SevenNet-l3i5's 0.86x. So the fp64 backward is built both ways and the launcher takes the
# prefetching kernel where it keeps as many resident blocks per SM (PF_BWD64: that choice; unset: never).
PF_DEFAULT = PF_FWD | PF_BWD32 | PF_BWD64 | PF_DBWD
# Opt-in: the forward passes (fwd, dfwd) also ask for the lines of the next edge's y row (L2) and of its
# sender's x row (L1) that the pass reads (the 32-channel forwards are bound by latency: session 28, ncu,
# NequIP l = 3 float32, 51 % of DRAM bandwidth, 57 % SM throughput). Mixed: session 29 (H100, one run)
# 1.7-6.1 % faster in 4 of 5 forward cells, 5 % slower on MACE-MP-0 medium float64; session 30 (H200, with
# PF_PART1_XY) forwards 3.4-17 % slower on the MACE shapes and SevenNet-0 float32, 10 % faster on SevenNet-0
# float64.
PF_FWD_XY = 16
# Opt-in: the same for the backward's and the double backward's part 1 (both dtypes), whose edge loops also load
# y and the sender's x per edge. Session 30 (H200, with PF_FWD_XY): forward + backward and double backward from
# 4.6 % faster to 5.1 % slower than the default on MACE-MP-0 medium, MACE large and SevenNet-0: no gain.
PF_PART1_XY = 32
PF_ALL = PF_DEFAULT | PF_FWD_XY | PF_PART1_XY
# Tuning.w_evict: the per-edge weights (w, and ggw in the double backward) are read once; loaded with an L2
# evict-first policy (and no L1 line), they leave L2 before the gathered x rows do. Session 42 (H200): x kept in L2
# by a persisting access-policy window had made the backward's per-edge kernel 3-4 % faster, but the window's L2
# set-aside slowed every kernel that writes (benchmarks/pass_breakdown.py --l2-window); the evict-first loads need
# no set-aside. kernels.py, the six workloads, default and w_evict in turn twice: 0.86-1.03x the time, faster in 32
# of 36 cells (float64 forwards 0.86-0.99x, the double backwards 0.98-1.00x); the four slower cells, MACE-MP-0
# medium float32's and MACE first's float32 forward, within their runs' spread. Weight rows shared by two edges
# (TPGraph::w_row, the MD step's edge_partner) are read twice but loaded evict-first too: session 43's MD steps
# (copper MACE, SevenNet-0; 4,000 and 32,000 atoms; both dtypes) took the same time as with w_evict=0 or less.
# The bulk-copy forward (Tuning.fwd_tma) copies the weight rows under the same policy since GEN 43 (bulk_copy_hint):
# under the default one mace_large's float64 forward moved 8.75 GB against its 5.80 GB floor, the gathered x rows
# from DRAM again (ncu, session 62); with the hint 6.99 GB, and kernels.py (H200, default and w_evict=0 in turn twice):
# mace_large 2.29-2.32 against 2.51 ms (float64), 1.05-1.09 against 1.11-1.12 (float32), mace_mp0_medium float64
# 1.03-1.05 against 1.08-1.09, the others within their runs' spread.


class Tuning(NamedTuple):
    """Code-generation parameters: register budgets (components per channel), the minimum resident
    warps per SM requested from the compiler (0: the compiler's choice) per dtype, two switches and the
    float64 cap on backward passes shared by whole in1 blocks."""
    fwd_acc: int = FWD_ACC_BUDGET
    fwd_acc32: int = FWD_ACC32_BUDGET  # float32's forward budget (fwd_plans; 0: fwd_acc)
    fwd_acc_narrow: int = FWD_ACC_NARROW  # float64's where no multiplicity exceeds FWD_NARROW_MUL (0: fwd_acc)
    dbwd_acc: int = DBWD_ACC_BUDGET
    bwd_g32: int = BWD_G_BUDGET[0]
    bwd_g64: int = BWD_G_BUDGET[1]
    dbwd_g32: int = DBWD_G_BUDGET[0]
    dbwd_g64: int = DBWD_G_BUDGET[1]
    min_warps32: int = 0
    min_warps64: int = MIN_WARPS64
    dbwd_min_warps32: int = 0  # min_warps32 of the double backward's per-edge kernel alone (opt-in: session 38)
    dbwd_auto_warps32: int = DBWD_AUTO_WARPS32  # that minimum, set by itself where the first build exceeds it (0: never)
    fwd_min_warps64: int = 0  # min_warps64 of the forward kernel alone (0: min_warps64)
    fwd_auto_warps64: int = FWD_AUTO_WARPS64  # that minimum, set by itself where the f64 forward spills (0: never)
    fwd_spill_bytes: int = FWD_SPILL_BYTES  # ... at least this many bytes (0: any spill)
    prefetch: int = PF_DEFAULT  # PF_* bits: where each thread asks the caches for its next edge's data first
    merge_in1: int = 1  # 1: backward passes over several whole in1 blocks of one multiplicity
    merge_g64: int = MERGE_G64  # float64: such a shared pass holds at most this many grad_out components
    fwd_cpl: int = 1  # forward: channels per thread in blocks whose multiplicity is a multiple of 32 (1 or 2)
    fwd_min_block: int = FWD_MIN_BLOCK  # forward: at least this many threads per block (fwd_block; 32 to 1024)
    fwd_slot_smem: int = FWD_SLOT_SMEM  # forward: bytes of shared memory for the edge slots' partial sums (fwd_block)
    fwd_slots32: int = 1  # 1: float32's forward planned in its own sizes: 4-byte slot sums, fwd_acc32 on every pass
    # (0: fwd_acc32 for its one-slot passes only, the slots counted at 8 bytes: GEN 39)
    fwd_tma: int = 1  # 1: the forward's edge rows through shared memory by bulk copies where they allow (FWD_TMA_STAGES)
    fwd_mma: int = 0  # float32's forward on the tensor cores where the plan allows, this many n-tiles per pass
    # (_codegen_mma; 0: off; opt-in: slower than the scalar forward on every measured shape, session 63)
    w_evict: int = 1  # 1: the weights' loads L2 evict-first, no L1 line (the note after PF_ALL); 0: plain loads
    gy_smem: int = 0  # 1: part 1's grad_y summed over a warp's lanes through shared memory (where it fits GY_SMEM_BYTES)
    gy_spill_bytes: int = GY_SPILL_BYTES  # gy_smem set by itself where the f64 double backward spills this much (0: never)
    g_smem: int = 0  # G_SMEM_BIT bits: part-1 kernels with their grad_out in shared memory (0: none asked for)
    g_spill_bytes: int = G_SPILL_BYTES  # g_smem set by itself per kernel where its f64 build spills this much
    g32_auto: int = 1  # 1: g_smem's float32 backward bit set by itself where a trial build gains (_g32_gained)
    wave: int = 0  # 1: the double backward's part 1 walks each receiver's edges from a rotated start (_WAVE) where its
    # launch bounds fix the resident blocks per SM (float64's min_warps64; float32's with a min_warps32); 0: in order.
    # Opt-in until tests/gpu/test_tp_conv_cuda.py has run under it (session 85 timed it but had no device time left)

    def suffix(self) -> str:
        """'' for the defaults, else '-t<hash>' naming the variant's cache entry: a hash of the fields that
        differ from the defaults, so that a new field leaves the names of earlier variants as they were."""
        changed = [(k, v) for k, v in self._asdict().items() if v != Tuning._field_defaults[k]]
        return "-t" + hashlib.sha256(repr(changed).encode()).hexdigest()[:8] if changed else ""


def tuning() -> Tuning:
    """The defaults, with the overrides of ``$MD_ACCEL_TP_TUNING`` ("key=value,...")."""
    text = os.environ.get(TUNING_ENV, "").strip()
    if not text:
        return Tuning()
    values = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key.strip() not in Tuning._fields or not value.strip().isdigit():
            raise ValueError(f"{TUNING_ENV}: bad item {item!r} (keys: {', '.join(Tuning._fields)}; integer values)")
        values[key.strip()] = int(value)
    if values.get("prefetch", 0) & ~PF_ALL:
        raise ValueError(f"{TUNING_ENV}: prefetch takes the bits of {PF_ALL} (PF_* in {__name__})")
    if values.get("fwd_cpl", 1) not in (1, 2):
        raise ValueError(f"{TUNING_ENV}: fwd_cpl is 1 or 2")
    if not 32 <= values.get("fwd_min_block", FWD_MIN_BLOCK) <= MAX_THREADS:
        raise ValueError(f"{TUNING_ENV}: fwd_min_block is 32 to {MAX_THREADS}")
    if not 0 <= values.get("fwd_mma", 0) <= _codegen_mma.MAX_TILES:
        raise ValueError(f"{TUNING_ENV}: fwd_mma is 0 to {_codegen_mma.MAX_TILES} (n-tiles per pass)")
    if not 0 <= values.get("fwd_slot_smem", FWD_SLOT_SMEM) <= FWD_SLOT_SMEM:
        raise ValueError(f"{TUNING_ENV}: fwd_slot_smem is 0 to {FWD_SLOT_SMEM} (bytes of static shared memory)")
    if not 0 <= values.get("g_smem", 0) <= G_SMEM_ALL:
        raise ValueError(f"{TUNING_ENV}: g_smem takes the bits of {G_SMEM_ALL} (G_SMEM_BIT in {__name__})")
    for key in ("w_evict", "gy_smem", "fwd_tma", "fwd_slots32", "g32_auto", "wave"):
        if values.get(key, 0) not in (0, 1):
            raise ValueError(f"{TUNING_ENV}: {key} is 0 or 1")
    return Tuning(**values)


class Unsupported(ValueError):
    """The plan has a shape the specialised kernels do not handle (the generic kernel does)."""


# --- plan structure ----------------------------------------------------------------------------

def structure(paths: Sequence[Sequence[int]], cg_ptr: Sequence[int], cg_idx: Sequence[Sequence[int]],
              cg_val: Sequence[float]):
    """Everything the generated code depends on, as plain tuples (what the op library compares):
    the integer tables and the CG values as exact hex floats."""
    return (tuple(tuple(int(v) for v in r) for r in paths), tuple(int(v) for v in cg_ptr),
            tuple(tuple(int(v) for v in r) for r in cg_idx), tuple(float(v).hex() for v in cg_val))


def structure_key(struct) -> str:
    return hashlib.sha256(repr(struct).encode()).hexdigest()[:20]


def _intervals(elements) -> List[Tuple[int, int]]:
    out: List[Tuple[int, int]] = []
    for q in sorted(set(elements)):
        if out and out[-1][1] == q:
            out[-1] = (out[-1][0], q + 1)
        else:
            out.append((q, q + 1))
    return out


def _covered_fn(name: str, elements) -> str:
    """A device predicate: column q is written by some path."""
    iv = _intervals(elements)
    if len(iv) > 32:
        raise Unsupported(f"{name}: too fragmented ({len(iv)} intervals)")
    cond = " || ".join(f"(q >= {a} && q < {b})" for a, b in iv) or "false"
    return f"__device__ __forceinline__ bool {name}(int q) {{ return {cond}; }}\n"


def _zero_uncovered(elements, start: str, width: str, step, store: str, indent: str) -> str:
    """Loops that zero the columns q < width no path writes, q = start, start + step, ..: one per gap between the
    written intervals and one from the last of them on (wider rows). Each thread visits only unwritten columns;
    the per-edge loops of the part-1 kernels scanned every column with a predicate (`_covered_fn`) before GEN 46,
    ~70 issued instructions per edge and warp on mace_mp0_medium's float64 backward that stored nothing."""
    iv = _intervals(elements)
    if len(iv) > 32:
        raise Unsupported(f"{store}: too fragmented ({len(iv)} intervals)")
    loops, prev = [], 0
    for a, b in iv:
        if a > prev:
            loops.append((prev, f"q < {a} && q < {width}"))
        prev = b
    loops.append((prev, f"q < {width}"))
    return "".join(f"{indent}#pragma unroll 1  // no hoisted offsets: they would hold registers across the edge loop\n"
                   f"{indent}for (int q = {a} + {start}; {cond}; q += {step}) {store}\n" for a, cond in loops)


def _in1_elements(live) -> List[int]:
    """The in1 (x) columns some path reads: those of grad_x that the part-1 kernels write."""
    return [p.in1_off + q for p in live for q in range(p.mul * p.d1)]


def _w_elements(live) -> List[int]:
    """The weight columns some path reads: those of grad_w that the part-1 kernels write."""
    return [p.w_off + u * p.w_stride for p in live for u in range(p.mul)]


def _blocks(paths, col_off: int, col_d: int, what: str) -> Dict[Tuple[int, int, int], int]:
    """Distinct (offset, mul, width) blocks of one operand; partial overlaps are refused."""
    keys: Dict[Tuple[int, int, int], int] = {}
    for r in paths:
        if r[1] == 0:
            continue
        key = (r[col_off], r[1], col_d(r) if callable(col_d) else col_d)
        keys.setdefault(key, len(keys))
    spans = sorted((k[0], k[0] + k[1] * k[2]) for k in keys)
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        if b0 < a1:
            raise Unsupported(f"{what} blocks overlap partially")
    return keys


class _Path:
    def __init__(self, idx, row, nz):
        (self.in1_off, self.mul, self.l1, self.in2_off, self.l2, self.out_off, self.l3,
         self.w_off, self.w_stride) = row
        self.idx = idx
        self.d1, self.d3 = 2 * self.l1 + 1, 2 * self.l3 + 1
        self.nz = nz  # [(q, i, j, k)] with q the global non-zero index (cg_val[q])
        self.out_key = (self.out_off, self.mul, self.d3)
        self.in1_key = (self.in1_off, self.mul, self.d1)
        self.w_key = (self.w_off, self.mul, self.w_stride)


def _analyse(struct):
    paths, cg_ptr, cg_idx, _ = struct
    nnz = len(cg_idx)
    if nnz > MAX_NNZ:
        raise Unsupported(f"{nnz} CG non-zeros > {MAX_NNZ}")
    ps = [_Path(p, r, [(q, *cg_idx[q]) for q in range(cg_ptr[p], cg_ptr[p + 1])])
          for p, r in enumerate(paths)]
    live = [p for p in ps if p.mul > 0 and p.nz]
    if not live:
        raise Unsupported("no path with channels and non-zeros")
    max_mul = max(p.mul for p in live)
    threads = max(32, (max_mul + 31) // 32 * 32)
    if threads > MAX_THREADS:
        raise Unsupported(f"multiplicity {max_mul} > {MAX_THREADS}")
    _blocks([paths[p.idx] for p in live], 5, lambda r: 2 * r[6] + 1, "output")
    _blocks([paths[p.idx] for p in live], 0, lambda r: 2 * r[2] + 1, "in1")
    wsets: Dict[Tuple[int, int, int], set] = {}
    for p in live:
        wsets.setdefault(p.w_key, {p.w_off + u * p.w_stride for u in range(p.mul)})
    keys = list(wsets)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            if wsets[keys[a]] & wsets[keys[b]]:
                raise Unsupported("weight blocks overlap")
    return ps, live, threads, nnz


# --- code generation ---------------------------------------------------------------------------

def _num(v: int) -> str:
    return str(v)


def _parts(keys: List[Tuple[int, int, int]], budget: int) -> List[List[Tuple[int, int, int]]]:
    """Consecutive runs of output blocks (width key[2]) of near-equal total width, the fewest
    runs of at most ``budget`` (a single wider block forms its own run)."""
    total = sum(k[2] for k in keys)
    want = max(1, -(-total // budget))
    target = -(-total // want)
    while True:
        parts: List[List[Tuple[int, int, int]]] = [[]]
        used = 0
        for k in keys:
            if parts[-1] and used + k[2] > target:
                parts.append([])
                used = 0
            parts[-1].append(k)
            used += k[2]
        if len(parts) <= want or target >= budget:
            return parts
        target += 1


def _out_groups(live: List[_Path], budget: int) -> List[List[_Path]]:
    """Output blocks split into groups of at most ``budget`` components per channel."""
    order: List[Tuple[int, int, int]] = []
    for p in live:
        if p.out_key not in order:
            order.append(p.out_key)
    return [[p for p in live if p.out_key in g] for g in _parts(order, budget)]


def _by_mul(paths: List[_Path]) -> List[Tuple[int, List[_Path]]]:
    muls = sorted({p.mul for p in paths}, reverse=True)
    return [(m, [p for p in paths if p.mul == m]) for m in muls]


def _bname(prefix: str, key) -> str:
    return f"{prefix}{key[0]}"


def _fwd_cpl(mul: int, cpl: int) -> int:
    """Channels per thread in a forward group of multiplicity ``mul`` under ``Tuning.fwd_cpl``: more than one only
    where the channels fill whole warps (no thread holds a channel past ``mul``)."""
    return cpl if mul % 32 == 0 else 1


def _fwd_slots(mul: int, comps: int, threads: int, cpl: int = 1, smem: int = FWD_SLOT_SMEM,
               elem: int = 8) -> Tuple[int, int, int]:
    """(M, L, S): channels rounded up to a warp, lanes per edge slot (M / cpl: each lane holds channels u,
    u + L, ..), and edge slots per block (the partial sums of slots 1..S-1 meet in shared memory, at most
    ``smem`` bytes of ``elem``-byte sums: float64's unless Tuning.fwd_slots32)."""
    M = (mul + 31) // 32 * 32
    L = M // cpl
    S = max(1, min(threads // L, 1 + smem // (comps * M * elem)))
    return M, L, S


def _out_width(paths: List[_Path]) -> int:
    """grad_out / output components per channel of the paths' distinct output blocks."""
    return sum(k[2] for k in {p.out_key for p in paths})


def _cg_const(q: int) -> str:
    """CG value q as the generated kernels use it: the compiled-in constant kCg<q> (see _cg_decls)."""
    return f"T(kCg{q})"


def _cg_decls(cg_idx, cg_val) -> str:
    """The CG values as exact constants (hex floats; decimal and (i, j, k) in the comment), and the
    table of them the op library compares against a call's cg_val."""
    lines = [f"constexpr double kCg{q} = {v};  // {float.fromhex(v):.17g} at (i, j, k) = {tuple(ijk)}\n"
             for q, (v, ijk) in enumerate(zip(cg_val, cg_idx))]
    return "".join(lines) + f"constexpr double kCgVal[] = {{{', '.join(f'kCg{q}' for q in range(len(cg_val)))}}};\n"


def _grouped(nz, key: Callable[[tuple], tuple]) -> List[List[tuple]]:
    """The non-zeros ``nz`` grouped by ``key``, groups in the order of their first non-zero, each in ``nz``'s order."""
    groups: Dict[tuple, List[tuple]] = {}
    for t in nz:
        groups.setdefault(key(t), []).append(t)
    return list(groups.values())


def _cg_sum(terms, cg: Callable[[int], str], factor: Callable[[tuple], str]) -> str:
    """sum cg(q) * factor(t) over the non-zeros t = (q, i, j, k) of ``terms``, as one fma chain (its first term
    a product)."""
    expr = f"{cg(terms[0][0])} * {factor(terms[0])}"
    for t in terms[1:]:
        expr = f"fma({cg(t[0])}, {factor(t)}, {expr})"
    return expr


def _fwd_component(p: _Path, k: int, xk: str, cg: Callable[[int], str] = _cg_const, acc: str = "T(0)") -> str:
    """Path p's forward message for output component k of one channel (weight not applied):
    sum_i x_i (sum_j cg_ijk y_j) over its non-zeros, as one fma chain from ``acc``: the non-zeros of one x component
    share one multiply by it (GEN 47)."""
    expr = acc
    for terms in _grouped([t for t in p.nz if t[3] == k], lambda t: t[1]):
        i = terms[0][1]
        expr = f"fma({_cg_sum(terms, cg, lambda t: f'y{p.in2_off + t[2]}')}, {xk}_{i}, {expr})"
    return expr


def _dbwd_a(wp: str, vp: str, hk: str, xk: str, i: int) -> str:
    """a_i = wp ggx_i + vp x_i, the double backward's per-component factor that both g_grad_out's messages
    (_fwd_group) and part 1's grad_y (_bwd_group) contract with (wp, vp: the path's w and gg_w weights; hk, xk:
    the ggx and x registers)."""
    return f"fma({wp}, {hk}_{i}, {vp} * {xk}_{i})"


def _bwd_contractions(p: _Path, I: str, xk: str, gk: str, hk: Optional[str] = None,
                      cg: Callable[[int], str] = _cg_const, w_only: bool = False, scaled: bool = False) -> str:
    """Path p's per-edge partial contractions with the receiver's grad_out (registers gk_k):
    py_j = sum_ik cg g_k x_i and px_i = sum_jk cg g_k y_j, and for the double backward (hk: the
    ggx registers, z: ggy) py_j with a_i = wp ggx_i + vp x_i (registers a<i>: the path's whole grad_y),
    px_i with ggy, qx_i with y. ``cg(q)``: the expression of CG value q. ``w_only``: px (and qx) alone,
    what the weight gradient needs. ``scaled`` (the backward): py_j with a_i = wp x_i instead of x_i. The
    backward sums the non-zeros of one (i, j) pair over k first (m_ij = sum_k cg g_k, GEN 47): each pair then costs
    two fmas, not each non-zero. The double backward keeps one product per non-zero (GEN 48: with the pairs and its
    grad_y terms chained into the edge's sums, GEN 47's, it took 1.4-1.6 % longer on the H100; with the pairs alone
    it tied, sessions 73-74)."""
    out = []
    for terms in _grouped(p.nz, (lambda t: t) if hk is not None else (lambda t: (t[1], t[2]))):
        _, i, j, _ = terms[0]
        c = p.in2_off + j
        py = "" if w_only else (f"py{j} = fma(cg, {xk}_{i}, py{j}); " if hk is None and not scaled else
                                f"py{j} = fma(cg, a{i}, py{j}); ")
        px = (f"px{i} = fma(cg, y{c}, px{i}); " if hk is None else
              f"px{i} = fma(cg, z{c}, px{i}); qx{i} = fma(cg, y{c}, qx{i}); ")
        out.append(f"{I}{{ const T cg = {_cg_sum(terms, cg, lambda t: f'{gk}_{t[3]}')}; {py}{px}}}\n")
    return "".join(out)


def _bwd_weight_grad(p: _Path, xk: str, hk: Optional[str] = None, acc: str = "T(0)") -> str:
    """The path's weight gradient from the contractions above, not per non-zero: sum_ijk cg g_k x_i
    y_j = sum_i x_i px_i (double backward: ggx with y plus x with ggy = sum_i ggx_i qx_i + x_i px_i), as one fma
    chain from ``acc`` (the weight's running sum: no add of its own, GEN 47)."""
    sw = acc
    for i in sorted({i for (_, i, _, _) in p.nz}):
        sw = f"fma({hk}_{i}, qx{i}, fma({xk}_{i}, px{i}, {sw}))" if hk else f"fma({xk}_{i}, px{i}, {sw})"
    return sw


def _line_offsets(offsets, elem: int) -> List[int]:
    """Element offsets within a row touching every 128-byte line that holds one of ``offsets``: each
    contiguous run from its first element every 128 bytes, plus its last."""
    pts: List[int] = []
    for a, b in _intervals(offsets):
        run = list(range(a, b, 128 // elem))
        pts += run + ([b - 1] if run[-1] != b - 1 else [])
    return pts


def _prefetch_lines(group: List[_Path], elem: int) -> List[int]:
    """The lines of a weight row that hold weights of the group's paths (``_line_offsets``)."""
    return _line_offsets((p.w_off + u * p.w_stride for p in group for u in range(p.mul)), elem)


def _w_index(row: str, e: str) -> str:
    """Row index of edge ``e`` in ``row``: the weights through the row map, the rest per edge."""
    return f"w_index(w_row, {e})" if row == "w" else f"({e})"


def _line_loop(I: str, name: str, offsets: Callable[[int], List[int]], mul: int, body: List[str],
               var: str = "pf") -> Tuple[str, str]:
    """(tables, device code): a loop in which thread u of a slot visits the line offsets ``offsets(elem)``
    (elements, per element size 4 and 8; a constant table ``name``_4 / _8 each) u, u + mul, ..; the
    ``body`` lines use the offset ``off``."""
    tables, n = "", {}
    for elem in (4, 8):
        lines = offsets(elem)
        n[elem] = len(lines)
        tables += f"__device__ const int {name}_{elem}[{len(lines)}] = {{{', '.join(map(str, lines))}}};\n"
    code = (f"{I}const int* {var} = sizeof(T) == 4 ? {name}_4 : {name}_8;\n"
            f"{I}for (int t = u; t < (sizeof(T) == 4 ? {n[4]} : {n[8]}); t += {mul}) {{\n"
            f"{I}  const int off = __ldg({var} + t);\n"
            + "".join(f"{I}  {b}\n" for b in body) + f"{I}}}\n")
    return tables, code


def _prefetch_next(I: str, group: List[_Path], name: str, nxt: str, cond: str, dbwd: bool,
                   lanes: Optional[int] = None) -> Tuple[str, str]:
    """(tables, device code): where ``cond`` holds, the threads of a slot ask L2 for the lines of the
    group's weights (and ggw) in the rows of edge ``nxt``, one line each, so that they are L2 hits
    rather than DRAM accesses when that edge is processed; thread u of the slot takes lines u, u + mul,
    ... (``lanes``: threads per slot where not mul). Emitted first in the edge iteration, where nothing else is
    live yet."""
    rows = ["w"] + (["ggw"] if dbwd else [])
    tables, loop = _line_loop(I + "  ", name, lambda elem: _prefetch_lines(group, elem), lanes or group[0].mul,
                              [f"prefetch_l2({r} + {_w_index(r, nxt)} * d.w + off);" for r in rows])
    return tables, f"{I}if ({cond}) {{  // the next edge's weight lines into L2\n" + loop + f"{I}}}\n"


def _prefetch_next_xy(I: str, group: List[_Path], name: str, nxt: str, cond: str, dbwd: bool,
                      lanes: Optional[int] = None) -> Tuple[str, str]:
    """(tables, device code) of PF_FWD_XY / PF_PART1_XY: where ``cond`` holds, the threads of a slot ask L2
    for the lines of edge ``nxt``'s y row (and ggy row) that the group reads, and L1 for those of its
    sender's x row (and ggx row), thread u taking lines u, u + mul (or ``lanes``), .. (the sender index is loaded
    for it)."""
    mul = lanes or group[0].mul
    y_cols = sorted({p.in2_off + j for p in group for (_, _, j, _) in p.nz})
    ty, ly = _line_loop(I + "  ", name + "y", lambda elem: _line_offsets(y_cols, elem), mul,
                        [f"prefetch_l2({r} + ({nxt}) * d.in2 + off);" for r in ["y"] + (["ggy"] if dbwd else [])],
                        var="py")
    tx, lx = _line_loop(I + "  ", name + "x",
                        lambda elem: _line_offsets((p.in1_off + q for p in group for q in range(p.mul * p.d1)), elem),
                        mul, [f"prefetch_l1({r} + snext * d.in1 + off);" for r in ["x"] + (["ggx"] if dbwd else [])],
                        var="px")
    code = (f"{I}if ({cond}) {{  // the next edge's y lines into L2, the lines of its sender's x row into L1\n"
            + ly + f"{I}  const int64_t snext = __ldg(src + {nxt});\n" + lx + f"{I}}}\n")
    return ty + tx, code


def _w_load(ptr: str, evict: bool) -> str:
    """A load of a per-edge weight (w or ggw): ``ld_stream`` with Tuning.w_evict, else ``__ldg``."""
    return f"ld_stream({ptr}, stream_policy())" if evict else f"__ldg({ptr})"


def _ggw_load(ptr: str, evict: bool) -> str:
    """The double backward's load of a ggw element in part 1, whose grad_w may be written into ggw's memory
    (TPSpec::dbwd_in_gg_w): a coherent load ordered before the kernel's later stores (``ld_stream_rw``, a plain
    load without Tuning.w_evict), never the read-only path."""
    return f"ld_stream_rw({ptr}, stream_policy())" if evict else f"*({ptr})"


class _TmaRows(NamedTuple):
    """Tuning.fwd_tma: what one edge of a forward pass copies into its stage of shared memory, in elements: runs
    (start, length) of the weight row and of the sender's x row, the y columns [y_lo, y_hi), each run a multiple of
    FWD_TMA_VEC elements on such a boundary; a stage holds the weight runs, then the x runs, then the y columns."""
    w_runs: Tuple[Tuple[int, int], ...]
    x_runs: Tuple[Tuple[int, int], ...]
    y_lo: int
    y_hi: int

    @property
    def w_len(self) -> int:
        return sum(n for _, n in self.w_runs)

    @property
    def x_len(self) -> int:
        return sum(n for _, n in self.x_runs)

    @property
    def stage(self) -> int:
        return self.w_len + self.x_len + self.y_hi - self.y_lo

    def w_pos(self, off: int) -> int:
        """Stage position of weight-row element ``off``."""
        return _run_pos(self.w_runs, off)

    def x_pos(self, off: int) -> int:
        return self.w_len + _run_pos(self.x_runs, off)


def _run_pos(runs, off: int) -> int:
    pos = 0
    for a, n in runs:
        if a <= off < a + n:
            return pos + off - a
        pos += n
    raise KeyError(off)


def _tma_rows(group: List[_Path]) -> Optional[_TmaRows]:
    """The rows a forward pass copies per edge (_TmaRows), or None where a run would not start and end on
    FWD_TMA_VEC elements (or a path's weights are strided)."""
    v = FWD_TMA_VEC
    if any(p.w_stride != 1 for p in group):
        return None
    w_runs = _intervals(q for p in group for q in range(p.w_off, p.w_off + p.mul))
    x_runs = _intervals(q for p in group for q in range(p.in1_off, p.in1_off + p.mul * p.d1))
    if any(a % v or n % v for a, n in ((a, b - a) for a, b in w_runs + x_runs)):
        return None
    y_cols = [p.in2_off + j for p in group for (_, _, j, _) in p.nz]
    y_lo, y_hi = min(y_cols) // v * v, -(-(max(y_cols) + 1) // v) * v
    return _TmaRows(tuple((a, b - a) for a, b in w_runs), tuple((a, b - a) for a, b in x_runs), y_lo, y_hi)


def _tma_fill(I: str, rows: _TmaRows, gi: int, evict: bool) -> str:
    """Device code: lambda fill{gi}(stage, e, sidx) of the slot's producer thread, the bulk copies of edge e's rows
    into that stage, completing on its full barrier (the y columns only where ``ystage``); ``evict`` (Tuning.w_evict):
    the weight rows copied under the L2 evict-first policy."""
    s = [f"{I}auto fill{gi} = [&](int st, int64_t e, int64_t sidx) {{\n",
         f"{I}  T* b = sbase + st * {rows.stage};\n",
         f"{I}  const T* wr = w + w_index(w_row, e) * d.w;\n",
         f"{I}  const T* xr = x + sidx * d.in1;\n",
         f"{I}  fence_proxy_async();  // the stage's earlier reads before the copies' writes\n",
         f"{I}  mbar_expect(&full[st], uint32_t(sizeof(T)) * ({rows.w_len + rows.x_len}"
         f" + (ystage ? {rows.y_hi - rows.y_lo} : 0)));\n"]
    copy, policy = ("bulk_copy_hint", ", wpol") if evict else ("bulk_copy", "")
    if evict:
        s.append(f"{I}  const uint64_t wpol = stream_policy();\n")
    for a, n in rows.w_runs:
        s.append(f"{I}  {copy}(b + {rows.w_pos(a)}, wr + {a}, {n} * sizeof(T), &full[st]{policy});\n")
    for a, n in rows.x_runs:
        s.append(f"{I}  bulk_copy(b + {rows.x_pos(a)}, xr + {a}, {n} * sizeof(T), &full[st]);\n")
    s.append(f"{I}  if (ystage) bulk_copy(b + {rows.w_len + rows.x_len}, y + e * d.in2 + {rows.y_lo}, "
             f"{rows.y_hi - rows.y_lo} * sizeof(T), &full[st]);\n")
    s.append(f"{I}}};\n")
    return "".join(s)


def _fwd_group(gi: int, group: List[_Path], I: str, dbwd: bool, threads: int,
               prefetch: bool = False, prefetch_xy: bool = False, cpl: int = 1,
               evict: bool = False, smem: int = FWD_SLOT_SMEM, tma: Optional[_TmaRows] = None,
               tag: str = "", elem: int = 8) -> Tuple[str, str]:
    """One pass accumulating a group of output blocks (one multiplicity) over the receiver's edges;
    thread (slot, u) sums channel u over the edges e_begin + slot, + S, ..; the slots' partial
    sums are then added in slot order (deterministic). dbwd: the message is
    w * TP(ggx, y) + w * TP(x, ggy) + ggw * TP(x, y) (g_grad_out of the double backward).
    ``cpl`` (``_fwd_cpl``): channels per thread, u, u + L, ..: each product of a CG value and a y (the edge's,
    the same in every lane) then serves them all. ``evict``: the weights loaded by ``_w_load`` (Tuning.w_evict).
    ``tma`` (the forward under Tuning.fwd_tma): each edge's rows come from the slot's stages in shared memory
    (kTmaStages of them, filled by the slot's thread u = 0 with ``_tma_fill``, full / empty mbarriers per stage).
    ``tag``: in the names of the constant tables (one forward holding a pass plan per dtype); ``elem``: the bytes of
    a partial sum that ``_fwd_slots`` counts. Returns (device code, constant tables)."""
    mul = group[0].mul
    out_keys = []
    for p in group:
        if p.out_key not in out_keys:
            out_keys.append(p.out_key)
    comps = sum(k[2] for k in out_keys)
    M, L, S = _fwd_slots(mul, comps, threads, cpl, smem, elem)
    # per channel copy c: the suffix of its registers and the channel index; cpl 1 keeps the names it always had
    copies = [("", "u")] if cpl == 1 else [(f"c{c}", f"(u + {c * L})") for c in range(cpl)]
    y_cols = sorted({p.in2_off + j for p in group for (_, _, j, _) in p.nz})
    accs = [f"{_bname('acc', key)}{cs}_{k}" for cs, _ in copies for key in out_keys for k in range(key[2])]
    s = [f"{I}{{  // group {gi}: output blocks at " + ", ".join(str(k[0]) for k in out_keys)
         + f"; {M} channels x {S} edge slot(s)" + (f", {cpl} channels per thread" if cpl > 1 else "")
         + (", rows by bulk copies" if tma else "") + "\n"]
    I2 = I + "  "
    s.append(f"{I2}const int slot = threadIdx.x / {L}, u = threadIdx.x % {L};\n")
    for cs, _ in copies:
        for key in out_keys:
            s.append(f"{I2}T " + ", ".join(f"{_bname('acc', key)}{cs}_{k} = T(0)" for k in range(key[2])) + ";\n")
    lanes = mul if cpl == 1 else L  # the threads of a slot that hold channels
    I3 = I2 + "  "
    tables = ""
    if tma:
        warps = -(-lanes // 32)  # the slot's warps with channels: each arrives on a stage's empty barrier
        s.append(f"{I2}if (threadIdx.x < {S} * kTmaStages) {{  // this pass's barriers: a full and an empty one per "
                 f"stage and slot\n")
        if gi > 0:
            s.append(f"{I2}  mbar_inval(&s_full[threadIdx.x]);\n{I2}  mbar_inval(&s_empty[threadIdx.x]);\n")
        s.append(f"{I2}  mbar_init(&s_full[threadIdx.x], 1);\n{I2}  mbar_init(&s_empty[threadIdx.x], {warps});\n"
                 f"{I2}}}\n{I2}mbar_init_fence();\n{I2}__syncthreads();\n")
        s.append(f"{I2}T* sbase = s_tma + slot * kTmaStages * {tma.stage};\n")
        s.append(f"{I2}uint64_t* full = s_full + slot * kTmaStages;\n"
                 f"{I2}uint64_t* empty = s_empty + slot * kTmaStages;\n")
        s.append(_tma_fill(I2, tma, gi, evict))
        s.append(f"{I2}const bool producer = slot < {S} && u == 0;\n")
        s.append(f"{I2}if (producer)\n{I2}  for (int st = 0; st < kTmaStages && e_begin + slot + st * {S} < e_end; "
                 f"++st)\n{I2}    fill{gi}(st, e_begin + slot + st * {S}, __ldg(src + e_begin + slot + st * {S}));\n")
        s.append(f"{I2}const int wl = {lanes} - (u & ~31);  // the lanes of this warp with channels\n"
                 f"{I2}const unsigned wmask = wl >= 32 ? 0xffffffffu : wl > 0 ? (1u << wl) - 1u : 0u;\n")
        s.append(f"{I2}if (slot < {S} && u < {lanes})\n")
        s.append(f"{I2}for (int64_t e = e_begin + slot, j = 0; e < e_end; e += {S}, ++j) {{\n")
        s.append(f"{I3}const int st = int(j % kTmaStages);\n"
                 f"{I3}const uint32_t parity = uint32_t(j / kTmaStages) & 1u;\n")
        s.append(f"{I3}const int64_t en = e + kTmaStages * {S};\n"
                 f"{I3}const int64_t snext = producer && en < e_end ? __ldg(src + en) : 0;\n")
        s.append(f"{I3}mbar_wait(&full[st], parity);\n")
        s.append(f"{I3}const T* sb = sbase + st * {tma.stage};\n")
    else:
        s.append(f"{I2}if (slot < {S} && u < {lanes})\n")
        s.append(f"{I2}for (int64_t e = e_begin + slot; e < e_end; e += {S}) {{\n")
    if prefetch and not tma:
        tables, code = _prefetch_next(I3, group, f"kPf{'D' if dbwd else 'F'}{tag}{gi}", f"e + {S}", f"e + {S} < e_end",
                                      dbwd, lanes)
        s.append(code)
    if prefetch_xy and not tma:
        t, code = _prefetch_next_xy(I3, group, f"kPx{'D' if dbwd else 'F'}{tag}{gi}", f"e + {S}", f"e + {S} < e_end", dbwd,
                                    lanes)
        tables += t
        s.append(code)
    if tma:
        s.append(f"{I3}T " + ", ".join(f"y{c}" for c in y_cols) + ";\n")
        s.append(f"{I3}if (ystage) {{\n" + "".join(
            f"{I3}  y{c} = sb[{tma.w_len + tma.x_len + c - tma.y_lo}];\n" for c in y_cols) + f"{I3}}} else {{\n"
            + f"{I3}  const T* yr = y + e * d.in2;\n"
            + "".join(f"{I3}  y{c} = __ldg(yr + {c});\n" for c in y_cols) + f"{I3}}}\n")
    else:
        s.append(f"{I3}const int64_t sidx = __ldg(src + e);\n")
        s.append(f"{I3}const T* xr = x + sidx * d.in1;\n")
        s.append(f"{I3}const T* yr = y + e * d.in2;\n")
        s.append(f"{I3}const T* wr = w + w_index(w_row, e) * d.w;\n")
        if dbwd:
            s.append(f"{I3}const T* hr = ggx + sidx * d.in1;\n")
            s.append(f"{I3}const T* zr = ggy + e * d.in2;\n")
            s.append(f"{I3}const T* vr = ggw + e * d.w;\n")
        for c in y_cols:
            s.append(f"{I3}const T y{c} = __ldg(yr + {c});\n")
            if dbwd:
                s.append(f"{I3}const T z{c} = __ldg(zr + {c});\n")
    xs = {}
    for p in group:
        for (_, i, _, _) in p.nz:
            xs.setdefault(p.in1_key, set()).add(i)
    for cs, ch in copies:
        for key, iset in xs.items():
            for i in sorted(iset):
                xsrc = (f"sb[{tma.x_pos(key[0])} + {ch} * {key[2]} + {i}]" if tma
                        else f"__ldg(xr + {key[0]} + {ch} * {key[2]} + {i})")
                s.append(f"{I3}const T {_bname('x', key)}{cs}_{i} = {xsrc};\n")
                if dbwd:
                    s.append(f"{I3}const T {_bname('h', key)}{cs}_{i} = __ldg(hr + {key[0]} + {ch} * {key[2]} + {i});\n")
    for p in group:
        s.append(f"{I3}{{  // path {p.idx}: l {p.l1} x {p.l2} -> {p.l3}, {len(p.nz)} non-zeros\n")
        I5 = I3 + "  "
        for cs, ch in copies:
            wsrc = (f"sb[{tma.w_pos(p.w_off)} + {ch}]" if tma
                    else _w_load(f'wr + {p.w_off} + {ch} * {p.w_stride}', evict))
            s.append(f"{I5}const T wp{cs} = {wsrc};\n")
            if dbwd:
                s.append(f"{I5}const T vp{cs} = {_w_load(f'vr + {p.w_off} + {ch} * {p.w_stride}', evict)};\n")
        ks = sorted({k for (_, _, _, k) in p.nz})
        iset = sorted({i for (_, i, _, _) in p.nz})
        for cs, _ in copies:
            xk, hk = _bname('x', p.in1_key) + cs, _bname('h', p.in1_key) + cs
            acc = _bname('acc', p.out_key) + cs
            if dbwd:
                # wp TP(ggx, y) + wp TP(x, ggy) + vp TP(x, y) = sum cg (y_j a_i + z_j b_i), a = wp ggx + vp x, b = wp x:
                # three operations per non-zero (five with the three products apart)
                for i in iset:
                    s.append(f"{I5}const T a{cs}_{i} = {_dbwd_a(f'wp{cs}', f'vp{cs}', hk, xk, i)}, "
                             f"b{cs}_{i} = wp{cs} * {xk}_{i};\n")
            # more output than x components: x times the weight first, the messages then straight into the
            # accumulators (GEN 47: one multiply per i instead of one per k)
            scaled = not dbwd and len(ks) > len(iset)
            if scaled:
                s.append(f"{I5}const T " + ", ".join(f"b{cs}_{i} = wp{cs} * {xk}_{i}" for i in iset) + ";\n")
            for k in ks:
                if scaled:
                    s.append(f"{I5}{acc}_{k} = {_fwd_component(p, k, f'b{cs}', acc=f'{acc}_{k}')};\n")
                    continue
                if not dbwd:
                    s.append(f"{I5}{acc}_{k} = fma(wp{cs}, {_fwd_component(p, k, xk)}, {acc}_{k});\n")
                    continue
                ew = f"{acc}_{k}"
                for (q, i, j, kk) in p.nz:
                    if kk == k:
                        c = p.in2_off + j
                        ew = f"fma({_cg_const(q)}, fma(y{c}, a{cs}_{i}, z{c} * b{cs}_{i}), {ew})"
                s.append(f"{I5}{acc}_{k} = {ew};\n")
        s.append(f"{I3}}}\n")
    if tma:
        s.append(f"{I3}__syncwarp(wmask);  // the warp has read stage st\n"
                 f"{I3}if ((u & 31) == 0) mbar_arrive(&empty[st]);\n"
                 f"{I3}if (producer && en < e_end) {{  // the stage takes edge en once every warp has read it\n"
                 f"{I3}  mbar_wait(&empty[st], parity);\n"
                 f"{I3}  fill{gi}(st, en, snext);\n{I3}}}\n")
    s.append(f"{I2}}}\n")
    if S > 1:
        s.append(f"{I2}if (slot > 0 && slot < {S}) {{\n")
        for c, a in enumerate(accs):
            s.append(f"{I2}  s_acc[((slot - 1) * {len(accs)} + {c}) * {L} + u] = {a};\n")
        s.append(f"{I2}}}\n{I2}__syncthreads();\n")
        s.append(f"{I2}if (slot == 0) {{\n")
        s.append(f"{I2}  for (int r = 0; r < {S - 1}; ++r) {{\n")
        for c, a in enumerate(accs):
            s.append(f"{I2}    {a} += s_acc[(r * {len(accs)} + {c}) * {L} + u];\n")
        s.append(f"{I2}  }}\n{I2}}}\n")
        s.append(f"{I2}__syncthreads();  // s_acc is reused by the next group\n")
    elif tma:
        s.append(f"{I2}__syncthreads();  // the stages and barriers are reused by the next group\n")
    s.append(f"{I2}if (slot == 0 && u < {lanes}) {{\n")
    for cs, ch in copies:
        for key in out_keys:
            for k in range(key[2]):
                o = f"orow[{key[0]} + {ch} * {key[2]} + {k}]"
                s.append(f"{I2}  {o} = d.accumulate ? {o} + {_bname('acc', key)}{cs}_{k} : {_bname('acc', key)}{cs}_{k};\n")
    s.append(f"{I2}}}\n")
    s.append(f"{I}}}\n")
    return "".join(s), tables


def _fwd_passes(live: List[_Path], budget: int, cpl: int = 1) -> List[List[_Path]]:
    """Output blocks grouped by multiplicity, then split to at most ``budget`` accumulators per thread
    (components per channel times ``_fwd_cpl``)."""
    return [g for m, ps in _by_mul(live) for g in _out_groups(ps, budget // _fwd_cpl(m, cpl))]


def _fwd_acc64(live: List[_Path], tune: Tuning) -> int:
    """float64's forward budget (and float32's where Tuning.fwd_acc32 gives it none of its own): Tuning.fwd_acc_narrow
    where no multiplicity exceeds FWD_NARROW_MUL (all passes on several edge slots), else Tuning.fwd_acc."""
    if tune.fwd_acc_narrow and max((p.mul for p in live), default=0) <= FWD_NARROW_MUL:
        return tune.fwd_acc_narrow
    return tune.fwd_acc


def _fwd_one_slot(mul: int, block: int, cpl: int) -> bool:
    """A forward pass of multiplicity ``mul`` has the block of ``block`` threads to itself (one edge slot)."""
    return 2 * _fwd_slots(mul, 1, block, _fwd_cpl(mul, cpl))[1] > block


def fwd_plans(live: List[_Path], threads: int, tune: Tuning) -> List[List[List[_Path]]]:
    """The forward's passes: [the plan of both dtypes], or [float32's, float64's] where Tuning.fwd_acc32 gives
    float32 a budget other than float64's (``_fwd_acc64``): for every pass under Tuning.fwd_slots32 (float32 planned
    in its own sizes: 4-byte accumulators and partial sums), else for its one-slot passes only (``_fwd_one_slot``: 128
    channels in blocks of 128). Why: mace_large's float32 forward in one such pass (71 components) took 0.89x the
    time of two, where its float64 one spills (sessions 56 and 58, H200); sevennet_l3i5's 32-channel passes under the
    same budget, their slots counted at 8 bytes (three or two instead of four), took 1.13x (session 58)."""
    cpl = tune.fwd_cpl
    acc64 = _fwd_acc64(live, tune)
    base = _fwd_passes(live, acc64, cpl)
    if not tune.fwd_acc32 or tune.fwd_acc32 == acc64:
        return [base]
    if tune.fwd_slots32:
        f32 = _fwd_passes(live, tune.fwd_acc32, cpl)
    else:
        block = fwd_block(live, threads, tune)[0]
        f32 = [g for m, ps in _by_mul(live)
               for g in _out_groups(ps, (tune.fwd_acc32 if _fwd_one_slot(m, block, cpl) else acc64)
                                    // _fwd_cpl(m, cpl))]
    return [base] if f32 == base else [f32, base]


def fwd_block(live: List[_Path], threads: int, tune: Tuning) -> Tuple[int, int]:
    """(threads per block, shared-memory bytes for its edge slots' partial sums: Tuning.fwd_slot_smem) of the forward
    kernel: the other kernels' ``threads``, times x = Tuning.fwd_min_block // threads where that is more than one (more
    edge slots per receiver: FWD_MIN_BLOCK), and no more threads than the passes' slots use (under Tuning.fwd_slots32
    float32's passes with their slots counted at 4 bytes, besides float64's)."""
    x = max(1, tune.fwd_min_block // threads)
    if x == 1:
        return threads, tune.fwd_slot_smem
    specs = [(_fwd_passes(live, _fwd_acc64(live, tune), tune.fwd_cpl), 8)]
    if tune.fwd_slots32:
        plans = fwd_plans(live, threads, tune)
        specs = [(plans[0], 4), (plans[-1], 8)]
    used = 0
    for groups, elem in specs:
        for g in groups:
            _, L, S = _fwd_slots(g[0].mul, _out_width(g), threads * x, _fwd_cpl(g[0].mul, tune.fwd_cpl),
                                 tune.fwd_slot_smem, elem)
            used = max(used, L * S)
    return max(threads, (used + 31) // 32 * 32), tune.fwd_slot_smem


def _tma_stages(rows: List[_TmaRows]) -> Tuple[int, int, int]:
    """Tuning.fwd_tma: (elements of shared memory per stage, the stages in float32, in float64): as many as fit
    FWD_TMA_SMEM, at most FWD_TMA_STAGES."""
    per_stage = max(r.stage for r in rows)
    return (per_stage,) + tuple(min(FWD_TMA_STAGES, FWD_TMA_SMEM // (per_stage * z)) for z in (4, 8))


def _gen_fwd(live: List[_Path], dbwd: bool, threads: int, tune: Tuning,
             block: Optional[Tuple[int, int]] = None, tma: bool = False) -> str:
    """The forward kernel, or with ``dbwd`` the double backward's g_grad_out kernel; ``block``: (threads, slot
    shared memory) of ``fwd_block`` (default: the other kernels' block). ``tma``: the forward's variant under
    Tuning.fwd_tma, ``fwd_kernel_tma`` (its edge rows by bulk copies; '' where a pass has several edge slots, a
    pass's rows do not allow the copies or no two stages fit), with ``fwd_tma_ok``, the launcher's test of the
    device and of the call's pointers and row lengths. Where ``fwd_plans`` differ by dtype, the forward holds
    both, float32's under ``if constexpr``."""
    assert not (tma and dbwd), "the bulk-copy variant is the forward's alone"
    cpl = 1 if dbwd else tune.fwd_cpl  # (g_grad_out of the double backward: one channel per thread)
    plans = [_fwd_passes(live, tune.dbwd_acc, cpl)] if dbwd else fwd_plans(live, threads, tune)
    block, slot_smem = block or (threads, DFWD_SLOT_SMEM)

    def slots(groups, elem):  # (S, partial-sum elements of slots 1..S-1) per pass
        out = []
        for g in groups:
            M, _, S = _fwd_slots(g[0].mul, _out_width(g), block, _fwd_cpl(g[0].mul, cpl), slot_smem, elem)
            out.append((S, (S - 1) * _out_width(g) * M))
        return out

    # each dtype's (passes, bytes of a partial sum): one entry where both run the same code
    specs = [(groups, 8) for groups in plans]
    if not dbwd and tune.fwd_slots32 and slots(plans[0], 4) != slots(plans[0], 8):
        specs = [(plans[0], 4), (plans[-1], 8)]
    rows = [[_tma_rows(g) for g in groups] if tma else [None] * len(groups) for groups, _ in specs]
    if tma and any(None in r for r in rows):
        return ""
    reds = [max([r for _, r in slots(groups, elem)], default=0) for groups, elem in specs]
    red = max(reds)
    if tma:
        if red:  # a pass with several edge slots (the note at FWD_TMA_STAGES)
            return ""
        # (elements per stage, stages) in float32 and in float64, each from its own pass plan
        (p32, n4, _), (p64, _, n8) = _tma_stages(rows[0]), _tma_stages(rows[-1])
        if max(n4, n8) < 2:
            return ""
    bodies, tables = [], ""
    I = "  " if len(specs) == 1 else "    "
    for (groups, elem), grows, tag in zip(specs, rows, ("",) if len(specs) == 1 else ("32_", "64_")):
        parts = [_fwd_group(gi, g, I, dbwd, block, bool(tune.prefetch & PF_FWD), bool(tune.prefetch & PF_FWD_XY),
                            _fwd_cpl(g[0].mul, cpl), bool(tune.w_evict), slot_smem, r, tag, elem)
                 for gi, (g, r) in enumerate(zip(groups, grows))]
        bodies.append("".join(p[0] for p in parts))
        tables += "".join(p[1] for p in parts)
    body = bodies[0] if len(specs) == 1 else (
        f"  if constexpr (sizeof(T) == 4) {{  // float32's pass plan\n{bodies[0]}  }} else {{\n{bodies[1]}  }}\n")
    passes = (f"{len(specs[0][0])} pass(es)" if len(specs) == 1
              else f"{len(specs[0][0])} pass(es) in float32, {len(specs[1][0])} in float64,")
    size = red if len(set(reds)) == 1 else f"sizeof(T) == 4 ? {max(reds[0], 1)} : {max(reds[1], 1)}"
    smem = f"  __shared__ T s_acc[{size}];  // partial sums of edge slots 1..S-1\n" if red else ""
    name = "dfwd_kernel" if dbwd else "fwd_kernel_tma" if tma else "fwd_kernel"
    extra = ("const T* __restrict__ ggx, const T* __restrict__ ggy, const T* __restrict__ ggw, "
             if dbwd else "")
    what = "g_grad_out of the double backward" if dbwd else "Forward"
    tc = "kThreads" if block == threads else "kFwdThreads"
    decl = "" if block == threads or tma else f"constexpr int kFwdThreads = {block};  // the forward's block\n"
    head = ""
    if tma:
        bars = max(n4, n8)  # one edge slot per pass
        what = "Forward, its edge rows by bulk copies (Tuning.fwd_tma)"
        decl = (f"template <typename T>\nconstexpr int kTmaStagesOf = sizeof(T) == 4 ? {n4} : {n8};\n"
                + (f"template <typename T>\nconstexpr int kTmaStageLen = sizeof(T) == 4 ? {p32} : {p64};  // elements\n"
                   if p32 != p64 else "")
                + f"template <typename T>\nbool fwd_tma_ok(const TPTensors<T>& t, const TPDims& d) {{\n"
                f"  static int major[64] = {{}};  // compute capability per device (0: not asked yet)\n"
                f"  int dev = 0;\n  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;\n"
                f"  if (major[dev] == 0) cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev);\n"
                f"  return major[dev] >= 9 && kTmaStagesOf<T> >= 2 && aligned16(t.x) && aligned16(t.w) && "
                f"d.in1 % {FWD_TMA_VEC} == 0 && d.w % {FWD_TMA_VEC} == 0;\n}}\n")
        stage_len = "kTmaStageLen<T>" if p32 != p64 else p32
        head = (f"  constexpr int kTmaStages = kTmaStagesOf<T> < 2 ? 2 : kTmaStagesOf<T>;  // (< 2: never launched)\n"
                f"  __shared__ __align__(128) T s_tma[kTmaStagesOf<T> < 2 ? 1 : kTmaStages * {stage_len}];  // the "
                f"slots' stages\n"
                f"  __shared__ __align__(8) uint64_t s_full[{bars}];  // a stage's rows have landed\n"
                f"  __shared__ __align__(8) uint64_t s_empty[{bars}];  // a stage's rows have been read\n"
                f"  const bool ystage = d.in2 % {FWD_TMA_VEC} == 0 && aligned16(y);  // else y by loads\n")
    return tables + f"""
// {what}: block n = receiver; {passes} over its edges.
{decl}template <typename T>
__global__ void {_bounds(tune, block, fwd=not dbwd, block_const=tc)} {name}(const T* __restrict__ x, const T* __restrict__ y,
    const T* __restrict__ w, {extra}T* __restrict__ out, const int64_t* __restrict__ src,
    const int64_t* __restrict__ dst_ptr, const int64_t* __restrict__ w_row, TPDims d) {{
  const int64_t n = blockIdx.x;
  const int64_t e_begin = dst_ptr[n], e_end = dst_ptr[n + 1];
  if (d.accumulate && e_begin == e_end) return;  // the whole block, before any barrier: nothing to add
{smem}{head}  T* orow = out + n * d.out;
{body}  if (!d.accumulate)
    for (int q = threadIdx.x; q < d.out; q += {tc})
      if (!out_covered(q)) orow[q] = T(0);
}}
"""


def _bwd_groups(live: List[_Path], budget: int, merge: int = 0) -> List[List[_Path]]:
    """Backward passes: the paths of one in1 block per pass (x, grad_x and w of the block are then
    touched by one pass only), the passes of the blocks with the most elements per row first; a block
    whose grad_out components exceed ``budget`` per channel is
    split over its output blocks into near-equal parts (its grad_x rows are then accumulated).
    ``merge`` (0: off): consecutive whole blocks of one multiplicity share a pass while their grad_out
    components fit ``merge`` (one y load and one grad_y reduction per edge for all of them)."""
    in1_order: List[Tuple[int, int, int]] = []
    for p in live:
        if p.in1_key not in in1_order:
            in1_order.append(p.in1_key)
    groups: List[List[_Path]] = []
    whole: List[bool] = []
    for key in in1_order:
        ps = [p for p in live if p.in1_key == key]
        outs: List[Tuple[int, int, int]] = []
        for p in ps:
            if p.out_key not in outs:
                outs.append(p.out_key)
        parts = _parts(outs, budget)
        for part in parts:
            gp = [p for p in ps if p.out_key in part]
            if (merge and len(parts) == 1 and groups and whole[-1] and groups[-1][0].mul == gp[0].mul
                    and _out_width(groups[-1] + gp) <= merge):
                groups[-1] = groups[-1] + gp
            else:
                groups.append(gp)
                whole.append(len(parts) == 1)
    # widest rows first (stable: a split block's passes stay together): the rows of early passes can then live
    # in the weight columns of later ones (_rows_plan)
    return sorted(groups, key=lambda g: -sum(k[1] * k[2] for k in {p.in1_key for p in g}))


def _bwd_group(gi: int, group: List[_Path], threads: int, first: dict, dbwd: bool, tag: str,
               prefetch: Optional[str] = None, prefetch_xy: bool = False, rows: Optional[RowsPlan] = None,
               w_only: bool = False, evict: bool = False, gy_smem: bool = False,
               g_smem: bool = False, live: Sequence[_Path] = (), wave: bool = False) -> Tuple[str, str]:
    """Device code of one backward pass (run where pass_lo <= gi < pass_hi), and its constant tables.
    Thread (slot, u): channel u of the edges e_begin + slot, + S, ... (S = threads / M slots of M = mul
    rounded up to a warp). ``prefetch``: None, or the compile-time condition (on T) under which the next
    edge's weights are prefetched; ``prefetch_xy``: the next edge's y and x lines too (PF_PART1_XY).
    ``rows``: where the grad_x rows go with d.rows_in_gw (deferred paths' weight gradients are then not
    written); ``w_only``: the weight gradients alone (the deferred paths' kernel); ``evict``: as _fwd_group;
    ``gy_smem``: grad_y summed over each warp's lanes by warp_sum_smem (the kernel declares s_gy) instead of
    warp_butterfly; ``g_smem`` (this kernel's Tuning.g_smem bit): the pass's grad_out components in the kernel's s_g,
    [component][channel], each path reading its own inside the edge loop (lds_each), not all of them in registers
    across it; ``live``: every path of the plan (the first pass zeroes the columns of grad_w and of the work rows
    that none of them writes); ``wave``: the edges from the rotated start ``rot`` (Tuning.wave)."""
    mul = group[0].mul
    M = (mul + 31) // 32 * 32
    S = threads // M
    WPS = M // 32
    y_cols = sorted({p.in2_off + j for p in group for (_, _, j, _) in p.nz})
    V = 1
    while V < len(y_cols):
        V *= 2
    slot = {c: n for n, c in enumerate(y_cols)}
    gy_first = first.setdefault("gy", gi) == gi
    G = f"{tag}{gi}"
    if WPS == 1:
        cols = ", ".join(str(y_cols[v]) if v < len(y_cols) else "-1" for v in range(V))
        tables = f"__constant__ int kColOf{G}[{V}] = {{{cols}}};\n"
        if gy_first:
            tables += _covered_fn(f"gy_cols{G}", y_cols)
    else:
        slots = ", ".join(str(slot.get(c, -1)) for c in range(max(y_cols) + 1))
        tables = f"__constant__ int kSlotOf{G}[{max(y_cols) + 1}] = {{{slots}}};\n"
    I = "  "
    label = "deferred paths' weights, pass" if w_only else "pass"
    s = [f"{I}if (pass_lo <= {gi} && {gi} < pass_hi) {{  // {label} {gi}: paths " + ", ".join(str(p.idx) for p in group)
         + f"; {M} channels x {S} edge slot(s)\n"]
    I1 = I + "  "
    s.append(f"{I1}const int slot = threadIdx.x / {M}, u = threadIdx.x % {M};\n")
    if not g_smem:  # (which threads load grad_out into registers)
        s.append(f"{I1}const bool chan = slot < {S} && u < {mul};\n")
    out_keys = []
    for p in group:
        if p.out_key not in out_keys:
            out_keys.append(p.out_key)
    g_row = {}  # g_smem: (output block, component) -> its row of s_g
    for key in out_keys:
        if g_smem:
            base = len(g_row)
            g_row.update({(key, k): base + k for k in range(key[2])})
            s.append(f"{I1}for (int t = threadIdx.x; t < {mul * key[2]}; t += {threads})  // block at {key[0]}\n"
                     f"{I1}  s_g[({base} + t % {key[2]}) * {M} + t / {key[2]}] = __ldg(grow + {key[0]} + t);\n")
            continue
        for k in range(key[2]):
            s.append(f"{I1}T {_bname('g', key)}_{k} = chan ? __ldg(grow + {key[0]} + u * {key[2]} + {k}) : T(0);\n")
    if g_smem:
        s.append(f"{I1}__syncthreads();  // s_g holds the pass's grad_out\n")
    if WPS == 1:
        s.append(f"{I1}for (int64_t e0 = e_begin; e0 < e_end; e0 += {S}) {{\n")
    else:
        s.append(f"{I1}int it = 0;\n")
        s.append(f"{I1}for (int64_t e0 = e_begin; e0 < e_end; e0 += {S}, ++it) {{\n")
    I2 = I1 + "  "
    if wave:  # (Tuning.wave) position pos of the receiver's edge list, edge e
        s.append(f"{I2}const int64_t pos = e0 + slot, e = wave_edge(pos, rot, e_begin, e_end);\n")
    else:
        s.append(f"{I2}const int64_t e = e0 + slot;\n")
    pos = "pos" if wave else "e"
    nxt = f"wave_edge(pos + {S}, rot, e_begin, e_end)" if wave else f"e + {S}"
    s.append(f"{I2}const bool act = slot < {S} && {pos} < e_end;  // uniform over each warp\n")
    if prefetch:
        pf_tables, code = _prefetch_next(I2, group, f"kPf{G}", nxt,
                                         f"{prefetch} && act && u < {mul} && {pos} + {S} < e_end", dbwd)
        tables += pf_tables
        s.append(code)
    if prefetch_xy:
        pf_tables, code = _prefetch_next_xy(I2, group, f"kPx{G}", nxt, f"act && u < {mul} && {pos} + {S} < e_end",
                                            dbwd)
        tables += pf_tables
        s.append(code)
    if not w_only:
        s.append(f"{I2}T gy[{V}];  // this channel's grad_y partials, slot = used y column\n")
        s.append(f"{I2}#pragma unroll\n{I2}for (int v = 0; v < {V}; ++v) gy[v] = T(0);\n")
    s.append(f"{I2}if (act) {{\n")
    I3 = I2 + "  "
    s.append(f"{I3}const T* yr = y + e * d.in2;\n")
    if dbwd:
        s.append(f"{I3}const T* zr = ggy + e * d.in2;\n")
    for c in y_cols:
        s.append(f"{I3}const T y{c} = __ldg(yr + {c});\n")
        if dbwd:
            s.append(f"{I3}const T z{c} = __ldg(zr + {c});\n")
    s.append(f"{I3}if (u < {mul}) {{\n")
    I4 = I3 + "  "
    if not g_smem:
        gregs = [f"{_bname('g', key)}_{k}" for key in out_keys for k in range(key[2])]
        s.append(f"{I4}per_iteration({', '.join(gregs)});  // cg * g products stay in the loop\n")
    s.append(f"{I4}const int64_t sidx = __ldg(src + e);\n")
    s.append(f"{I4}const T* xr = x + sidx * d.in1;\n")
    if not w_only:
        s.append(f"{I4}const T* wr = w + w_index(w_row, e) * d.w;\n")
    if dbwd:
        s.append(f"{I4}const T* hr = ggx + sidx * d.in1;\n")
        if not w_only:
            s.append(f"{I4}const T* vr = ggw + e * d.w;\n")
    in1_keys = list(dict.fromkeys(p.in1_key for p in group))
    for key in in1_keys:
        xk, hk, gxk = _bname('x', key), _bname('h', key), _bname('gx', key)
        for i in sorted({i for p in group if p.in1_key == key for (_, i, _, _) in p.nz}):
            s.append(f"{I4}const T {xk}_{i} = __ldg(xr + {key[0]} + u * {key[2]} + {i});\n")
            if dbwd:
                s.append(f"{I4}const T {hk}_{i} = __ldg(hr + {key[0]} + u * {key[2]} + {i});\n")
        if not w_only:
            s.append(f"{I4}T " + ", ".join(f"{gxk}_{i} = T(0)" for i in range(key[2])) + ";\n")
    w_keys = []
    for p in group:
        if p.w_key not in w_keys:
            w_keys.append(p.w_key)
    for wk in w_keys:
        s.append(f"{I4}T sw{wk[0]} = T(0);\n")
    for p in group:
        s.append(f"{I4}{{  // path {p.idx}: l {p.l1} x {p.l2} -> {p.l3}, {len(p.nz)} non-zeros\n")
        I5 = I4 + "  "
        if not w_only:
            s.append(f"{I5}const T wp = {_w_load(f'wr + {p.w_off} + u * {p.w_stride}', evict)};\n")
            if dbwd:
                s.append(f"{I5}const T vp = {_ggw_load(f'vr + {p.w_off} + u * {p.w_stride}', evict)};\n")
        js = sorted({j for (_, _, j, _) in p.nz})
        iset = sorted({i for (_, i, _, _) in p.nz})
        gk = _bname('g', p.out_key)
        if g_smem:
            s.append(f"{I5}const T " + ", ".join(f"{gk}_{k} = lds_each(&s_g[{g_row[p.out_key, k]} * {M} + u])"
                                                for k in range(p.out_key[2])) + ";\n")
        xk, hk, gxk = _bname('x', p.in1_key), _bname('h', p.in1_key), _bname('gx', p.in1_key)
        # the backward multiplies x by the path's weight first where the path has more y than x components (GEN 47:
        # one multiply per i instead of one per j), the path's grad_y terms then straight into the edge's sums; the
        # double backward sums each path's apart (chained, its paths' sums become one dependency chain: GEN 48)
        scaled = not dbwd and not w_only and len(js) > len(iset)
        if scaled:
            s.append(f"{I5}const T " + ", ".join(f"a{i} = wp * {xk}_{i}" for i in iset) + ";\n")
            s.append(f"{I5}T " + ", ".join(f"&py{j} = gy[{slot[p.in2_off + j]}]" for j in js) + ";\n")
        elif not w_only:
            s.append(f"{I5}T " + ", ".join(f"py{j} = T(0)" for j in js) + ";\n")
        s.append(f"{I5}T " + ", ".join(f"px{i} = T(0)" for i in iset) + ";\n")
        if dbwd:
            if not w_only:  # grad_y's two terms (wp with ggx, vp with x) as one: one fma per non-zero less
                s.append(f"{I5}const T " + ", ".join(f"a{i} = {_dbwd_a('wp', 'vp', hk, xk, i)}" for i in iset)
                         + ";\n")
            s.append(f"{I5}T " + ", ".join(f"qx{i} = T(0)" for i in iset) + ";\n")
        s.append(_bwd_contractions(p, I5, xk, gk, hk if dbwd else None, w_only=w_only, scaled=scaled))
        if dbwd:
            s.append(f"{I5}sw{p.w_off} += {_bwd_weight_grad(p, xk, hk)};\n")
        else:
            s.append(f"{I5}sw{p.w_off} = {_bwd_weight_grad(p, xk, acc=f'sw{p.w_off}')};\n")
        if w_only:
            s.append(f"{I4}}}\n")
            continue
        for j in js if not scaled else ():
            v = slot[p.in2_off + j]
            s.append(f"{I5}gy[{v}] += py{j};\n" if dbwd else f"{I5}gy[{v}] = fma(wp, py{j}, gy[{v}]);\n")
        for i in iset:
            if dbwd:
                s.append(f"{I5}{gxk}_{i} = fma(wp, px{i}, fma(vp, qx{i}, {gxk}_{i}));\n")
            else:
                s.append(f"{I5}{gxk}_{i} = fma(wp, px{i}, {gxk}_{i});\n")
        s.append(f"{I4}}}\n")
    deferred = {p.w_key for p in rows.deferred} if rows is not None and not w_only else set()
    for wk in w_keys:
        op = "=" if first.setdefault(("w", wk), gi) == gi else "+="
        guard = "if (!d.rows_in_gw) " if wk in deferred else ""
        s.append(f"{I4}{guard}gw[e * d.w + {wk[0]} + u * {wk[2]}] {op} sw{wk[0]};\n")
    if w_only:
        s.append(f"{I3}}}\n{I2}}}\n{I1}}}\n{I}}}\n")
        return "".join(s), tables
    # grad_x: the edge's row of work (summed per sender later), with d.rows_in_gw the same row in free columns
    # of grad_w (rows), or with d.atomic_gx straight into the sender's row of grad_x (work = grad_x then,
    # zeroed by the host)
    s.append(f"{I4}if (d.atomic_gx) {{\n")
    for key in in1_keys:
        for i in range(key[2]):
            s.append(f"{I4}  atomicAdd(work + sidx * d.in1 + {key[0]} + u * {key[2]} + {i}, "
                     f"{_bname('gx', key)}_{i});\n")
    ops = {key: "=" if first.setdefault(("in1", key), gi) == gi else "+=" for key in in1_keys}
    if rows is not None:
        s.append(f"{I4}}} else if (d.rows_in_gw) {{\n")
        for key in in1_keys:
            for i in range(key[2]):
                base, stride = rows.slots[key, i]
                s.append(f"{I4}  gw[e * d.w + {base} + u * {stride}] {ops[key]} {_bname('gx', key)}_{i};\n")
    s.append(f"{I4}}} else {{\n")
    for key in in1_keys:
        for i in range(key[2]):
            s.append(f"{I4}  work[e * d.in1 + {key[0]} + u * {key[2]} + {i}] {ops[key]} {_bname('gx', key)}_{i};\n")
    s.append(f"{I4}}}\n")
    s.append(f"{I3}}}\n")
    if gi == 0:
        rows_cond = " && !d.rows_in_gw" if rows is not None else ""
        s.append(_zero_uncovered(_w_elements(live), "u", "d.w", M, "gw[e * d.w + q] = T(0);", I3))
        s.append(f"{I3}if (!d.atomic_gx{rows_cond}) {{\n")
        s.append(_zero_uncovered(_in1_elements(live), "u", "d.in1", M, "work[e * d.in1 + q] = T(0);", I3 + "  "))
        s.append(f"{I3}}}\n")
    s.append(f"{I2}}}\n")
    gop = "=" if gy_first else "+="
    how = "through shared memory" if gy_smem else "butterfly"
    s.append(f"{I2}// grad_y: sum over channels, fixed order: {how} inside each warp, then the slot's warps in order.\n")
    s.append(f"{I2}const int lane = threadIdx.x & 31;\n")
    warp_sum = (f"{_GY_SMEM_CALL}{V}>(gy, lane, s_gy[threadIdx.x >> 5])" if gy_smem
                else f"warp_butterfly<T, {V}>(gy, lane)")
    if WPS == 1:
        s.append(f"{I2}if (act) {{\n")
        s.append(f"{I2}  const T mine = {warp_sum};\n")
        s.append(f"{I2}  const int col = kColOf{G}[butterfly_slot<{V}>(lane)];\n")
        s.append(f"{I2}  if ((lane & plain_mask<{V}>()) == 0 && col >= 0) gyo[e * d.in2 + col] {gop} mine;\n")
        if gy_first:
            s.append(f"{I2}  for (int q = lane; q < d.in2; q += 32)\n")
            s.append(f"{I2}    if (!gy_cols{G}(q)) gyo[e * d.in2 + q] = T(0);\n")
        s.append(f"{I2}}}\n")
    else:
        # partial sums of GY_CHUNK consecutive edge iterations meet in s_red, then one barrier
        s.append(f"{I2}const int warp = threadIdx.x >> 5, c = it % {GY_CHUNK};\n")
        s.append(f"{I2}if (act) {{\n")
        s.append(f"{I2}  const T mine = {warp_sum};\n")
        s.append(f"{I2}  if ((lane & plain_mask<{V}>()) == 0) s_red[c][warp][butterfly_slot<{V}>(lane)] = mine;\n")
        s.append(f"{I2}}}\n")
        s.append(f"{I2}if (c == {GY_CHUNK - 1} || e0 + {S} >= e_end) {{  // uniform over the block\n")
        s.append(f"{I2}  __syncthreads();\n")
        s.append(f"{I2}  const int64_t ebase = e0 - int64_t(c) * {S};\n")
        s.append(f"{I2}  if (slot < {S})\n")
        s.append(f"{I2}    for (int t = u; t < (c + 1) * d.in2; t += {M}) {{  // (chunk entry r, column q)\n")
        s.append(f"{I2}      const int r = t / d.in2, q = t - r * d.in2;\n")
        pr = "pr" if wave else "er"  # the chunk entry's position (Tuning.wave: then its edge er)
        s.append(f"{I2}      const int64_t {pr} = ebase + int64_t(r) * {S} + slot;\n")
        s.append(f"{I2}      if ({pr} >= e_end) continue;\n")
        if wave:
            s.append(f"{I2}      const int64_t er = wave_edge(pr, rot, e_begin, e_end);\n")
        s.append(f"{I2}      const int v = q < {max(y_cols) + 1} ? kSlotOf{G}[q] : -1;\n")
        s.append(f"{I2}      if (v >= 0) {{\n")
        s.append(f"{I2}        T sum = T(0);\n")
        s.append(f"{I2}        for (int k = 0; k < {WPS}; ++k) sum += s_red[r][slot * {WPS} + k][v];\n")
        s.append(f"{I2}        gyo[er * d.in2 + q] {gop} sum;\n")
        if gy_first:
            s.append(f"{I2}      }} else {{\n")
            s.append(f"{I2}        gyo[er * d.in2 + q] = T(0);\n")
        s.append(f"{I2}      }}\n")
        s.append(f"{I2}    }}\n")
        s.append(f"{I2}  __syncthreads();  // s_red is refilled by the next chunk\n")
        s.append(f"{I2}}}\n")
    s.append(f"{I1}}}\n")
    s.append(f"{I1}__syncthreads();  // the next pass may read-modify-write what this one wrote\n")
    s.append(f"{I}}}\n")
    return "".join(s), tables


def _bwd_prefetch(tune: Tuning, dbwd: bool) -> Optional[str]:
    """The compile-time condition under which a backward kernel prefetches (None: never); the
    backward's is its template parameter kPrefetch (set by bwd_launch, see PF_DEFAULT)."""
    if dbwd:
        return "true" if tune.prefetch & PF_DBWD else None
    return "kPrefetch" if tune.prefetch & (PF_BWD32 | PF_BWD64) else None


def _kernel_source(name: str, body: str, dbwd: bool, prefetch_param: bool, red: str, bounds: str,
                   wave: str = "") -> str:
    """A per-edge kernel of the backward family around ``body`` (its passes): block n = receiver n, or with
    kParts each block takes receiver parts on a persistent grid. In the double backward ggw and gw may be one
    buffer (TPSpec::dbwd_in_gg_w): neither is __restrict__ there. ``wave`` (Tuning.wave): the resident blocks per SM
    (a constant expression in T; 0: none known) for the rotation ``rot`` of the receiver's edge list that ``body``
    walks (_WAVE; none with kParts)."""
    rot = ("", "")  # (block per receiver, kParts)
    if wave:
        rot = (f"    const int64_t rot = wave_rot<{wave}>(src, dst_ptr, e_begin, e_end);\n",
               "      const int64_t rot = 0;\n")
    extra = "const T* __restrict__ ggx, const T* __restrict__ ggy, const T* ggw, " if dbwd else ""
    gw = "T* gw" if dbwd else "T* __restrict__ gw"
    tmpl = ("template <typename T, bool kPrefetch, bool kParts>  // kPrefetch: the next edge weights into L2 first"
            if prefetch_param else "template <typename T, bool kParts>")
    return f"""{tmpl}
__global__ void {bounds} {name}(const T* __restrict__ x, const T* __restrict__ y,
    const T* __restrict__ w, {extra}const T* __restrict__ g, T* __restrict__ gyo, {gw},
    T* __restrict__ work, const int64_t* __restrict__ src, const int64_t* __restrict__ dst_ptr,
    const int64_t* __restrict__ w_row, int64_t num_parts, TPDims d, int pass_lo, int pass_hi) {{
{red}  if constexpr (kParts) {{
    for (int64_t b = blockIdx.x; b < num_parts; b += gridDim.x) {{  // uniform over the block
      const int64_t n = b / d.split, part = b % d.split;
      const int64_t first = dst_ptr[n], deg = dst_ptr[n + 1] - first;
      const int64_t e_begin = first + deg * part / d.split, e_end = first + deg * (part + 1) / d.split;
      if (e_begin == e_end) continue;  // writes per edge only
{rot[1]}      const T* grow = g + n * d.out;
{textwrap.indent(body, "    ")}    }}  // every pass ends with a barrier: shared memory is free for the next part
  }} else {{
    const int64_t n = blockIdx.x;
    const int64_t e_begin = dst_ptr[n], e_end = dst_ptr[n + 1];
    if (e_begin == e_end) return;  // writes per edge only (edge chunks launch every receiver)
{rot[0]}    const T* grow = g + n * d.out;
{textwrap.indent(body, "  ")}  }}
}}
"""


def _rows_source(rows: Optional[RowsPlan], live: List[_Path], dbwd: bool, tag: str, budget: int, threads: int,
                 tune: Tuning) -> str:
    """With a plan: the deferred paths' weight-gradient kernel, the per-sender sums of each run's rows and the
    host function that launches them in turn (rows_in_gw_<tag>); without: that function, refusing."""
    fn = f"rows_in_gw_{tag}"
    sig = (f"template <typename T, bool kParts, typename K>\n"
           f"const char* {fn}(K kernel, unsigned grid, int64_t parts, const TPTensors<T>& t, const TPGraph& g,\n"
           f"    const TPDims& d, cudaStream_t stream) {{\n")
    if rows is None:
        return (f"// No plan keeps these kernels' grad_x rows in grad_w (weight blocks shared by paths).\n{sig}"
                f"  return \"grad_x rows in grad_w: not available for this plan\";\n}}\n")
    src = [f"// grad_x rows in grad_w (TPDims::rows_in_gw, md_accel/ops/_rows_plan.py), kernels {tag}: runs "
           + ", ".join(f"passes [{a}, {b})" for a, b in rows.launches)
           + "; deferred paths " + ", ".join(str(p.idx) for p in rows.deferred) + ".\n"]
    # per run: its rows' elements in grad_w column order (coalesced reads), with their in1 columns; in1 columns
    # that no path reads are zeroed by the first run's sum (grad_w column -1)
    covered = {p.in1_off + q for p in live for q in range(p.mul * p.d1)}
    ext = max(p.in1_off + p.mul * p.d1 for p in live)
    runs = []
    for r in range(len(rows.launches)):
        elems = sorted((base + u * stride, key[0] + u * key[2] + i)
                       for (key, i), (base, stride) in rows.slots.items() if rows.launch_of[key] == r
                       for u in range(key[1]))
        if r == 0:
            elems += [(-1, c) for c in range(ext) if c not in covered]
        runs.append(elems)
    width = max(len(e) for e in runs)

    def table(name: str, field: int) -> str:
        """One int per run element (``field`` 0: grad_w column, 1: in1 column), runs padded to one width. Global
        memory, not __constant__: wide plans' tables outgrow its 64 KB, and each thread reads its own entry."""
        rows_text = ("{" + ", ".join(str(v[field]) for v in e) + ", 0" * (width - len(e)) + "}" for e in runs)
        return f"__device__ const int {name}_{tag}[{len(runs)}][{width}] = {{{', '.join(rows_text)}}};\n"

    src.append(table("kSlotPos", 0) + table("kSlotCol", 1))
    src.append(f"""// grad_x[n, col] = sum of the rows' grad_w columns pos over the edges sent by n, in src_perm order (as
// gx_sum_kernel); pos -1: zero. Rows in d.in1 columns beyond the plan's blocks (wider x) are zeroed too. With
// accumulate (edge chunks after the first) the sums are added to grad_x[n] where n sent edges, nothing else written.
template <typename T, int R>
__global__ void __launch_bounds__(256) gx_slot_sum_{tag}(const T* __restrict__ gw, int w, int in1, int count,
    int zero_from, int accumulate, const int64_t* __restrict__ src_perm, const int64_t* __restrict__ src_ptr,
    T* __restrict__ gx) {{
  const int64_t n = blockIdx.x;
  const int64_t t0 = src_ptr[n], t1 = src_ptr[n + 1];
  if (accumulate && t0 == t1) return;
  for (int c = threadIdx.x; c < count; c += blockDim.x) {{
    const int pos = __ldg(&kSlotPos_{tag}[R][c]);
    T s = T(0);
    if (pos >= 0) {{
#pragma unroll 4
      for (int64_t t = t0; t < t1; ++t) s += gw[__ldg(src_perm + t) * w + pos];
    }}
    const int64_t i = n * in1 + __ldg(&kSlotCol_{tag}[R][c]);
    gx[i] = accumulate ? gx[i] + s : s;
  }}
  if (!accumulate)
    for (int c = zero_from + threadIdx.x; c < in1; c += blockDim.x) gx[n * in1 + c] = T(0);
}}
""")
    # the deferred paths' weight gradients (a plan always has some: the last run has no later paths); little work
    # per edge, so W_SLOTS times part 1's threads per block, each block with that many more edges in flight
    wname = f"{'dbwd' if dbwd else 'bwd'}w_kernel_{tag}"
    wthreads = min(MAX_THREADS, W_SLOTS * threads)
    first: dict = {}
    body = "".join(_bwd_group(gi, g, wthreads, first, dbwd, tag + "w", w_only=True)[0]
                   for gi, g in enumerate(_bwd_groups(rows.deferred, budget, 0)))
    src.append(f"// The deferred paths' weight gradients, once their columns' rows are summed ({wthreads} threads).\n")
    src.append(_kernel_source(wname, body, dbwd, False, "", f"__launch_bounds__({wthreads})"))
    args = ("t.x, t.y, t.w, " + ("t.ggx, t.ggy, t.ggw, " if dbwd else "")
            + "t.g, t.gy, t.gw, static_cast<T*>(nullptr), g.src, g.dst_ptr, g.w_row, parts, d")
    src.append(sig)
    src.append('  if (d.atomic_gx) return "grad_x rows in grad_w: not with atomic_gx";\n')
    for r, (a, b) in enumerate(rows.launches):
        src.append(f"  kernel<<<grid, kThreads, 0, stream>>>({args}, {a}, {b});\n")
        src.append("  if (const char* err = last_error()) return err;\n")
        src.append(f"  gx_slot_sum_{tag}<T, {r}><<<unsigned(g.num_nodes), 256, 0, stream>>>(t.gw, d.w, d.in1, "
                   f"{len(runs[r])}, {ext if r == 0 else 'd.in1'}, d.accumulate, g.src_perm, g.src_ptr, t.gx);\n")
        src.append("  if (const char* err = last_error()) return err;\n")
    src.append(f"  {wname}<T, kParts><<<grid, {wthreads}, 0, stream>>>({args}, 0, kAllPasses);\n")
    src.append("  return last_error();\n}\n")
    return "".join(src)


def _gen_bwd(live: List[_Path], threads: int, budget: int, merge: int, dbwd: bool, tag: str,
             tune: Tuning) -> Optional[Tuple[str, bool, bool]]:
    """Per-receiver kernel of the backward (dbwd: of g_x, g_y, g_w of the double backward): per
    edge grad_w, grad_y and the edge's grad_x contribution (work row e, summed by sender later; with
    d.rows_in_gw in free grad_w columns, _rows_plan; with d.atomic_gx added into grad_x at once), and
    what d.rows_in_gw launches. ``budget``, ``merge``: as _bwd_groups. (source, whether rows in grad_w are
    available, whether grad_w may go into ggw's memory: _gw_in_one_pass)."""
    groups = _bwd_groups(live, budget, merge)
    y_used = max((len({p.in2_off + j for p in g for (_, _, j, _) in p.nz}) for g in groups), default=1)
    if y_used > MAX_IN2:
        return None
    rows = rows_in_grad_w(groups, live)
    vmax = 1  # the widest pass's used y columns, to a power of two (as _bwd_group's V)
    while vmax < y_used:
        vmax *= 2
    multi = any((g[0].mul + 31) // 32 > 1 for g in groups)
    # shared arrays: (declaration, elements of T); s_gy (warp_sum_smem's buffers, a row of vmax + 1 elements per
    # lane and in float64 vmax / 2 more per warp) where it fits beside s_red in float64, else the butterfly
    shared = [(f"s_red[{GY_CHUNK}][kThreads / 32][{vmax}]", GY_CHUNK * threads // 32 * vmax)] if multi else []
    s_gy = (f"s_gy[kThreads / 32][32 * {vmax + 1} + {vmax // 2}]", threads // 32 * (32 * (vmax + 1) + vmax // 2))
    gy_smem = bool(tune.gy_smem) and 8 * sum(n for _, n in shared + [s_gy]) <= GY_SMEM_BYTES
    if gy_smem:
        shared.append(s_gy)
    # Tuning.g_smem (this kernel's bit): the widest pass's grad_out components for every channel, where that fits
    # beside the other arrays
    g_elems = max(_out_width(g) * ((g[0].mul + 31) // 32 * 32) for g in groups)
    g_smem = bool(tune.g_smem & G_SMEM_BIT[tag]) and 8 * (sum(n for _, n in shared) + g_elems) <= GY_SMEM_BYTES
    if g_smem:
        shared.append((f"s_g[{g_elems}]", g_elems))
    red = "".join(f"  __shared__ T {decl};\n" for decl, _ in shared)
    wave = _resident_blocks(tune, threads, dbwd_part1=True) if dbwd and tune.wave else ""
    first: dict = {}
    bodies, tables = [], []
    for gi, g in enumerate(groups):
        b, t = _bwd_group(gi, g, threads, first, dbwd, tag, _bwd_prefetch(tune, dbwd),
                          bool(tune.prefetch & PF_PART1_XY), rows, evict=bool(tune.w_evict), gy_smem=gy_smem,
                          g_smem=g_smem, live=live, wave=bool(wave))
        bodies.append(b)
        tables.append(t)
    name = f"{'dbwd' if dbwd else 'bwd'}_kernel_{tag}"
    head = f"""
// {'Double backward (g_x, g_y, g_w)' if dbwd else 'Backward'}, part 1: {len(groups)} pass(es) over a receiver's edges, those in
// [pass_lo, pass_hi) in this launch. kParts: the
// parts n * d.split .. + d.split - 1 = receiver n, each a contiguous part of its edges, on a persistent grid
// (each block takes the parts blockIdx.x, + gridDim.x, ..: edge chunks have edges at a range of receivers, a
// grid of every part would be mostly empty blocks); else block n = receiver n (d.split = 1), straight-line
// code: the part loop costs the float64 kernels, at their register cap, hundreds of bytes of spills.
"""
    src = "".join(tables) + head + _kernel_source(name, "".join(bodies), dbwd, not dbwd, red,
                                                  _bounds(tune, threads, dbwd_part1=dbwd), wave)
    return src + _rows_source(rows, live, dbwd, tag, budget, threads, tune), rows is not None, _gw_in_one_pass(groups)


def _gw_in_one_pass(groups: Sequence[List[_Path]]) -> bool:
    """Whether every weight block's gradient is written by one pass, the pass that reads its ggw columns: the
    double backward's part 1 can then write grad_w into ggw's memory (each element read by the thread that
    writes it, before; TPSpec::dbwd_in_gg_w). Not where a later pass adds to a block (paths sharing weights)."""
    passes = {}
    for gi, g in enumerate(groups):
        for p in g:
            passes.setdefault(p.w_key, set()).add(gi)
    return all(len(v) == 1 for v in passes.values())


_PRELUDE = r"""
// Generated by md_accel/ops/_codegen.py (GEN_VERSION {gen}) from a lowered tp_conv plan; do not edit.
// Structure key {key}: {num_paths} paths, {nnz} CG non-zeros, {threads} threads per block.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include "tp_spec_abi.h"
{includes}
namespace md_accel {{
namespace {{

constexpr int kThreads = {threads};
constexpr int kAllPasses = 1 << 30;  // pass_hi of a launch that runs every pass of a per-edge kernel

const char* last_error() {{
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}}
constexpr int kNnz = {nnz};
constexpr int32_t kPaths[] = {{{paths}}};
constexpr int32_t kCgPtr[] = {{{cg_ptr}}};
constexpr int32_t kCgIdx[] = {{{cg_idx}}};
{cg_decls}
{covered}
// Makes the optimiser treat the values as changed here (no instruction is emitted): the backward
// calls it per edge on the receiver's grad_out, so the sums of products kCg<q> * g, one per (i, j) pair of CG
// non-zeros, are formed in the edge loop instead of being hoisted out of it into a register each (which
// spills on the larger plans).
#ifdef __CUDA_ARCH__
__device__ __forceinline__ void opaque_reg(float& v) {{ asm volatile("" : "+f"(v)); }}
__device__ __forceinline__ void opaque_reg(double& v) {{ asm volatile("" : "+d"(v)); }}
#endif
// The weight row of edge e: w_row[e] where edges share rows (TPGraph::w_row), else e.
__device__ __forceinline__ int64_t w_index(const int64_t* __restrict__ w_row, int64_t e) {{
  return w_row != nullptr ? __ldg(w_row + e) : e;
}}

template <typename... T>
__device__ __forceinline__ void per_iteration(T&... v) {{
#ifdef __CUDA_ARCH__
  (opaque_reg(v), ...);
#endif
}}

// After warp_butterfly<T, V>, lanes whose bits under this mask are zero hold their slot's sum.
template <int V>
__device__ constexpr int plain_mask() {{ return 32 / V - 1; }}

// One butterfly step per level C = V, V/2, .., 2 (partner lane offset 16 C / V): half of the
// remaining C slots go to the partner lane, the other half are kept (compile-time indices only,
// so a[] stays in registers).
template <int C, int V, typename T>
__device__ __forceinline__ void butterfly_steps(T (&a)[V], int lane) {{
  if constexpr (C > 1) {{
    constexpr int off = 16 * C / V;
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int v = 0; v < C / 2; ++v) {{
      const T send = upper ? a[v] : a[v + C / 2];
      const T keep = upper ? a[v + C / 2] : a[v];
      a[v] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }}
    butterfly_steps<C / 2, V>(a, lane);
  }}
}}

// Sum of a[0..V) over the 32 lanes, fixed order: after log2(V) butterfly steps a lane holds one
// slot, then plain xor-adds finish. Returns the lane's slot sum (valid on lanes with
// (lane & plain_mask<V>()) == 0).
template <typename T, int V>
__device__ __forceinline__ T warp_butterfly(T (&a)[V], int lane) {{
  butterfly_steps<V, V>(a, lane);
  T r = a[0];
#pragma unroll
  for (int off = 16 / V; off > 0; off /= 2) r += __shfl_xor_sync(0xffffffffu, r, off);
  return r;
}}

// Slot held by a lane after warp_butterfly<T, V>.
template <int V>
__device__ __forceinline__ int butterfly_slot(int lane) {{
  int slot = 0, off = 16;
#pragma unroll
  for (int c = V; c > 1; c /= 2, off /= 2)
    if (lane & off) slot += c / 2;
  return slot;
}}

// Backward, part 2: grad_x[n] = sum of the work rows of the edges sent by n, in src_perm order
// (accumulate: added to grad_x[n] where n sent edges, other rows untouched).
template <typename T>
__global__ void __launch_bounds__(256) gx_sum_kernel(const T* __restrict__ work,
    const int64_t* __restrict__ src_perm, const int64_t* __restrict__ src_ptr, int in1, int accumulate,
    T* __restrict__ gx) {{
  const int64_t n = blockIdx.x;
  const int64_t t0 = src_ptr[n], t1 = src_ptr[n + 1];
  if (accumulate && t0 == t1) return;
  for (int c = threadIdx.x; c < in1; c += blockDim.x) {{
    T s = T(0);
#pragma unroll 4
    for (int64_t t = t0; t < t1; ++t) s += work[__ldg(src_perm + t) * in1 + c];
    gx[n * in1 + c] = accumulate ? gx[n * in1 + c] + s : s;
  }}
}}
"""

_GY_SMEM = r"""
// warp_butterfly's sum through the warp's buffer buf (32 rows of V + 1 elements, and in float64 V / 2 more: the
// rows of the parts in the upper half of the warp start that much further on, Tuning.gy_smem): each lane stores a[]
// as its row; lane l then adds column butterfly_slot<V>(l) over the V rows of its part (l & plain_mask<V>()) into
// four partial sums (row t into sum t % 4: a short chain of dependent adds), adds the partials pairwise, and
// xor-adds finish over the parts as in warp_butterfly. A fixed order, and the same result lanes and slots as
// warp_butterfly, without its selects and shuffles (float64: four selects and two shuffles per exchanged value).
// Rows of V + 1 elements put a warp's stores in distinct banks, the float64 offset a half-warp's column reads.
template <typename T, int V>
__device__ __forceinline__ T warp_sum_smem(const T (&a)[V], int lane, T* buf) {
  constexpr int kRow = V + 1, kSums = V < 4 ? V : 4, kParts = 32 / V;
  constexpr int kPad = sizeof(T) == 8 && kParts > 1 ? V / 2 : 0;
  __syncwarp();  // the previous sum's reads of buf are done
  T* row = buf + lane * kRow + (lane >> 4) * kPad;  // lanes 16..31: the rows of the upper parts
#pragma unroll
  for (int v = 0; v < V; ++v) row[v] = a[v];
  __syncwarp();
  const int part = lane & plain_mask<V>();
  const T* col = buf + part * V * kRow + (part >= kParts / 2 ? kPad : 0) + butterfly_slot<V>(lane);
  T r[kSums];
#pragma unroll
  for (int t = 0; t < kSums; ++t) r[t] = col[t * kRow];
#pragma unroll
  for (int t = kSums; t < V; ++t) r[t % kSums] += col[t * kRow];
#pragma unroll
  for (int h = kSums / 2; h > 0; h /= 2)
#pragma unroll
    for (int t = 0; t < h; ++t) r[t] += r[t + h];
#pragma unroll
  for (int off = 16 / V; off > 0; off /= 2) r[0] += __shfl_xor_sync(0xffffffffu, r[0], off);
  return r[0];
}
"""

_PREFETCH = r"""
// A hint to the L2 cache: no register is held and nothing waits for it (a no-op in the host emulation).
template <typename T>
__device__ __forceinline__ void prefetch_l2(const T* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}
"""

_PREFETCH_L1 = r"""
// The same into L1 (the x lines of PF_FWD_XY and PF_PART1_XY).
template <typename T>
__device__ __forceinline__ void prefetch_l1(const T* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#endif
}
"""

_LDS_EACH = r"""
// A shared-memory read the compiler leaves where it stands (Tuning.g_smem: each path reads its grad_out components
// inside the edge loop; a plain read would be hoisted out of the loop into registers again).
template <typename T>
__device__ __forceinline__ T lds_each(const T* p) {
  return *static_cast<const volatile T*>(p);
}
"""

_WAVE = r"""
// Tuning.wave: part 1 of the double backward writes ~14 KB per edge through L2 in mace_mp0_medium float64 (grad_w, the
// grad_x rows), which pushes the gathered x / gg_x rows out before their sender's next edge reads them again unless
// that edge comes within ~1,400 edges (tools/l2_gather_probe.cu, session 84). Part 1 keeps nothing across a
// receiver's edges (each edge's outputs are its own), so the order in which a block walks them is free: each block
// starts at the edge whose sender is where the blocks in flight are, and walks the list cyclically, so that they all
// read the rows of one moving band of senders. Block n starts after ~dst_ptr[n] edges (blocks start in order), of
// which the blocks in flight hold ~kBlocks x SMs x the mean degree; one such span of edges is one sweep of the
// senders. Session 85 (H100, mace_mp0_medium float64): DRAM reads 8.26 against 8.58 GB, the double-backward pass
// 13.75-13.76 against 13.85-13.87 ms. (A count of the edges walked, for the blocks' true start times, read 8.06 GB but
// spilled more and lost: code 4bfd617.)
template <int kBlocks>
__device__ __forceinline__ int64_t wave_rot(const int64_t* __restrict__ src, const int64_t* __restrict__ dst_ptr,
                                            int64_t e_begin, int64_t e_end) {
  if constexpr (kBlocks == 0) {  // no resident blocks known (float32 without a min_warps32): in order
    return 0;
  } else {
    unsigned sms = 4;  // (the host emulation: a few)
#if defined(__CUDA_ARCH__)
    asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
#endif
    const int64_t nodes = gridDim.x, edges = dst_ptr[nodes];
    const double span = double(kBlocks) * sms * double(edges) / double(nodes);
    double phase = double(e_begin) / span;
    phase -= floor(phase);
    const int64_t target = int64_t(phase * double(nodes));
    int64_t lo = e_begin, hi = e_end;  // the first edge whose sender is at least target (sorted by sender)
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (__ldg(src + mid) < target) lo = mid + 1; else hi = mid;
    }
    return lo == e_end ? 0 : lo - e_begin;
  }
}

// Edge at position pos of the receiver's list [b, end) rotated by rot.
__device__ __forceinline__ int64_t wave_edge(int64_t pos, int64_t rot, int64_t b, int64_t end) {
  const int64_t q = pos + rot;
  return q < end ? q : q - (end - b);
}
"""

_LD_STREAM = r"""
// A per-edge weight, read once (Tuning.w_evict): no L1 line, its L2 line evicted first (a plain __ldg in the host
// emulation and before sm_80).
__device__ __forceinline__ uint64_t stream_policy() {
  uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
  return p;
}
__device__ __forceinline__ float ld_stream(const float* a, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(a), "l"(policy));
  return v;
#else
  (void)policy;
  return __ldg(a);
#endif
}
__device__ __forceinline__ double ld_stream(const double* a, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  double v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.f64 %0, [%1], %2;" : "=d"(v) : "l"(a), "l"(policy));
  return v;
#else
  (void)policy;
  return __ldg(a);
#endif
}
// The same without the read-only path, for memory the kernel may write later (the double backward's ggw where its
// grad_w goes into the same buffer): volatile with a memory clobber, so the compiler keeps it before those stores.
__device__ __forceinline__ float ld_stream_rw(const float* a, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float v;
  asm volatile("ld.global.L1::no_allocate.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(a), "l"(policy) : "memory");
  return v;
#else
  (void)policy;
  return *a;
#endif
}
__device__ __forceinline__ double ld_stream_rw(const double* a, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  double v;
  asm volatile("ld.global.L1::no_allocate.L2::cache_hint.f64 %0, [%1], %2;" : "=d"(v) : "l"(a), "l"(policy) : "memory");
  return v;
#else
  (void)policy;
  return *a;
#endif
}
"""

_TMA = r"""
// Tuning.fwd_tma: mbarriers and bulk copies into shared memory (sm_90); the host emulation (tests/cuda_emu) has its own.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900  // no bulk copies: fwd_tma_ok never launches the kernel there
__device__ __forceinline__ void mbar_init(uint64_t*, int) { __trap(); }
[[maybe_unused]] __device__ __forceinline__ void mbar_inval(uint64_t*) { __trap(); }
__device__ __forceinline__ void fence_proxy_async() { __trap(); }
__device__ __forceinline__ void mbar_init_fence() { __trap(); }
__device__ __forceinline__ void mbar_arrive(uint64_t*) { __trap(); }
__device__ __forceinline__ void mbar_expect(uint64_t*, uint32_t) { __trap(); }
__device__ __forceinline__ void mbar_wait(uint64_t*, uint32_t) { __trap(); }
__device__ __forceinline__ void bulk_copy(void*, const void*, uint32_t, uint64_t*) { __trap(); }
__device__ __forceinline__ void bulk_copy_hint(void*, const void*, uint32_t, uint64_t*, uint64_t) { __trap(); }
#elif defined(__CUDA_ARCH__) || !defined(MD_ACCEL_MMA_HOST_EMU)
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
[[maybe_unused]] __device__ __forceinline__ void mbar_inval(uint64_t* bar) {  // (a one-pass kernel has no use for it)
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Orders this thread's view of shared memory, in which the warps' reads of a stage were ordered by the empty barrier,
// before the bulk copy that next writes the stage (the copy engine is the async proxy, the loads the generic one).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}
// The same with an L2 cache policy (stream_policy's evict-first for the weights, read once: under the default policy
// their stream evicted the gathered x rows, which then came from DRAM again)
__device__ __forceinline__ void bulk_copy_hint(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                               uint64_t policy) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
               "%4;" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy) : "memory");
}
#endif
__host__ __device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
"""

_FWD_TMA_LAUNCH = r"""  if (fwd_tma_ok<T>(t, d)) {{
    fwd_kernel_tma<T><<<unsigned(g.num_nodes), {fwd_threads}, 0, stream>>>(t.x, t.y, t.w, t.out, g.src, g.dst_ptr,
                                                                    g.w_row, d);
    return last_error();
  }}
"""

_LAUNCHERS = r"""
template <typename T>
const char* fwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPDims& d, cudaStream_t stream) {{
  if (g.num_nodes == 0) return nullptr;
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
{fwd_mma}{fwd_tma}  fwd_kernel<T><<<unsigned(g.num_nodes), {fwd_threads}, 0, stream>>>(t.x, t.y, t.w, t.out, g.src, g.dst_ptr, g.w_row, d);
  return last_error();
}}
{bwd_launch}
const TPSpec kSpec = {{kTPSpecAbiVersion, {num_paths}, kNnz, kPaths, kCgPtr, kCgIdx, kCgVal,
                      fwd_launch<float>, fwd_launch<double>, {bwd_f32}, {bwd_f64}, {dbwd_f32}, {dbwd_f64},
                      {bwd_per_sm}, {dbwd_per_sm}, {rows_in_gw}, {dbwd_in_gg_w}}};

}}  // namespace
}}  // namespace md_accel

extern "C" const md_accel::TPSpec* md_accel_tp_spec_v1() {{ return &md_accel::kSpec; }}
"""

_BWD_LAUNCH = r"""
// The float64 backward prefetches where that costs no resident block per SM (its extra registers
// can: see PF_DEFAULT in _codegen.py); decided once per process.
bool bwd64_prefetch() {
  static const bool pf = [] {
    int with = 0, without = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&with, bwd_kernel_BD<double, true, false>, kThreads, 0) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&without, bwd_kernel_BD<double, false, false>, kThreads, 0) !=
            cudaSuccess) {
      cudaGetLastError();  // clear only this query's error
      return false;
    }
    return with >= without;
  }();
  return pf;
}

// Resident blocks per SM of a kernel (1 where the query fails).
template <typename K>
int resident(K kernel) {
  int v = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, kernel, kThreads, 0) != cudaSuccess || v < 1) {
    cudaGetLastError();  // clear only this query's error
    v = 1;
  }
  return v;
}

// Grid of a per-edge kernel with receiver parts (kParts) and `per_sm` resident blocks per SM over
// `parts` parts: two blocks per resident slot at most (each takes every grid-th part), so empty parts
// cost a loop iteration instead of a block.
unsigned parts_grid(int64_t parts, int per_sm) {
  int dev = 0, sms = 1;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) !=
                                                cudaSuccess) {
    cudaGetLastError();  // clear only this query's error
    sms = 1;
  }
  return unsigned(std::min<int64_t>(parts, int64_t(2) * per_sm * sms));
}

// Resident blocks per SM of the backward's per-edge kernel with receiver parts, the one bwd_launch runs
// when the host splits receivers (TPSpec::bwd_per_sm, from which the host sizes the split).
int bwd_per_sm(int f64) {
  static const int r32 = resident(bwd_kernel_BS<float, PF32, true>);
  static const int r64 = PF64 && bwd64_prefetch() ? resident(bwd_kernel_BD<double, true, true>)
                                                  : resident(bwd_kernel_BD<double, false, true>);
  return f64 ? r64 : r32;
}

// After a per-edge kernel that wrote the workspace rows (or, with d.atomic_gx, added into grad_x): the per-sender sum.
template <typename T>
const char* sum_work_rows(const T* work, const TPTensors<T>& t, const TPGraph& g, const TPDims& d, cudaStream_t stream) {
  if (const char* err = last_error()) return err;
  if (d.atomic_gx) return nullptr;  // the kernel added into grad_x (work == t.gx)
  gx_sum_kernel<T><<<unsigned(g.num_nodes), 256, 0, stream>>>(work, g.src_perm, g.src_ptr, d.in1, d.accumulate, t.gx);
  return last_error();
}

template <typename T>
const char* bwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPDims& d, T* work, cudaStream_t stream) {
  if (g.num_nodes == 0) return nullptr;
  if (d.split < 1) return "split must be positive";
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
  const int64_t parts = g.num_nodes * d.split;
  const bool split = d.split > 1;  // else one block per receiver (kParts false)
  const unsigned grid = split ? parts_grid(parts, bwd_per_sm(sizeof(T) == 8)) : unsigned(g.num_nodes);
  // d.rows_in_gw: the kernel in runs of passes, each run's rows summed before the next (rows_in_gw_<tag>)
  const auto run = [&](auto kernel, auto parts_tag) -> const char* {
    if (d.rows_in_gw) {
      if constexpr (sizeof(T) == 4)
        return rows_in_gw_BS<T, decltype(parts_tag)::value>(kernel, grid, parts, t, g, d, stream);
      else
        return rows_in_gw_BD<T, decltype(parts_tag)::value>(kernel, grid, parts, t, g, d, stream);
    }
    kernel<<<grid, kThreads, 0, stream>>>(t.x, t.y, t.w, t.g, t.gy, t.gw, work, g.src, g.dst_ptr, g.w_row, parts, d,
                                          0, kAllPasses);
    return sum_work_rows(work, t, g, d, stream);
  };
  using Parts = std::true_type;
  using NoParts = std::false_type;
  if constexpr (sizeof(T) == 4)
    return split ? run(bwd_kernel_BS<T, PF32, true>, Parts{}) : run(bwd_kernel_BS<T, PF32, false>, NoParts{});
  else if (PF64 && bwd64_prefetch())
    return split ? run(bwd_kernel_BD<T, true, true>, Parts{}) : run(bwd_kernel_BD<T, true, false>, NoParts{});
  else
    return split ? run(bwd_kernel_BD<T, false, true>, Parts{}) : run(bwd_kernel_BD<T, false, false>, NoParts{});
}

// Double backward: t.out = g_grad_out (forward with substituted arguments; not computed when t.out is
// null), then g_x, g_y, g_w as a backward with substituted arguments (g_x through the work rows and the
// per-sender sum).
int dbwd_per_sm(int f64) {
  static const int r32 = resident(dbwd_kernel_DS<float, true>), r64 = resident(dbwd_kernel_DD<double, true>);
  return f64 ? r64 : r32;
}

template <typename T>
const char* dbwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPDims& d, T* work, cudaStream_t stream) {
  if (g.num_nodes == 0) return nullptr;
  if (d.split < 1) return "split must be positive";
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
  const int64_t parts = g.num_nodes * d.split;
  const bool split = d.split > 1;  // else one block per receiver (kParts false)
  const unsigned grid = split ? parts_grid(parts, dbwd_per_sm(sizeof(T) == 8)) : unsigned(g.num_nodes);
  if (t.out != nullptr) {  // g_grad_out asked for
    dfwd_kernel<T><<<unsigned(g.num_nodes), kThreads, 0, stream>>>(t.x, t.y, t.w, t.ggx, t.ggy, t.ggw, t.out,
                                                                    g.src, g.dst_ptr, g.w_row, d);
    if (const char* err = last_error()) return err;
  }
  const auto run = [&](auto kernel, auto parts_tag) -> const char* {
    if (d.rows_in_gw) {
      if constexpr (sizeof(T) == 4)
        return rows_in_gw_DS<T, decltype(parts_tag)::value>(kernel, grid, parts, t, g, d, stream);
      else
        return rows_in_gw_DD<T, decltype(parts_tag)::value>(kernel, grid, parts, t, g, d, stream);
    }
    kernel<<<grid, kThreads, 0, stream>>>(t.x, t.y, t.w, t.ggx, t.ggy, t.ggw, t.g, t.gy, t.gw, work, g.src, g.dst_ptr,
                                          g.w_row, parts, d, 0, kAllPasses);
    return sum_work_rows(work, t, g, d, stream);
  };
  using Parts = std::true_type;
  using NoParts = std::false_type;
  if constexpr (sizeof(T) == 4)
    return split ? run(dbwd_kernel_DS<T, true>, Parts{}) : run(dbwd_kernel_DS<T, false>, NoParts{});
  else
    return split ? run(dbwd_kernel_DD<T, true>, Parts{}) : run(dbwd_kernel_DD<T, false>, NoParts{});
}
"""


def _bwd_variants(live: List[_Path], threads: int, dbwd: bool,
                  tune: Tuning) -> Optional[Tuple[str, str, str, int, int]]:
    """(source, f32 kernel tag, f64 kernel tag, rows-in-grad_w bits, grad_w-in-ggw bits; bits 1 float32, 2
    float64); one kernel when both budgets give the same passes."""
    b32, b64 = (tune.dbwd_g32, tune.dbwd_g64) if dbwd else (tune.bwd_g32, tune.bwd_g64)
    m32, m64 = (b32, min(b64, tune.merge_g64)) if tune.merge_in1 else (0, 0)
    pre = "d" if dbwd else "b"
    gen32 = _gen_bwd(live, threads, b32, m32, dbwd, pre + "s", tune)
    if gen32 is None:
        return None
    if _bwd_groups(live, b32, m32) == _bwd_groups(live, b64, m64):
        return gen32[0], pre + "s", pre + "s", 3 * int(gen32[1]), 3 * int(gen32[2])
    gen64 = _gen_bwd(live, threads, b64, m64, dbwd, pre + "d", tune)
    if gen64 is None:
        return None
    return (gen32[0] + gen64[0], pre + "s", pre + "d", int(gen32[1]) | 2 * int(gen64[1]),
            int(gen32[2]) | 2 * int(gen64[2]))


def _bounds(tune: Tuning, threads: int, dbwd_part1: bool = False, fwd: bool = False,
            block_const: str = "kThreads") -> str:
    """The kernels' __launch_bounds__: block size (``threads``, the constant ``block_const``), and with min_warps a
    minimum of resident blocks per dtype (0: none, as without the second argument); ``dbwd_part1``: the double
    backward's per-edge kernel, whose float32 minimum is dbwd_min_warps32 where set; ``fwd``: the forward kernel,
    whose float64 minimum is fwd_min_warps64 where set."""
    blocks = _resident_blocks(tune, threads, dbwd_part1, fwd)
    return f"__launch_bounds__({block_const}, {blocks})" if blocks else f"__launch_bounds__({block_const})"


def _resident_blocks(tune: Tuning, threads: int, dbwd_part1: bool = False, fwd: bool = False) -> str:
    """_bounds' minimum of resident blocks per SM, a constant expression in the kernel's T ("" where neither dtype
    has one; 0 for a dtype without)."""
    w32 = tune.dbwd_min_warps32 if dbwd_part1 and tune.dbwd_min_warps32 else tune.min_warps32
    w64 = tune.fwd_min_warps64 if fwd and tune.fwd_min_warps64 else tune.min_warps64
    if not (w32 or w64):
        return ""
    b32, b64 = (max(1, w * 32 // threads) if w else 0 for w in (w32, w64))
    return f"sizeof(T) == 4 ? {b32} : {b64}"


def generate(struct, tune: Optional[Tuning] = None) -> str:
    """CUDA source of the specialised library for one plan structure (raises Unsupported)."""
    tune = tune or Tuning()
    ps, live, threads, nnz = _analyse(struct)
    paths, cg_ptr, cg_idx, cg_val = struct
    covered = _covered_fn("out_covered", [p.out_off + q for p in live for q in range(p.mul * p.d3)])
    src = _PRELUDE.format(
        gen=GEN_VERSION, key=structure_key(struct), num_paths=len(paths), nnz=nnz, threads=threads,
        paths=", ".join(str(v) for r in paths for v in r), cg_ptr=", ".join(str(v) for v in cg_ptr),
        cg_idx=", ".join(str(v) for r in cg_idx for v in r), cg_decls=_cg_decls(cg_idx, cg_val),
        covered=covered, includes='#include "mma.cuh"\n' if tune.fwd_mma else "")
    if tune.prefetch:
        src += _PREFETCH + (_PREFETCH_L1 if tune.prefetch & (PF_FWD_XY | PF_PART1_XY) else "")
    if tune.w_evict:  # (stream_policy)
        src += _LD_STREAM
    if tune.wave:
        src += _WAVE
    gy_at = len(src)  # warp_sum_smem's template goes here where a kernel uses it (gy_smem, where its buffers fit)
    fwd = fwd_block(live, threads, tune)
    src += _gen_fwd(live, dbwd=False, threads=threads, tune=tune, block=fwd)
    fwd_tma = _gen_fwd(live, dbwd=False, threads=threads, tune=tune, block=fwd, tma=True) if tune.fwd_tma else ""
    if fwd_tma:
        src += _TMA + fwd_tma
    fwd_mma = _codegen_mma.generate(live, cg_val, tune.fwd_mma, bool(tune.prefetch)) if tune.fwd_mma else ""
    src += fwd_mma
    bwd = _bwd_variants(live, threads, dbwd=False, tune=tune)
    dbwd = _bwd_variants(live, threads, dbwd=True, tune=tune) if bwd is not None else None
    launch = ""
    if bwd is not None:
        src += bwd[0]
        launch = _BWD_LAUNCH.replace("bwd_kernel_BS", f"bwd_kernel_{bwd[1]}").replace(
            "bwd_kernel_BD", f"bwd_kernel_{bwd[2]}").replace(
            "rows_in_gw_BS", f"rows_in_gw_{bwd[1]}").replace("rows_in_gw_BD", f"rows_in_gw_{bwd[2]}").replace(
            "PF32", "true" if tune.prefetch & PF_BWD32 else "false").replace(
            "PF64", "true" if tune.prefetch & PF_BWD64 else "false")
        if dbwd is not None:
            src += _gen_fwd(live, dbwd=True, threads=threads, tune=tune) + dbwd[0]
            launch = launch.replace("dbwd_kernel_DS", f"dbwd_kernel_{dbwd[1]}").replace(
                "dbwd_kernel_DD", f"dbwd_kernel_{dbwd[2]}").replace(
                "rows_in_gw_DS", f"rows_in_gw_{dbwd[1]}").replace("rows_in_gw_DD", f"rows_in_gw_{dbwd[2]}")
        else:
            launch = launch[:launch.index("// Double backward")]
    src += _LAUNCHERS.format(
        fwd_threads="kThreads" if fwd[0] == threads else "kFwdThreads", bwd_launch=launch, num_paths=len(paths),
        fwd_mma=_codegen_mma.LAUNCH if fwd_mma else "",
        fwd_tma=_FWD_TMA_LAUNCH.format(fwd_threads="kThreads" if fwd[0] == threads else "kFwdThreads")
        if fwd_tma else "",
        bwd_f32="bwd_launch<float>" if bwd is not None else "nullptr",
        bwd_f64="bwd_launch<double>" if bwd is not None else "nullptr",
        dbwd_f32="dbwd_launch<float>" if dbwd is not None else "nullptr",
        dbwd_f64="dbwd_launch<double>" if dbwd is not None else "nullptr",
        bwd_per_sm="bwd_per_sm" if bwd is not None else "nullptr",
        dbwd_per_sm="dbwd_per_sm" if dbwd is not None else "nullptr",
        rows_in_gw=(bwd[3] if bwd is not None else 0) | 4 * (dbwd[3] if dbwd is not None else 0),
        dbwd_in_gg_w=dbwd[4] if dbwd is not None else 0)
    if _GY_SMEM_CALL in src:
        src = src[:gy_at] + _GY_SMEM + src[gy_at:]
    if "lds_each(" in src:
        src = src[:gy_at] + _LDS_EACH + src[gy_at:]
    return src



# --- build ---------------------------------------------------------------------------------------

def _cache_dir() -> Path:
    base = os.environ.get("MD_ACCEL_BUILD_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "md_accel")
    return Path(base) / "tp_specs"


def nvcc_command(cu: str, out: str, arch: str, ptxas_report: bool = False) -> List[str]:
    """nvcc building `cu` into the shared library `out`; ``ptxas_report``: ptxas prints each kernel's resources
    (registers, spills) to stderr (``ptxas_registers``)."""
    nvcc = os.environ.get("NVCC") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(nvcc):
        nvcc = "nvcc"
    # No fast math: float64 must match the reference to ~1e-12.
    return [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-lineinfo", "-shared", "-Xcompiler", "-fPIC",
            "-I", str(_CSRC), cu, "-o", out] + (["-Xptxas", "-v"] if ptxas_report else [])


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(r"(\d+) bytes spill stores")
_PTXAS_PROPERTIES = re.compile(r"Function properties for (\w+)")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


class PtxasKernel(NamedTuple):
    registers: int
    spill_stores: int  # bytes
    smem: int = 0  # bytes of static shared memory per block


def ptxas_kernels(report: str) -> Dict[str, PtxasKernel]:
    """Registers, spill-store bytes and static shared memory per kernel (by mangled name) in the stderr of an nvcc
    run with ``ptxas_report``: each entry's lines run from "Compiling entry function" to its "Used N registers";
    its spills are those of its own "Function properties" block (not of the device functions it calls, listed
    beside it)."""
    out: Dict[str, PtxasKernel] = {}
    entry, block, spills = None, None, 0
    for line in report.splitlines():
        m = _PTXAS_ENTRY.search(line)
        if m:
            entry, block, spills = m.group(1), None, 0
            continue
        m = _PTXAS_PROPERTIES.search(line)
        if m:
            block = m.group(1)
            continue
        m = _PTXAS_SPILLS.search(line)
        if m and entry and block == entry:
            spills = int(m.group(1))
        m = _PTXAS_REGISTERS.search(line)
        if m and entry:
            smem = _PTXAS_SMEM.search(line)
            out[entry] = PtxasKernel(int(m.group(1)), spills, int(smem.group(1)) if smem else 0)
            entry = None
    return out


def ptxas_registers(report: str) -> Dict[str, int]:
    """Registers per kernel (by mangled name) in the stderr of an nvcc run with ``ptxas_report``."""
    return {name: k.registers for name, k in ptxas_kernels(report).items()}


def compile_cached(so: Path, source: Callable[[], str], name: str, arch: str, what: str,
                   revise: Optional[Callable[[str], Optional[str]]] = None) -> str:
    """Path of the library `so`: built already, or `source()` compiled by nvcc for `arch` now (as
    `name`.cu in a temporary folder beside it, moved into place atomically: concurrent builders
    race harmlessly). `what` names the library in the error when nvcc fails. `revise`: called with each
    build's ptxas report; the source it returns is built next, and the last build is the library: None keeps
    the build just made, a source built already keeps that build (no rebuild)."""
    if so.exists():
        return str(so)
    so.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=so.parent) as tmp:
        cu = os.path.join(tmp, f"{name}.cu")
        built: Dict[str, str] = {}  # source -> its library in tmp
        src: Optional[str] = source()
        while src is not None and src not in built:
            if len(built) == MAX_BUILDS:
                raise RuntimeError(f"{what}: the build revised its source more than {MAX_BUILDS - 1} times")
            out = os.path.join(tmp, f"lib{len(built)}.so")
            nth = f" (build {len(built) + 1}, of a revised source)" if built else ""
            Path(cu).write_text(src)
            r = subprocess.run(nvcc_command(cu, out, arch, ptxas_report=revise is not None), capture_output=True,
                               text=True)
            if r.returncode != 0:
                raise RuntimeError(f"nvcc failed for {what}{nth}:\n{r.stderr[-4000:]}")
            built[src], last = out, src
            src = revise(r.stderr) if revise is not None else None
        os.replace(built[src if src is not None else last], so)
    return str(so)


def cap_registers(threads: int, warps: int) -> int:
    """Registers per thread that ptxas may use under a minimum of `warps` resident warps per SM for blocks of
    `threads` (``_bounds``): 64K registers per SM over the blocks, in steps of 8, at most 255."""
    blocks = max(1, warps * 32 // threads)
    return min(255, 65536 // (blocks * threads) // 8 * 8)


_DBWD_F32_KERNEL = re.compile(r"\d+dbwd_kernel_[a-z]+IfL")  # mangled dbwd_kernel_<tag><float, ...>
_FWD_F64_KERNEL = re.compile(r"\d+fwd_kernelIdE")  # mangled fwd_kernel<double> (not dfwd_kernel)
_DBWD_F64_KERNEL = re.compile(r"\d+dbwd_kernel_[a-z]+IdL")  # mangled dbwd_kernel_<tag><double, ...>


def _rule_kernels(kernels: Dict[str, PtxasKernel], pattern: "re.Pattern[str]", family: str, what: str,
                  rule: str) -> List[PtxasKernel]:
    """The report's kernels that a build-time rule reads (mangled names matching ``pattern``). None where the report
    has kernels of the ``family`` (a name part) warns: the mangled names are not what the rule knows, so the
    ``rule`` was not applied."""
    found = [k for name, k in kernels.items() if pattern.search(name)]
    if not found and any(family in name for name in kernels):
        warnings.warn(f"the ptxas report names no {what} kernel that {pattern.pattern!r} matches: the {rule} was not "
                      "applied")
    return found


def _dbwd_capped(threads: int, tune: Tuning, kernels: Dict[str, PtxasKernel]) -> Optional[int]:
    """``dbwd_min_warps32`` for the second build: ``dbwd_auto_warps32`` where the double backward's float32 per-edge
    kernel needed more registers than that minimum of warps per SM leaves (session 40, H200: mace_large's 222 ->
    168, its float32 double backward 6.5 % faster; the plans already under the cap ran 0-4 % slower capped), else
    None. Only without a cap asked for (``dbwd_min_warps32``, ``min_warps32``)."""
    if not tune.dbwd_auto_warps32 or tune.dbwd_min_warps32 or tune.min_warps32:
        return None
    used = [k.registers for k in _rule_kernels(kernels, _DBWD_F32_KERNEL, "dbwd_kernel_", "float32 double-backward",
                                               "register cap rule")]
    if not used or max(used) <= cap_registers(threads, tune.dbwd_auto_warps32):
        return None
    return tune.dbwd_auto_warps32


def _fwd_uncapped(threads: int, tune: Tuning, kernels: Dict[str, PtxasKernel]) -> Optional[int]:
    """``fwd_min_warps64`` for the second build: ``fwd_auto_warps64`` where the float64 forward kernel spilled at
    least ``fwd_spill_bytes`` under the float64 minimum of warps (FWD_SPILL_BYTES: nequip_l3 gains, sevennet_l3i5's
    few spilled words do not pay for a resident block), else None. Only without a forward minimum asked for
    (``fwd_min_warps64``), and only where it lowers the float64 minimum of resident blocks (``_bounds``)."""
    if not tune.fwd_auto_warps64 or tune.fwd_min_warps64 or not tune.min_warps64:
        return None
    if max(1, tune.fwd_auto_warps64 * 32 // threads) >= max(1, tune.min_warps64 * 32 // threads):
        return None
    spills = [k.spill_stores for k in _rule_kernels(kernels, _FWD_F64_KERNEL, "fwd_kernel", "float64 forward",
                                                    "forward's register rule")]
    return tune.fwd_auto_warps64 if spills and max(spills) >= max(1, tune.fwd_spill_bytes) else None


def _gy_through_smem(tune: Tuning, kernels: Dict[str, PtxasKernel]) -> Optional[int]:
    """``gy_smem`` for the second build: 1 where the float64 double backward's part-1 kernel (one block per receiver
    or receiver parts) spilled at least ``gy_spill_bytes`` (GY_SPILL_BYTES: the shapes that gained), else None.
    Only without ``gy_smem`` asked for. The switch is the library's: the backward and float32 kernels take it too."""
    if not tune.gy_spill_bytes or tune.gy_smem:
        return None
    spills = [k.spill_stores for k in _rule_kernels(kernels, _DBWD_F64_KERNEL, "dbwd_kernel_", "float64 double-backward",
                                                    "grad_y rule")]
    return 1 if spills and max(spills) >= tune.gy_spill_bytes else None


_PART1_F64_KERNEL = re.compile(r"\d+d?bwd_kernel_([bd][sd])IdL")  # mangled (d)bwd_kernel_<tag><double, ...>


def _g_through_smem(tune: Tuning, kernels: Dict[str, PtxasKernel]) -> Optional[int]:
    """``g_smem`` for the second build: the bits (G_SMEM_BIT) of the part-1 kernels whose float64 instantiation (any
    of its variants) spilled at least ``g_spill_bytes``, else None. A kernel that serves both dtypes takes it in
    both. Only without ``g_smem`` asked for."""
    if not tune.g_spill_bytes or tune.g_smem:
        return None
    _rule_kernels(kernels, _PART1_F64_KERNEL, "bwd_kernel_", "float64 part-1", "grad_out rule")  # (warns if none)
    bits = 0
    for name, k in kernels.items():
        m = _PART1_F64_KERNEL.search(name)
        if m and k.spill_stores >= tune.g_spill_bytes:
            bits |= G_SMEM_BIT[m.group(1)]
    return bits or None


def _second_look(struct, tune: Tuning, kernels: Dict[str, PtxasKernel]) -> Tuning:
    """``tune`` with the changes that the first build's kernels call for: the double backward's float32 cap of
    ``_dbwd_capped``, the forward's float64 minimum of ``_fwd_uncapped``, grad_y through shared memory of
    ``_gy_through_smem``, grad_out in shared memory of ``_g_through_smem`` (all that fire, as measured in
    session 64)."""
    _, live, threads, _ = _analyse(struct)  # threads per block: the plan analysed once
    changes = {k: v for k, v in (("dbwd_min_warps32", _dbwd_capped(threads, tune, kernels)),
                                 ("fwd_min_warps64", _fwd_uncapped(fwd_block(live, threads, tune)[0], tune, kernels)),
                                 ("gy_smem", _gy_through_smem(tune, kernels)),
                                 ("g_smem", _g_through_smem(tune, kernels))) if v is not None}
    return tune._replace(**changes)


_BWD_F32_SHARED = re.compile(r"\d+bwd_kernel_bsIfL")  # mangled bwd_kernel_bs<float, ...>


def resident_blocks(threads: int, kernel: PtxasKernel) -> int:
    """Blocks of `threads` threads per SM (sm_90) that `kernel`'s registers (allocated in steps of 8 per thread)
    and static shared memory (plus the 1 KB the runtime reserves per block) allow, at most 32 and 2048 threads."""
    blocks = min(32, 2048 // threads, 65536 // ((kernel.registers + 7) // 8 * 8 * threads))
    return min(blocks, SMEM_PER_SM // (kernel.smem + 1024)) if kernel.smem else blocks


def _g32_trial(struct, tune: Tuning, base: Tuning, base_source: str) -> Optional[str]:
    """The trial source of ``Tuning.g32_auto``: ``base`` (the second look, whose source is ``base_source``) with the
    float32 backward's kernel (G_SMEM_BIT "bs") staging grad_out in shared memory, where that changes the source;
    else None. Only without ``g_smem`` asked for, and where the float64 rule did not give that kernel the bit."""
    if not tune.g32_auto or tune.g_smem or base.g_smem & G_SMEM_BIT["bs"]:
        return None
    trial = generate(struct, base._replace(g_smem=base.g_smem | G_SMEM_BIT["bs"]))
    return trial if trial != base_source else None


def _g32_gained(threads: int, first: Dict[str, PtxasKernel], trial: Dict[str, PtxasKernel]) -> bool:
    """Whether the trial build's float32 backward kernel gains resident blocks per SM over the first build's while
    its registers fall by at most G32_MAX_REGISTER_DROP (the worst variant of each build). The first build stands
    for the second look's, which is not built before the trial: the second look's changes left that kernel's
    registers and blocks as they were where they touched it (ptxas, session 66: gy_smem adds shared memory to it,
    nequip_l3 and sevennet_l3i5 168 registers in both builds, 12 and 3 blocks)."""
    a = _rule_kernels(first, _BWD_F32_SHARED, "bwd_kernel_", "float32 backward", "float32 grad_out rule")
    b = [k for name, k in trial.items() if _BWD_F32_SHARED.search(name)]
    if not a or not b:
        return False
    registers_a, registers_b = max(k.registers for k in a), max(k.registers for k in b)
    blocks_a = min(resident_blocks(threads, k) for k in a)
    blocks_b = min(resident_blocks(threads, k) for k in b)
    return blocks_b > blocks_a and registers_b >= (1 - G32_MAX_REGISTER_DROP) * registers_a


class _Revisions:
    """``compile_cached``'s ``revise`` for ``build``: after the first build, the second look's source
    (``_second_look``), or, where ``_g32_trial`` gives one, the trial's; after the trial, nothing where
    ``_g32_gained`` (the trial is the library), else the second look's source (the first build's where they are
    the same: no rebuild)."""

    def __init__(self, struct, tune: Tuning):
        self.struct, self.tune = struct, tune
        self.threads = _analyse(struct)[2]
        self.first: Optional[Dict[str, PtxasKernel]] = None  # the first build's kernels
        self.base = ""  # the second look's source
        self.trial = False  # whether the last build was the trial

    def __call__(self, report: str) -> Optional[str]:
        kernels = ptxas_kernels(report)
        if self.first is None:
            base = _second_look(self.struct, self.tune, kernels)
            self.first, self.base = kernels, generate(self.struct, base)
            trial = _g32_trial(self.struct, self.tune, base, self.base)
            self.trial = trial is not None
            return trial if trial is not None else self.base
        if self.trial and not _g32_gained(self.threads, self.first, kernels):
            self.trial = False
            return self.base
        return None


def build(struct, arch: str) -> str:
    """Path of the built library for this structure and GPU arch (e.g. 'sm_90'); cached."""
    key = structure_key(struct)
    tune = tuning()
    so = _cache_dir() / f"{key}-{arch}-v{GEN_VERSION}{tune.suffix()}.so"
    return compile_cached(so, lambda: generate(struct, tune), f"tp_spec_{key}", arch, f"tp_conv plan {key}",
                          revise=_Revisions(struct, tune))


def plan_structure(plan) -> tuple:
    """Structure tuple of a ``tp_problem.Plan`` (or anything with paths/cg_ptr/cg_idx/cg_val tensors).
    A ``TensorProductConv`` gives its float64 CG values (``cg_values``), not its ``cg_val`` buffer,
    which follows the module's dtype: one library then serves the module in float32 and float64."""
    vals = plan.cg_values if hasattr(plan, "cg_values") else plan.cg_val.tolist()
    return structure(plan.paths.tolist(), plan.cg_ptr.tolist(), plan.cg_idx.tolist(), vals)


def main(argv=None) -> None:
    """Write the generated source of a test-style 'uvu' problem (under ``$MD_ACCEL_TP_TUNING``, as a build would):
    python -m md_accel.ops._codegen IN1 IN2 LMAX OUT.cu [parity]"""
    import sys

    from .tp_problem import TPProblem

    a = argv if argv is not None else sys.argv[1:]
    plan = TPProblem.all_uvu(a[0], a[1], int(a[2]), len(a) > 4 and a[4] == "parity").lower()
    Path(a[3]).write_text(generate(plan_structure(plan), tuning()))


if __name__ == "__main__":
    main()
