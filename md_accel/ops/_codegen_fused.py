"""Plan-specialised CUDA kernels of ``md_accel::tp_conv_fused_{fwd,bwd}``: the tensor-product
convolution with the radial MLP's last (linear) layer fused in, ``w = hidden @ W_last``, so the
per-edge weights ``w [E, weight_numel]`` and their gradient never reach device memory.

Same plan-structure specialisation as ``_codegen.py`` (paths, multiplicities and CG sparsity fixed
at compile time, CG values read at run time), plus the hidden width H. Mapping (see
.notes/fused_radial.md):

* The paths are partitioned into *groups* (one multiplicity each; an output block and a weight
  block never straddle two groups). A group owns P weight-column blocks of M = mul rounded up to
  a warp: its tile ``W_last[:, group columns]`` (H x P*M) sits in shared memory, shared by the
  block's S = kThreads / M edge *slots* (``MD_ACCEL_FUSED_W=global``: read through L1 / L2).
* Block b owns a contiguous range of receivers (near-equal edge counts); slot s a contiguous part
  of it. Groups run one after the other over the same receivers.
* Per chunk of kB = 16 consecutive edges of a slot: the hidden rows are staged transposed in
  shared memory and each warp computes the weights of its 32 channels of the P column blocks on
  the tensor cores (``w = h @ W`` as 16 x 32 tiles: 3xTF32 ``mma.m16n8k8`` in float32, DMMA
  ``mma.m8n8k4`` in float64; ``csrc/mma.cuh``) into a [column][edge] tile in shared memory, then
  runs the conv body of the group, each thread reading its channel's weights from that tile.
* Backward, per chunk: the same weights, the conv backward (grad_y by warp reduce-scatter,
  grad_x contributions to a work row per edge, summed per sender afterwards) overwriting each
  weight with its ``grad_w`` in the tile, then ``grad_hidden = grad_w @ W^T`` on the tensor cores
  (K split over the slot's warps, fixed-order sums). ``grad_w`` goes to device memory only when
  asked (training: ``grad_W_last = hidden^T @ grad_w`` is then a GEMM outside).
* Every sum has a fixed order that does not depend on the grid: results are bit-reproducible.

Cache: ``$MD_ACCEL_BUILD_DIR/tp_specs/fused-<structure hash>-h<H>-<arch>-v<FUSED_GEN_VERSION>[-wg].so``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Tuple

from ._codegen import (Unsupported, _analyse, _bwd_contractions, _bwd_weight_grad, _cache_dir, _covered_fn,
                       _fwd_component, _in1_elements, _Path, _w_elements, _zero_uncovered, compile_cached,
                       structure_key)

FUSED_GEN_VERSION = 8  # bump when the generated code changes: names the cache entries
THREADS = 256          # threads per block (all groups; S = THREADS // M edge slots)
CHUNK = 16             # edges per chunk (kB): the m16 of the tensor-core tiles
W_TILE_BYTES = 66 * 1024   # shared memory for one group's W_last tile (P chosen to fit)
MAX_COLS = 4           # weight column blocks per group (P)
OUT_BUDGET = {4: 24, 8: 12}  # output / grad_out components per channel per group, by element size
MAX_V = 32             # used y columns per group (grad_y reduce-scatter width)
BWD_EDGE_UNROLL = 1    # backward edge loop: not unrolled keeps it within 128 registers
SMEM_MAX = 227 * 1024
BWD_SMEM_TARGET = 112 * 1024  # a backward group within this keeps two blocks per SM (H100 / H200)
W_SOURCE_ENV = "MD_ACCEL_FUSED_W"  # "smem" (default) or "global": where the kernels read W_last
WAVES = 1              # blocks per resident block slot: the ranges are edge-balanced already


def _fused_key(struct) -> str:
    """Cache key of the fused library: the integer tables only (the values are read at run time)."""
    return structure_key(struct[:3])


def _cg_smem(q: int) -> str:
    """CG value q as the fused kernels read it: staged in shared memory from the call's cg_val (these
    kernels do not compile the values in)."""
    return f"s_cg[{q}]"


def _pad(esize: int) -> int:
    """Row padding (elements) of the shared-memory operands of the tensor-core tiles: 32 bytes,
    so the rows a fragment load touches start in different banks."""
    return 32 // esize


def _round32(m: int) -> int:
    return (m + 31) // 32 * 32


def _pow2(n: int) -> int:
    v = 1
    while v < n:
        v *= 2
    return v


def _distinct(items) -> list:
    out = []
    for k in items:
        if k not in out:
            out.append(k)
    return out


class _Group:
    """Paths of one multiplicity computed together (one W_last tile in shared memory)."""

    def __init__(self, paths: List[_Path]):
        self.paths = paths
        self.mul = paths[0].mul
        self.M = _round32(self.mul)
        self.S = THREADS // self.M
        self.WPS = self.M // 32
        self.wkeys = _distinct(p.w_key for p in paths)
        self.P = len(self.wkeys)
        self.out_keys = _distinct(p.out_key for p in paths)
        self.in1_keys = _distinct(p.in1_key for p in paths)
        self.y_cols = sorted({p.in2_off + j for p in paths for (_, _, j, _) in p.nz})
        self.V = _pow2(len(self.y_cols))
        self.comps = sum(k[2] for k in self.out_keys)
        self.w_global = False  # W_last read from global memory (L1 / L2) instead of a shared-memory tile

    def col(self, p: _Path) -> int:
        return self.wkeys.index(p.w_key)


def _units(paths: List[_Path]) -> List[List[_Path]]:
    """Paths that must share a group: linked by a common output block or weight block."""
    parent = list(range(len(paths)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a in range(len(paths)):
        for b in range(a):
            if paths[a].out_key == paths[b].out_key or paths[a].w_key == paths[b].w_key:
                parent[find(a)] = find(b)
    units: Dict[int, List[_Path]] = {}
    for i, p in enumerate(paths):
        units.setdefault(find(i), []).append(p)
    return list(units.values())


def partition(live: List[_Path], esize: int, hidden: int, nnz: int) -> List[_Group]:
    """Groups per multiplicity (largest first): units ordered by their y columns (a group then
    reduces few grad_y columns) and packed greedily under the W tile, column, register and
    backward shared-memory budgets."""
    groups: List[_Group] = []
    for mul in sorted({p.mul for p in live}, reverse=True):
        M = _round32(mul)
        if M > THREADS:
            raise Unsupported(f"multiplicity {mul} > {THREADS}")
        pmax = max(1, min(MAX_COLS, (W_TILE_BYTES // (hidden * esize) - _pad(esize)) // M))
        units = _units([p for p in live if p.mul == mul])
        units.sort(key=lambda u: (min(p.in2_off for p in u), min(p.in1_off for p in u), min(p.idx for p in u)))
        cur: List[_Path] = []
        limit = 0  # shared memory a group may grow to: the 2-blocks/SM target where its start fits it
        for unit in units:
            g = _Group(cur + unit)
            if cur and (g.P > pmax or g.comps > OUT_BUDGET[esize] or len(g.y_cols) > MAX_V
                        or _smem_bytes([g], nnz, hidden, esize, bwd=True) > limit):
                groups.append(_Group(cur))
                cur = []
            if not cur:
                alone = _smem_bytes([_Group(unit)], nnz, hidden, esize, bwd=True)
                limit = BWD_SMEM_TARGET if alone <= BWD_SMEM_TARGET else SMEM_MAX
            cur = cur + unit
        groups.append(_Group(cur))
    for g in groups:
        if len(g.y_cols) > MAX_V:
            raise Unsupported(f"a group uses {len(g.y_cols)} y columns > {MAX_V}")
        if _align(hidden * _ld_w(g, esize), esize) * esize > 2 * W_TILE_BYTES:
            raise Unsupported("a weight block too wide for a shared-memory tile")
    return groups


# --- shared-memory layout (elements of T) ---------------------------------------------------------

def _align(n: int, esize: int) -> int:
    """Elements rounded up to a 16-byte multiple."""
    per = 16 // esize
    return (n + per - 1) // per * per


def _slot_area(g: _Group, hidden: int, esize: int, bwd: bool) -> Tuple[int, int]:
    """(hidden chunk, weight chunk) elements per edge slot of a group: the hidden rows [j][edge]
    (rows of CHUNK + pad), the weights [column][edge] (rows of CHUNK); backward: grad_y partials
    reuse the first area, grad_w the second, then grad_hidden partials."""
    hb = _align(max(hidden * (CHUNK + _pad(esize)), CHUNK * g.WPS * g.V if bwd else 0), esize)
    gwb = _align(max(g.P * g.M * CHUNK, g.WPS * CHUNK * hidden if bwd else 0), esize)
    return hb, gwb


def _ld_w(g: _Group, esize: int) -> int:
    """Row stride of the group's W tile in shared memory (elements)."""
    return g.P * g.M + _pad(esize)


def _w_tile(g: _Group, hidden: int, esize: int) -> int:
    return 0 if g.w_global else _align(hidden * _ld_w(g, esize), esize)


def _smem_bytes(groups: List[_Group], nnz: int, hidden: int, esize: int, bwd: bool) -> int:
    """CG values, then per group (groups run in turn and lay out afresh) its W tile and edge slots."""
    per = max(_w_tile(g, hidden, esize) + g.S * sum(_slot_area(g, hidden, esize, bwd)) for g in groups)
    return (_align(nnz, esize) + per) * esize


def _layout(groups: List[_Group], nnz: int, hidden: int, esize: int, bwd: bool) -> Dict[str, int]:
    """Dynamic shared memory (elements of T) of a kernel; sets the groups' slots S (at most
    THREADS // M, fewer for narrow groups where shared memory is short)."""
    for cap in (8, 4, 2, 1):
        for g in groups:
            g.S = min(THREADS // g.M, cap)
        total = _smem_bytes(groups, nnz, hidden, esize, bwd)
        if total <= SMEM_MAX:
            return {"cg": _align(nnz, esize), "bytes": total}
    raise Unsupported(f"fused kernels need {total} B of shared memory > {SMEM_MAX}")


# --- device code -----------------------------------------------------------------------------------

def _w_fill(g: _Group, I: str, esize: int) -> str:
    """Load the group's W_last columns into s_W[j * ldW + p * M + u] (zero for u >= mul)."""
    s = [f"{I}for (int q = threadIdx.x; q < kH * {g.P * g.M}; q += kThreads) {{\n",
         f"{I}  const int j = q / {g.P * g.M}, c = q - j * {g.P * g.M}, p = c / {g.M}, u = c - p * {g.M};\n",
         f"{I}  T v = T(0);\n",
         f"{I}  if (u < {g.mul}) {{\n"]
    for pl, (w_off, _, stride) in enumerate(g.wkeys):
        s.append(f"{I}    {'if' if pl == 0 else 'else if'} (p == {pl}) v = __ldg(a.W + int64_t(j) * a.d.w + {w_off} + u * {stride});\n")
    s.append(f"{I}  }}\n{I}  s_W[j * {_ld_w(g, esize)} + c] = v;\n{I}}}\n")
    return "".join(s)


def _w_source(g: _Group, I: str, esize: int) -> str:
    """`wt(k, p, u)` = W_last[k, column of block p, channel u] (zero for u >= mul): from a
    shared-memory tile filled here, or (g.w_global) read through L1 / L2."""
    if not g.w_global:
        return (f"{I}T* s_W = s_grp;  // W_last[:, group columns], row stride {_ld_w(g, esize)}\n"
                + _w_fill(g, I, esize)
                + f"{I}auto wt = [&](int k, int p, int u) {{ return s_W[k * {_ld_w(g, esize)} + p * {g.M} + u]; }};\n")
    col = "-1"
    for pl in reversed(range(g.P)):
        w_off, _, stride = g.wkeys[pl]
        col = f"{w_off} + u * {stride}" if pl == g.P - 1 else f"p == {pl} ? {w_off} + u * {stride} : {col}"
    return (f"{I}auto wt = [&](int k, int p, int u) {{\n"
            f"{I}  return u < {g.mul} ? __ldg(a.W + int64_t(k) * a.d.w + ({col})) : T(0);\n"
            f"{I}}};\n")


def _group_head(gi: int, g: _Group, I: str, what: str, hidden: int, esize: int) -> List[str]:
    return [f"{I}{{  // {what} group {gi}: paths " + ", ".join(str(p.idx) for p in g.paths)
            + f"; {g.mul} channels (M = {g.M}) x {g.S} slot(s); {g.P} weight column block(s); "
            f"y columns {g.y_cols}\n",
            f"{I}  __syncthreads();  // the previous group is done with shared memory (and s_cg is loaded)\n",
            _w_source(g, I + "  ", esize),
            f"{I}  T* s_slots = s_grp + {_w_tile(g, hidden, esize)};\n",
            f"{I}  __syncthreads();\n",
            f"{I}  const int slot = threadIdx.x / {g.M}, u = threadIdx.x % {g.M};\n",
            f"{I}  const int lane = threadIdx.x & 31, warp = u >> 5;  // warp within the slot\n",
            f"{I}  if (slot < {g.S}) {{\n",
            f"{I}    int64_t n_lo, n_hi;\n",
            f"{I}    receiver_part(a.dst_ptr, bn0, bn1, slot, {g.S}, n_lo, n_hi);\n",
            f"{I}    const int64_t e_lo = a.dst_ptr[n_lo], e_hi = a.dst_ptr[n_hi];\n"]


def _chunk_head(g: _Group, I: str, esize: int, s_w: str) -> str:
    """Start of a chunk of kB edges: the slot stages their hidden rows, each warp writes the weights
    of its channels into the slot's [column][edge] tile `s_w` (read back by the writing warp only)."""
    sync = "__syncwarp();" if g.M == 32 else f"slot_sync(1 + slot, {g.M});"
    return (f"{I}for (int64_t e0 = e_lo; e0 < e_hi; e0 += kB) {{\n"
            f"{I}  {sync}  // the slot is done with the previous chunk's shared memory\n"
            f"{I}  stage_hidden<T>(s_h, a.h, e0, e_hi, u, {g.M});\n"
            f"{I}  {sync}\n"
            f"{I}  edge_weights<T, {g.P}>({s_w}, s_h, wt, {g.M}, warp, lane);\n"
            f"{I}  __syncwarp();\n")


def _weight(g: _Group, pl: int, s_w: str) -> str:
    """The weight (or grad_w) of column block pl, channel u, edge b in the slot's tile."""
    return f"{s_w}[({pl * g.M} + u) * kB + (b ^ gw_swizzle<T>({pl * g.M} + u))]"


def _edge_loads(g: _Group, I: str) -> str:
    """Edge e's operands for channel u: its y columns the group uses, and the sender's x components
    the group's CG non-zeros read."""
    used: Dict = {}
    for p in g.paths:
        for (_, i, _, _) in p.nz:
            used.setdefault(p.in1_key, set()).add(i)
    s = [f"{I}const T* xr = a.x + __ldg(a.src + e) * a.d.in1;\n", f"{I}const T* yr = a.y + e * a.d.in2;\n"]
    s += [f"{I}const T y{c} = __ldg(yr + {c});\n" for c in g.y_cols]
    for key in g.in1_keys:
        for i in sorted(used.get(key, ())):
            s.append(f"{I}const T {_xn(key)}_{i} = __ldg(xr + {key[0]} + u * {key[2]} + {i});\n")
    return "".join(s)


def _xn(key) -> str:
    return f"x{key[0]}"


def _acc(key) -> str:
    return f"acc{key[0]}"


def _gn(key) -> str:
    return f"g{key[0]}"


def _flush(g: _Group, I: str) -> str:
    s = [f"{I}if (u < {g.mul}) {{\n", f"{I}  T* orow = a.out + cur * a.d.out;\n"]
    for key in g.out_keys:
        for k in range(key[2]):
            s.append(f"{I}  orow[{key[0]} + u * {key[2]} + {k}] = {_acc(key)}_{k};\n")
    s.append(f"{I}}}\n")
    for key in g.out_keys:
        s.append(f"{I}" + " ".join(f"{_acc(key)}_{k} = T(0);" for k in range(key[2])) + "\n")
    return "".join(s)


def _fwd_group(gi: int, g: _Group, hidden: int, esize: int) -> str:
    I = "  "
    s = _group_head(gi, g, I, "forward", hidden, esize)
    I4 = I + "    "
    hb, wb = _slot_area(g, hidden, esize, False)
    s.append(f"{I4}T* s_h = s_slots + slot * {hb + wb};  // the slot's hidden chunk\n")
    s.append(f"{I4}T* s_w = s_h + {hb};  // its weights [column][edge]\n")
    for key in g.out_keys:
        s.append(f"{I4}T " + ", ".join(f"{_acc(key)}_{k} = T(0)" for k in range(key[2])) + ";\n")
    s.append(f"{I4}int64_t cur = n_lo;  // receiver being accumulated\n")
    s.append(_chunk_head(g, I4, esize, "s_w"))
    I5 = I4 + "  "
    s.append(f"{I5}#pragma unroll\n{I5}for (int b = 0; b < kB; ++b) {{\n")
    I6 = I5 + "  "
    s.append(f"{I6}const int64_t e = e0 + b;\n{I6}if (e >= e_hi) break;\n")
    s.append(f"{I6}const int64_t dn = __ldg(a.dst + e);\n")
    s.append(f"{I6}while (cur < dn) {{  // receivers before dn are complete\n")
    s.append(_flush(g, I6 + "  "))
    s.append(f"{I6}  ++cur;\n{I6}}}\n")
    s.append(f"{I6}if (u < {g.mul}) {{\n")
    I7 = I6 + "  "
    s.append(_edge_loads(g, I7))
    for p in g.paths:
        s.append(f"{I7}{{  // path {p.idx}: l {p.l1} x {p.l2} -> {p.l3}, {len(p.nz)} non-zeros\n")
        s.append(f"{I7}  const T wp = {_weight(g, g.col(p), 's_w')};\n")
        xk, acc = _xn(p.in1_key), _acc(p.out_key)
        for k in sorted({k for (_, _, _, k) in p.nz}):
            s.append(f"{I7}  {acc}_{k} = fma(wp, {_fwd_component(p, k, xk, _cg_smem)}, {acc}_{k});\n")
        s.append(f"{I7}}}\n")
    s.append(f"{I6}}}\n{I5}}}\n{I4}}}\n")
    s.append(f"{I4}while (cur < n_hi) {{\n")
    s.append(_flush(g, I4 + "  "))
    s.append(f"{I4}  ++cur;\n{I4}}}\n")
    s.append(f"{I}  }}\n{I}}}\n")
    return "".join(s)


def _bwd_group(gi: int, g: _Group, first: dict, tables: List[str], tag: str, hidden: int, esize: int,
               live: List[_Path]) -> str:
    """Backward body of one group (see the module docstring); the first zeroes the columns of the work rows and
    grad_w that no path of ``live`` writes."""
    I = "  "
    G = f"{tag}{gi}"
    gy_first = gi == 0
    slot_of = {c: n for n, c in enumerate(g.y_cols)}
    if g.WPS == 1:
        cols = ", ".join(str(g.y_cols[v]) if v < len(g.y_cols) else "-1" for v in range(g.V))
        tables.append(f"__constant__ int kColOf{G}[{g.V}] = {{{cols}}};\n")
        if gy_first:
            tables.append(_covered_fn(f"gy_cols{G}", g.y_cols))
    else:
        slots = ", ".join(str(slot_of.get(c, -1)) for c in range(max(g.y_cols) + 1))
        tables.append(f"__constant__ int kSlotOf{G}[{max(g.y_cols) + 1}] = {{{slots}}};\n")
    sync = "__syncwarp();" if g.M == 32 else f"slot_sync(1 + slot, {g.M});"
    s = _group_head(gi, g, I, "backward", hidden, esize)
    I4 = I + "    "
    hb, gwb = _slot_area(g, hidden, esize, True)
    s.append(f"{I4}T* s_h = s_slots + slot * {hb + gwb};  // hidden chunk, then grad_y partials\n")
    if g.WPS > 1:
        s.append(f"{I4}T* s_red = s_h;  // grad_y partials of the slot's warps\n")
    s.append(f"{I4}T* s_gw = s_h + {hb};  // grad_w of the chunk [column][edge], then grad_hidden partials\n")
    for key in g.out_keys:
        s.append(f"{I4}T " + ", ".join(f"{_gn(key)}_{k} = T(0)" for k in range(key[2])) + ";\n")
    s.append(f"{I4}int64_t cur = -1;  // receiver whose grad_out row is in registers\n")
    s.append(_chunk_head(g, I4, esize, "s_gw"))  # each thread overwrites its weights with grad_w
    I5 = I4 + "  "
    s.append(f"{I5}{sync}  // s_h is read: it now holds grad_y partials\n")
    s.append(f"{I5}#pragma unroll {BWD_EDGE_UNROLL}\n{I5}for (int b = 0; b < kB; ++b) {{\n")
    I6 = I5 + "  "
    s.append(f"{I6}const int64_t e = e0 + b;\n")
    s.append(f"{I6}const bool act = e < e_hi;  // uniform over the slot\n")
    s.append(f"{I6}T gy[{g.V}];\n{I6}#pragma unroll\n{I6}for (int v = 0; v < {g.V}; ++v) gy[v] = T(0);\n")
    s.append(f"{I6}T sw[{g.P}];\n{I6}#pragma unroll\n{I6}for (int p = 0; p < {g.P}; ++p) sw[p] = T(0);\n")
    s.append(f"{I6}if (act) {{\n")
    I7 = I6 + "  "
    s.append(f"{I7}const int64_t dn = __ldg(a.dst + e);\n")
    s.append(f"{I7}if (dn != cur) {{\n{I7}  cur = dn;\n{I7}  if (u < {g.mul}) {{\n")
    s.append(f"{I7}    const T* grow = a.g + dn * a.d.out;\n")
    for key in g.out_keys:
        for k in range(key[2]):
            s.append(f"{I7}    {_gn(key)}_{k} = __ldg(grow + {key[0]} + u * {key[2]} + {k});\n")
    s.append(f"{I7}  }}\n{I7}}}\n")
    s.append(f"{I7}if (u < {g.mul}) {{\n")
    I8 = I7 + "  "
    s.append(_edge_loads(g, I8))
    for key in g.in1_keys:
        s.append(f"{I8}T " + ", ".join(f"gx{key[0]}_{i} = T(0)" for i in range(key[2])) + ";\n")
    for pl in range(g.P):
        s.append(f"{I8}const T w{pl} = {_weight(g, pl, 's_gw')};\n")
    for p in g.paths:
        s.append(f"{I8}{{  // path {p.idx}: l {p.l1} x {p.l2} -> {p.l3}, {len(p.nz)} non-zeros\n")
        I9 = I8 + "  "
        s.append(f"{I9}const T wp = w{g.col(p)};\n")
        js = sorted({j for (_, _, j, _) in p.nz})
        iset = sorted({i for (_, i, _, _) in p.nz})
        s.append(f"{I9}T " + ", ".join(f"py{j} = T(0)" for j in js) + ";\n")
        s.append(f"{I9}T " + ", ".join(f"px{i} = T(0)" for i in iset) + ";\n")
        xk, gk = _xn(p.in1_key), _gn(p.out_key)
        s.append(_bwd_contractions(p, I9, xk, gk, cg=_cg_smem))
        for j in js:
            v = slot_of[p.in2_off + j]
            s.append(f"{I9}gy[{v}] = fma(wp, py{j}, gy[{v}]);\n")
        for i in iset:
            s.append(f"{I9}gx{p.in1_key[0]}_{i} = fma(wp, px{i}, gx{p.in1_key[0]}_{i});\n")
        s.append(f"{I9}sw[{g.col(p)}] = {_bwd_weight_grad(p, xk, acc=f'sw[{g.col(p)}]')};\n")
        s.append(f"{I8}}}\n")
    s.append(f"{I8}if (a.gw != nullptr) {{\n")
    for pl, (w_off, _, stride) in enumerate(g.wkeys):
        s.append(f"{I8}  a.gw[e * a.d.w + {w_off} + u * {stride}] = sw[{pl}];\n")
    s.append(f"{I8}}}\n")
    for key in g.in1_keys:
        op = "=" if first.setdefault(("in1", key), gi) == gi else "+="
        for i in range(key[2]):
            s.append(f"{I8}a.work[e * a.d.in1 + {key[0]} + u * {key[2]} + {i}] {op} gx{key[0]}_{i};\n")
    s.append(f"{I7}}}\n")
    if gi == 0:
        s.append(_zero_uncovered(_in1_elements(live), "u", "a.d.in1", g.M, "a.work[e * a.d.in1 + q] = T(0);", I7))
        s.append(f"{I7}if (a.gw != nullptr) {{\n")
        s.append(_zero_uncovered(_w_elements(live), "u", "a.d.w", g.M, "a.gw[e * a.d.w + q] = T(0);", I7 + "  "))
        s.append(f"{I7}}}\n")
    s.append(f"{I6}}}\n")
    s.append(f"{I6}#pragma unroll\n{I6}for (int p = 0; p < {g.P}; ++p) {{\n"
             f"{I6}  const int c = p * {g.M} + u;\n"
             f"{I6}  s_gw[c * kB + (b ^ gw_swizzle<T>(c))] = sw[p];  // zero for idle channels and edges\n"
             f"{I6}}}\n")
    op = "=" if gy_first else "+="
    s.append(f"{I6}if (act) {{  // grad_y: sum over channels, fixed order\n")
    s.append(f"{I6}  const T mine = warp_reduce_scatter<{g.V}>(gy, lane);\n")
    s.append(f"{I6}  const bool holder = (lane & ({32 // g.V} - 1)) == 0;\n")
    if g.WPS == 1:
        s.append(f"{I6}  const int col = kColOf{G}[scatter_slot<{g.V}>(lane)];\n")
        s.append(f"{I6}  if (holder && col >= 0) a.gy[e * a.d.in2 + col] {op} mine;\n")
        if gy_first:
            s.append(f"{I6}  for (int q = lane; q < a.d.in2; q += 32)\n"
                     f"{I6}    if (!gy_cols{G}(q)) a.gy[e * a.d.in2 + q] = T(0);\n")
    else:
        s.append(f"{I6}  if (holder) s_red[(b * {g.WPS} + warp) * {g.V} + scatter_slot<{g.V}>(lane)] = mine;\n")
    s.append(f"{I6}}}\n")
    s.append(f"{I5}}}\n")
    s.append(f"{I5}{sync}  // s_gw and s_red are complete\n")
    if g.WPS > 1:
        s.append(f"{I5}for (int q = u; q < kB * a.d.in2; q += {g.M}) {{  // (edge, column): warps in order\n"
                 f"{I5}  const int b = q / a.d.in2, col = q - b * a.d.in2;\n"
                 f"{I5}  const int64_t e = e0 + b;\n"
                 f"{I5}  if (e >= e_hi) continue;\n"
                 f"{I5}  const int v = col < {max(g.y_cols) + 1} ? kSlotOf{G}[col] : -1;\n"
                 f"{I5}  if (v >= 0) {{\n"
                 f"{I5}    T sum = T(0);\n"
                 f"{I5}    for (int w = 0; w < {g.WPS}; ++w) sum += s_red[(b * {g.WPS} + w) * {g.V} + v];\n"
                 f"{I5}    a.gy[e * a.d.in2 + col] {op} sum;\n")
        if gy_first:
            s.append(f"{I5}  }} else {{\n{I5}    a.gy[e * a.d.in2 + col] = T(0);\n")
        s.append(f"{I5}  }}\n{I5}}}\n")
    gop = "=" if gi == 0 else "+="
    s.append(f"{I5}{{  // grad_hidden[e0 + b, :] {gop} grad_w[b, group columns] @ W^T (K split over warps)\n")
    s.append(f"{I5}  T acc[kH / 2];  // the warp's 16 x kH tile: element i at (tile_row, tile_col)\n")
    s.append(f"{I5}  grad_hidden<T, {g.P}>(acc, s_gw, wt, {g.M}, warp, lane);\n")
    if g.WPS == 1:
        s.append(f"{I5}  #pragma unroll\n"
                 f"{I5}  for (int i = 0; i < kH / 2; ++i) {{\n"
                 f"{I5}    const int64_t e = e0 + tile_row<T, kH>(i, lane);\n"
                 f"{I5}    if (e < e_hi) a.gh[e * kH + tile_col<T, kH>(i, lane)] {gop} acc[i];\n"
                 f"{I5}  }}\n")
    else:
        s.append(f"{I5}  {sync}  // every warp is done reading s_gw: it now holds per-warp partials\n"
                 f"{I5}  #pragma unroll\n"
                 f"{I5}  for (int i = 0; i < kH / 2; ++i)\n"
                 f"{I5}    s_gw[(warp * kB + tile_row<T, kH>(i, lane)) * kH + tile_col<T, kH>(i, lane)] = acc[i];\n"
                 f"{I5}  {sync}\n"
                 f"{I5}  for (int q = u; q < kB * kH; q += {g.M}) {{\n"
                 f"{I5}    const int b = q / kH;\n"
                 f"{I5}    const int64_t e = e0 + b;\n"
                 f"{I5}    if (e >= e_hi) break;\n"
                 f"{I5}    T sum = s_gw[q];\n"
                 f"{I5}    for (int w = 1; w < {g.WPS}; ++w) sum += s_gw[w * kB * kH + q];\n"
                 f"{I5}    a.gh[e0 * kH + q] {gop} sum;\n"
                 f"{I5}  }}\n")
    s.append(f"{I5}}}\n")
    s.append(f"{I4}}}\n{I}  }}\n{I}}}\n")
    return "".join(s)


_PRELUDE = r"""
// Generated by md_accel/ops/_codegen_fused.py (FUSED_GEN_VERSION {gen}) from a lowered tp_conv plan
// and the hidden width; do not edit. Structure key {key}: {num_paths} paths, {nnz} CG non-zeros.
#include <cuda_runtime.h>
#include <cstdint>
#include "mma.cuh"
#include "tp_fused_abi.h"

namespace md_accel {{
namespace {{

constexpr int kThreads = {threads};
constexpr int kH = {hidden};   // hidden width: W_last is [kH, weight_numel]
constexpr int kB = {chunk};    // edges per chunk
constexpr int kWaves = {waves};
constexpr int kNnz = {nnz};
constexpr int32_t kPaths[] = {{{paths}}};
constexpr int32_t kCgPtr[] = {{{cg_ptr}}};
constexpr int32_t kCgIdx[] = {{{cg_idx}}};

{covered}
template <typename T>
struct FusedArgs {{
  const T* x;
  const T* y;
  const T* h;     // [E, kH] hidden rows (receiver-sorted edges)
  const T* W;     // [kH, d.w] W_last
  const T* g;     // [N, d.out] grad_out (backward)
  T* out;         // [N, d.out] (forward)
  T* work;        // [E, d.in1] per-edge grad_x contributions (backward)
  T* gy;          // [E, d.in2]
  T* gh;          // [E, kH] grad_hidden
  T* gw;          // [E, d.w] grad_w, only when asked (else null)
  const int64_t* src;
  const int64_t* dst;
  const int64_t* dst_ptr;
  const T* cg;
  TPDims d;
  int64_t num_nodes;
  int num_blocks;
}};

template <typename T> struct Vec16;
template <> struct Vec16<float> {{ using type = float4; static constexpr int n = 4; }};
template <> struct Vec16<double> {{ using type = double2; static constexpr int n = 2; }};
__device__ __forceinline__ float vget(const float4& v, int i) {{ return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }}
__device__ __forceinline__ double vget(const double2& v, int i) {{ return i == 0 ? v.x : v.y; }}

// Barrier of the `threads` threads of one edge slot (named barrier `id`; 0 is __syncthreads).
__device__ __forceinline__ void slot_sync(int id, int threads) {{
  asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}}

// First receiver n in [lo, hi] whose edges start at or after edge t.
__device__ __forceinline__ int64_t first_receiver_at(const int64_t* __restrict__ dst_ptr, int64_t lo, int64_t hi, int64_t t) {{
  while (lo < hi) {{
    const int64_t mid = lo + (hi - lo) / 2;
    if (dst_ptr[mid] < t) lo = mid + 1; else hi = mid;
  }}
  return lo;
}}

// Part k of `parts` of the receivers [n0, n1): contiguous ranges with near-equal edge counts.
__device__ __forceinline__ void receiver_part(const int64_t* __restrict__ dst_ptr, int64_t n0, int64_t n1,
                                              int64_t k, int64_t parts, int64_t& lo, int64_t& hi) {{
  const int64_t e0 = dst_ptr[n0], e1 = dst_ptr[n1];
  lo = k == 0 ? n0 : first_receiver_at(dst_ptr, n0, n1, e0 + (e1 - e0) * k / parts);
  hi = k + 1 == parts ? n1 : first_receiver_at(dst_ptr, n0, n1, e0 + (e1 - e0) * (k + 1) / parts);
}}

// Row stride of the staged hidden chunk: kB edges + 32 bytes, so that the A fragment loads of the
// tensor-core tiles (8 edges x 4 hidden indices per instruction) hit distinct banks.
template <typename T> constexpr int kLdH = kB + 32 / int(sizeof(T));

// s_h[j * kLdH + b] = h[e0 + b, j] (zero past e_end), by the M threads of a slot (t = thread in slot).
template <typename T>
__device__ __forceinline__ void stage_hidden(T* __restrict__ s_h, const T* __restrict__ h, int64_t e0, int64_t e_end,
                                             int t, int M) {{
  using V = typename Vec16<T>::type;
  constexpr int n = Vec16<T>::n;
  for (int q = t; q < kB * (kH / n); q += M) {{
    const int b = q % kB, jv = q / kB;
    V v{{}};
    if (e0 + b < e_end) v = __ldg(reinterpret_cast<const V*>(h + (e0 + b) * kH + jv * n));
#pragma unroll
    for (int i = 0; i < n; ++i) s_h[(jv * n + i) * kLdH<T> + b] = vget(v, i);
  }}
}}

// A warp's 16 x N tile on the tensor cores, C += A (16 x K) @ B (K x N), A and B read through
// a(row, k) and b(k, col) (shared memory): float32 by 3xTF32 mma.m16n8k8, float64 by DMMA m8n8k4
// (csrc/mma.cuh). Lane `lane` holds C's element i < N / 2 at (tile_row(i, lane), tile_col(i, lane)):
// float32 i = 4 n8-tile + fragment slot; float64 i = 2 (m8-tile * N / 8 + n8-tile) + slot.
template <typename T, int N>
__device__ __forceinline__ int tile_row(int i, int lane) {{
  if constexpr (sizeof(T) == 4) return (lane >> 2) + 8 * ((i >> 1) & 1);
  else return 8 * (i / (N / 4)) + (lane >> 2);
}}
template <typename T, int N>
__device__ __forceinline__ int tile_col(int i, int lane) {{
  if constexpr (sizeof(T) == 4) return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
  else return 8 * ((i >> 1) % (N / 8)) + 2 * (lane & 3) + (i & 1);
}}

template <int K, int N, typename FA, typename FB>
__device__ __forceinline__ void warp_mma16(float (&c)[N / 2], FA a, FB b, int lane) {{
  const int g = lane >> 2, t = lane & 3;
#pragma unroll 1
  for (int k0 = 0; k0 < K; k0 += 8) {{
    uint32_t ah[4], al[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) split_tf32(a(g + 8 * (v & 1), k0 + t + 4 * (v >> 1)), ah[v], al[v]);
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {{
      uint32_t bh[2], bl[2];
      split_tf32(b(k0 + t, 8 * nt + g), bh[0], bl[0]);
      split_tf32(b(k0 + t + 4, 8 * nt + g), bh[1], bl[1]);
      mma_3xtf32(*reinterpret_cast<float(*)[4]>(c + 4 * nt), ah, al, bh, bl);
    }}
  }}
}}

template <int K, int N, typename FA, typename FB>
__device__ __forceinline__ void warp_mma16(double (&c)[N / 2], FA a, FB b, int lane) {{
  const int g = lane >> 2, t = lane & 3;
#pragma unroll 1
  for (int k = t; k < K; k += 4) {{
    const double a0 = a(g, k), a1 = a(g + 8, k);
#pragma unroll
    for (int nt = 0; nt < N / 8; ++nt) {{
      const double bv = b(k, 8 * nt + g);
      mma_f64(*reinterpret_cast<double(*)[2]>(c + 2 * nt), a0, bv);
      mma_f64(*reinterpret_cast<double(*)[2]>(c + 2 * (N / 8 + nt)), a1, bv);
    }}
  }}
}}

// Edge b of column c of a slot's [column][edge] tile (weights, then grad_w) sits at b ^ gw_swizzle(c)
// in row c (rows of kB): a warp's scalar accesses (32 consecutive columns, one edge) and its
// fragment accesses (8 or 4 edges x 4 consecutive columns) spread over the banks. Depends on c & 31.
template <typename T> __device__ __forceinline__ int gw_swizzle(int c);
template <> __device__ __forceinline__ int gw_swizzle<float>(int c) {{ return (c & 31) >> 1; }}
template <> __device__ __forceinline__ int gw_swizzle<double>(int c) {{ return ((c & 3) << 2) | ((c >> 2) & 3); }}

// w[e0 + b, c] for the warp's columns c = p M + 32 warp + r (p < P, r < 32) into s_w[c * kB + (b ^
// gw_swizzle(c))]: the staged hidden chunk (s_h) @ W_last (wt(k, p, u): row k, block p, channel u),
// k in a fixed order.
template <typename T, int P, typename FW>
__device__ __forceinline__ void edge_weights(T* __restrict__ s_w, const T* __restrict__ s_h, FW wt, int M, int warp,
                                             int lane) {{
#pragma unroll
  for (int p = 0; p < P; ++p) {{
    const int c0 = p * M + 32 * warp;
    T acc[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i] = T(0);
    warp_mma16<kH, 32>(acc, [&](int r, int k) {{ return s_h[k * kLdH<T> + r]; }},
                       [&](int k, int n) {{ return wt(k, p, 32 * warp + n); }}, lane);
#pragma unroll
    for (int i = 0; i < 16; ++i) {{
      const int c = c0 + tile_col<T, 32>(i, lane);
      s_w[c * kB + (tile_row<T, 32>(i, lane) ^ gw_swizzle<T>(c))] = acc[i];
    }}
  }}
}}

// The warp's part of grad_hidden for the chunk: acc (16 x kH) = grad_w[:, the warp's columns] @
// W[:, the warp's columns]^T (columns k = 32 p + r <-> c = p M + 32 warp + r, in that order).
template <typename T, int P, typename FW>
__device__ __forceinline__ void grad_hidden(T (&acc)[kH / 2], const T* __restrict__ s_gw, FW wt, int M, int warp,
                                            int lane) {{
#pragma unroll
  for (int i = 0; i < kH / 2; ++i) acc[i] = T(0);
  const int cw = 32 * warp;
  warp_mma16<32 * P, kH>(acc, [&](int r, int k) {{
                           const int c = (k >> 5) * M + cw + (k & 31);
                           return s_gw[c * kB + (r ^ gw_swizzle<T>(c))];
                         }},
                         [&](int k, int n) {{ return wt(n, k >> 5, cw + (k & 31)); }}, lane);
}}

// Reduce-scatter of a[0..V) over a warp, fixed order. Level C (C = V, V/2, .., 2; partner lane
// offset 16 C / V): a lane keeps the upper half of its C slots when that offset bit is set in its
// lane id, the lower half otherwise, and adds what the partner sends.
template <int C, int V, typename T>
__device__ __forceinline__ void scatter_levels(T (&a)[V], int lane) {{
  if constexpr (C > 1) {{
    constexpr int off = 16 * C / V;
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int v = 0; v < C / 2; ++v) {{
      const T mine = upper ? a[v + C / 2] : a[v];
      const T theirs = upper ? a[v] : a[v + C / 2];
      a[v] = mine + __shfl_xor_sync(0xffffffffu, theirs, off);
    }}
    scatter_levels<C / 2, V>(a, lane);
  }}
}}

// Warp sum of slot scatter_slot<V>(lane), valid on lanes with (lane & (32 / V - 1)) == 0.
template <int V, typename T>
__device__ __forceinline__ T warp_reduce_scatter(T (&a)[V], int lane) {{
  scatter_levels<V, V>(a, lane);
  T r = a[0];
#pragma unroll
  for (int off = 16 / V; off > 0; off >>= 1) r += __shfl_xor_sync(0xffffffffu, r, off);
  return r;
}}

template <int V>
__device__ __forceinline__ int scatter_slot(int lane) {{
  int slot = 0;
#pragma unroll
  for (int c = V, off = 16; c > 1; c >>= 1, off >>= 1)
    if (lane & off) slot += c / 2;
  return slot;
}}

// Backward, last step: grad_x[n] = sum of the work rows of the edges sent by n, in src_perm order.
template <typename T>
__global__ void __launch_bounds__(256) gx_sum_kernel(const T* __restrict__ work, const int64_t* __restrict__ src_perm,
                                                     const int64_t* __restrict__ src_ptr, int in1, T* __restrict__ gx) {{
  const int64_t n = blockIdx.x;
  const int64_t t0 = src_ptr[n], t1 = src_ptr[n + 1];
  for (int c = threadIdx.x; c < in1; c += blockDim.x) {{
    T s = T(0);
    for (int64_t t = t0; t < t1; ++t) s += work[__ldg(src_perm + t) * in1 + c];
    gx[n * in1 + c] = s;
  }}
}}

const char* last_error() {{
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}}

// Blocks for a kernel: kWaves per resident block slot of the GPU, at most one per receiver. The
// shared-memory attribute and occupancy are set up once per device (cache: one int per device).
constexpr int kMaxDevices = 64;
template <typename K>
const char* grid_for(K kernel, int smem, int64_t num_nodes, int* cache, int* blocks) {{
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return last_error();
  if (dev >= kMaxDevices) return "md_accel tp_conv_fused: device index too large";
  if (cache[dev] == 0) {{
    int sms = 0, per_sm = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) != cudaSuccess)
      return last_error();
    if (per_sm < 1) return "md_accel tp_conv_fused: the kernel does not fit on this GPU";
    cache[dev] = per_sm * sms * kWaves;
  }}
  *blocks = int(cache[dev] < num_nodes ? cache[dev] : num_nodes);
  return nullptr;
}}
"""


def _kernel(name: str, T: str, body: str, lay: Dict[str, int], bwd: bool) -> str:
    zero_out = "" if bwd else (
        "  for (int64_t n = bn0; n < bn1; ++n)\n"
        "    for (int q = threadIdx.x; q < a.d.out; q += kThreads)\n"
        "      if (!out_covered(q)) a.out[n * a.d.out + q] = T(0);\n")
    return f"""
// {'Backward (grad_x work rows, grad_y, grad_hidden)' if bwd else 'Forward'}: block = a receiver range, groups in turn.
__global__ void __launch_bounds__(kThreads) {name}(const FusedArgs<{T}> a) {{
  using T = {T};
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_cg = reinterpret_cast<T*>(smem_raw);
  T* s_grp = s_cg + {lay['cg']};  // each group: its W tile, then its edge slots
  for (int q = threadIdx.x; q < kNnz; q += kThreads) s_cg[q] = a.cg[q];
  int64_t bn0, bn1;
  receiver_part(a.dst_ptr, 0, a.num_nodes, blockIdx.x, a.num_blocks, bn0, bn1);
{zero_out}{body}}}
"""


def _launchers(tag: str, T: str, smem_fwd: int, smem_bwd: int) -> str:
    return f"""
const char* fwd_{tag}(const TPFusedTensors<{T}>& t, const TPGraph& g, const {T}* cg, const TPDims& d, cudaStream_t stream) {{
  if (g.num_nodes == 0) return nullptr;
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
  FusedArgs<{T}> a{{t.x, t.y, t.h, t.W, nullptr, t.out, nullptr, nullptr, nullptr, nullptr, g.src, g.dst, g.dst_ptr, cg, d, g.num_nodes, 0}};
  static int blocks[kMaxDevices] = {{}};
  if (const char* err = grid_for(fused_fwd_{tag}, {smem_fwd}, g.num_nodes, blocks, &a.num_blocks)) return err;
  fused_fwd_{tag}<<<unsigned(a.num_blocks), kThreads, {smem_fwd}, stream>>>(a);
  return last_error();
}}

// work: scratch of num_edges * d.in1 elements (each edge's grad_x contribution).
const char* bwd_{tag}(const TPFusedTensors<{T}>& t, const TPGraph& g, const {T}* cg, const TPDims& d, {T}* work, cudaStream_t stream) {{
  if (g.num_nodes == 0) return nullptr;
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
  FusedArgs<{T}> a{{t.x, t.y, t.h, t.W, t.g, nullptr, work, t.gy, t.gh, t.gw, g.src, g.dst, g.dst_ptr, cg, d, g.num_nodes, 0}};
  static int blocks[kMaxDevices] = {{}};
  if (const char* err = grid_for(fused_bwd_{tag}, {smem_bwd}, g.num_nodes, blocks, &a.num_blocks)) return err;
  fused_bwd_{tag}<<<unsigned(a.num_blocks), kThreads, {smem_bwd}, stream>>>(a);
  if (const char* err = last_error()) return err;
  gx_sum_kernel<{T}><<<unsigned(g.num_nodes), 256, 0, stream>>>(work, g.src_perm, g.src_ptr, d.in1, t.gx);
  return last_error();
}}
"""


_SPEC = r"""
const TPFusedSpec kSpec = {{kTPFusedAbiVersion, {num_paths}, kNnz, kH, kPaths, kCgPtr, kCgIdx,
                           {fwd_s}, {fwd_d}, {bwd_s}, {bwd_d}}};

}}  // namespace
}}  // namespace md_accel

extern "C" const md_accel::TPFusedSpec* md_accel_tp_fused_spec_v1() {{ return &md_accel::kSpec; }}
"""


def dtype_groups(struct, hidden: int, esize: int) -> List[_Group]:
    """The group partition the kernels of one element size (4: float32, 8: float64) use."""
    _, live, _, nnz = _analyse(struct)
    return partition(live, esize, hidden, nnz)


def generate_fused(struct, hidden: int, w_global: bool = False) -> str:
    """CUDA source of the fused library for one plan structure and hidden width (raises Unsupported);
    `w_global`: the kernels read W_last through L1 / L2 instead of shared-memory tiles (same groups)."""
    if hidden % 16 or not 16 <= hidden <= 128:
        raise Unsupported(f"hidden width {hidden}: the fused kernels need a multiple of 16 in [16, 128]")
    _, live, _, nnz = _analyse(struct)
    paths, cg_ptr, cg_idx, _ = struct
    covered = _covered_fn("out_covered", [p.out_off + q for p in live for q in range(p.mul * p.d3)])
    src = _PRELUDE.format(
        gen=FUSED_GEN_VERSION, key=_fused_key(struct), num_paths=len(paths), nnz=nnz, threads=THREADS,
        hidden=hidden, chunk=CHUNK, waves=WAVES, paths=", ".join(str(v) for r in paths for v in r),
        cg_ptr=", ".join(str(v) for v in cg_ptr), cg_idx=", ".join(str(v) for r in cg_idx for v in r),
        covered=covered)
    fns = {}
    for esize, tag, T in ((4, "s", "float"), (8, "d", "double")):
        try:
            groups = partition(live, esize, hidden, nnz)
            for g in groups:
                g.w_global = w_global
            lay_f = _layout(groups, nnz, hidden, esize, bwd=False)
            fwd_body = "".join(_fwd_group(gi, g, hidden, esize) for gi, g in enumerate(groups))
            lay_b = _layout(groups, nnz, hidden, esize, bwd=True)
        except Unsupported:
            fns[tag] = None
            continue
        first: dict = {}
        tables: List[str] = []
        bwd_body = "".join(_bwd_group(gi, g, first, tables, tag, hidden, esize, live)
                           for gi, g in enumerate(groups))
        src += "".join(tables)
        src += _kernel(f"fused_fwd_{tag}", T, fwd_body, lay_f, bwd=False)
        src += _kernel(f"fused_bwd_{tag}", T, bwd_body, lay_b, bwd=True)
        src += _launchers(tag, T, lay_f["bytes"], lay_b["bytes"])
        fns[tag] = tag
    if fns["s"] is None and fns["d"] is None:
        raise Unsupported("no fused kernel fits this plan")
    src += _SPEC.format(
        num_paths=len(paths),
        fwd_s="fwd_s" if fns["s"] else "nullptr", fwd_d="fwd_d" if fns["d"] else "nullptr",
        bwd_s="bwd_s" if fns["s"] else "nullptr", bwd_d="bwd_d" if fns["d"] else "nullptr")
    return src


# --- build -----------------------------------------------------------------------------------------

def w_global() -> bool:
    """MD_ACCEL_FUSED_W=global: the fused kernels read W_last through L1 / L2 (default: shared memory)."""
    v = os.environ.get(W_SOURCE_ENV, "smem").strip()
    if v not in ("smem", "global"):
        raise ValueError(f"{W_SOURCE_ENV}={v!r}: 'smem' or 'global'")
    return v == "global"


def build_fused(struct, hidden: int, arch: str) -> str:
    """Path of the built fused library for this structure, hidden width and GPU arch (and W source,
    MD_ACCEL_FUSED_W); cached."""
    key, wg = _fused_key(struct), w_global()
    so = _cache_dir() / f"fused-{key}-h{hidden}-{arch}-v{FUSED_GEN_VERSION}{'-wg' if wg else ''}.so"
    return compile_cached(so, lambda: generate_fused(struct, hidden, wg), f"tp_fused_{key}", arch,
                          f"fused tp_conv plan {key} (H={hidden})")


def main(argv=None) -> None:
    """Write the generated source for a test-style 'uvu' problem (W source from MD_ACCEL_FUSED_W):
    python -m md_accel.ops._codegen_fused IN1 IN2 LMAX HIDDEN OUT.cu [parity]"""
    import sys

    from ._codegen import plan_structure
    from .tp_problem import TPProblem

    a = argv if argv is not None else sys.argv[1:]
    plan = TPProblem.all_uvu(a[0], a[1], int(a[2]), len(a) > 5 and a[5] == "parity").lower()
    Path(a[4]).write_text(generate_fused(plan_structure(plan), int(a[3]), w_global()))


if __name__ == "__main__":
    main()
