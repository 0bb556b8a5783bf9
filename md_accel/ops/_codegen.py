"""Plan-specialised CUDA kernels for ``md_accel::tp_conv_{fwd,bwd}``: CUDA source generated from a
lowered plan (paths table + Clebsch-Gordan sparsity), built with nvcc into a small shared
library, and loaded by the op library (``csrc/tp_spec_abi.h``).

What the generated kernels fix at compile time: every path's offsets, multiplicities and l's,
and the (i, j, k) positions of its CG non-zeros (loops fully unrolled, zeros never visited).
The CG *values* are read at run time from ``cg_val`` (staged in shared memory), so one build
serves every normalisation of the same structure. Mapping (see .notes/kernels.md):

* fwd: one block per receiver, thread u = channel; the node's incoming edges are summed in CSR
  order with the accumulators out[u, k] in registers (no atomics: bit-reproducible). When the
  output is too wide for registers, the output blocks are split into groups, one edge pass each.
* bwd: one block per receiver, grad_out[n] of the thread's channel held in registers; per edge
  grad_w (direct), grad_y (fixed-order warp butterfly + cross-warp sum) and the edge's
  contribution to grad_x, written to a scratch row; a second kernel sums the scratch rows of
  each sender in src_perm order.

Cache: ``$MD_ACCEL_BUILD_DIR/tp_specs/<structure hash>-<arch>-v<GEN_VERSION>.so`` (default base
``~/.cache/md_accel``).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

GEN_VERSION = 1  # bump when the generated code changes: names the cache entries
_CSRC = Path(__file__).resolve().parent.parent.parent / "csrc"

FWD_ACC_BUDGET = 48   # output components per channel kept in registers per fwd edge pass
BWD_G_BUDGET = 64     # grad_out components per channel held in registers by the bwd kernel
MAX_IN2 = 32          # grad_y butterfly reduces at most 32 used y columns
MAX_NNZ = 2048        # shared-memory staging of the CG values, and compile time
MAX_THREADS = 1024


class Unsupported(ValueError):
    """The plan has a shape the specialised kernels do not handle (the generic kernel does)."""


# --- plan structure ----------------------------------------------------------------------------

def structure(paths: Sequence[Sequence[int]], cg_ptr: Sequence[int], cg_idx: Sequence[Sequence[int]]):
    """The integer tables as plain tuples (what the op library compares)."""
    return (tuple(tuple(int(v) for v in r) for r in paths), tuple(int(v) for v in cg_ptr),
            tuple(tuple(int(v) for v in r) for r in cg_idx))


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
    paths, cg_ptr, cg_idx = struct
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


def _out_groups(live: List[_Path]) -> List[List[_Path]]:
    """Output blocks split into groups of at most FWD_ACC_BUDGET components per channel."""
    order: List[Tuple[int, int, int]] = []
    for p in live:
        if p.out_key not in order:
            order.append(p.out_key)
    groups: List[List[Tuple[int, int, int]]] = [[]]
    used = 0
    for key in order:
        if groups[-1] and used + key[2] > FWD_ACC_BUDGET:
            groups.append([])
            used = 0
        groups[-1].append(key)
        used += key[2]
    return [[p for p in live if p.out_key in g] for g in groups]


def _by_mul(paths: List[_Path]) -> List[Tuple[int, List[_Path]]]:
    muls = sorted({p.mul for p in paths}, reverse=True)
    return [(m, [p for p in paths if p.mul == m]) for m in muls]


def _bname(prefix: str, key) -> str:
    return f"{prefix}{key[0]}"


def _fwd_group(gi: int, group: List[_Path], I: str) -> str:
    out_keys = []
    for p in group:
        if p.out_key not in out_keys:
            out_keys.append(p.out_key)
    y_cols = sorted({p.in2_off + j for p in group for (_, _, j, _) in p.nz})
    s = [f"{I}{{  // group {gi}: output blocks at " + ", ".join(str(k[0]) for k in out_keys) + "\n"]
    I2 = I + "  "
    for key in out_keys:
        s.append(f"{I2}T " + ", ".join(f"{_bname('acc', key)}_{k} = T(0)" for k in range(key[2])) + ";\n")
    s.append(f"{I2}for (int64_t e = e_begin; e < e_end; ++e) {{\n")
    I3 = I2 + "  "
    s.append(f"{I3}const T* xr = x + __ldg(src + e) * d.in1;\n")
    s.append(f"{I3}const T* yr = y + e * d.in2;\n")
    s.append(f"{I3}const T* wr = w + e * d.w;\n")
    for c in y_cols:
        s.append(f"{I3}const T y{c} = __ldg(yr + {c});\n")
    for mul, ps in _by_mul(group):
        s.append(f"{I3}if (u < {mul}) {{\n")
        I4 = I3 + "  "
        xs = {}
        for p in ps:
            for (_, i, _, _) in p.nz:
                xs.setdefault(p.in1_key, set()).add(i)
        for key, iset in xs.items():
            for i in sorted(iset):
                s.append(f"{I4}const T {_bname('x', key)}_{i} = __ldg(xr + {key[0]} + u * {key[2]} + {i});\n")
        for p in ps:
            s.append(f"{I4}{{  // path {p.idx}: l {p.l1} x {p.l2} -> {p.l3}, {len(p.nz)} non-zeros\n")
            I5 = I4 + "  "
            s.append(f"{I5}const T wp = __ldg(wr + {p.w_off} + u * {p.w_stride});\n")
            ks = sorted({k for (_, _, _, k) in p.nz})
            for k in ks:
                terms = [(q, i, j) for (q, i, j, kk) in p.nz if kk == k]
                expr = "T(0)"
                for (q, i, j) in terms:
                    expr = f"fma(s_cg[{q}] * y{p.in2_off + j}, {_bname('x', p.in1_key)}_{i}, {expr})"
                s.append(f"{I5}{_bname('acc', p.out_key)}_{k} = fma(wp, {expr}, {_bname('acc', p.out_key)}_{k});\n")
            s.append(f"{I4}}}\n")
        s.append(f"{I3}}}\n")
    s.append(f"{I2}}}\n")
    for mul, ps in _by_mul(group):
        keys = []
        for p in ps:
            if p.out_key not in keys:
                keys.append(p.out_key)
        s.append(f"{I2}if (u < {mul}) {{\n")
        for key in keys:
            for k in range(key[2]):
                s.append(f"{I2}  orow[{key[0]} + u * {key[2]} + {k}] = {_bname('acc', key)}_{k};\n")
        s.append(f"{I2}}}\n")
    s.append(f"{I}}}\n")
    return "".join(s)


def _gen_fwd(live: List[_Path]) -> str:
    groups = _out_groups(live)
    body = "".join(_fwd_group(gi, g, "  ") for gi, g in enumerate(groups))
    return f"""
// Forward: block n = receiver, thread u = channel; {len(groups)} edge pass(es).
template <typename T>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const T* __restrict__ x, const T* __restrict__ y,
    const T* __restrict__ w, T* __restrict__ out, const int64_t* __restrict__ src,
    const int64_t* __restrict__ dst_ptr, const T* __restrict__ cg_val, TPDims d) {{
  __shared__ T s_cg[kNnz];
  for (int q = threadIdx.x; q < kNnz; q += kThreads) s_cg[q] = cg_val[q];
  __syncthreads();
  const int u = threadIdx.x;
  const int64_t n = blockIdx.x;
  const int64_t e_begin = dst_ptr[n], e_end = dst_ptr[n + 1];
  T* orow = out + n * d.out;
{body}  for (int q = threadIdx.x; q < d.out; q += kThreads)
    if (!out_covered(q)) orow[q] = T(0);
}}
"""


def _gen_bwd(live: List[_Path]) -> Optional[str]:
    out_keys, in1_keys, w_keys = [], [], []
    for p in live:
        for lst, key in ((out_keys, p.out_key), (in1_keys, p.in1_key), (w_keys, p.w_key)):
            if key not in lst:
                lst.append(key)
    if sum(k[2] for k in out_keys) > BWD_G_BUDGET:
        return None
    y_cols = sorted({p.in2_off + j for p in live for (_, _, j, _) in p.nz})
    if len(y_cols) > MAX_IN2:
        return None
    V = 1
    while V < len(y_cols):
        V *= 2
    slot = {c: n for n, c in enumerate(y_cols)}
    I = "  "
    s = []
    # grad_out of this channel, all output blocks, for the whole node
    for mul, ps in _by_mul(live):
        keys = []
        for p in ps:
            if p.out_key not in keys:
                keys.append(p.out_key)
        for key in keys:
            for k in range(key[2]):
                s.append(f"{I}const T {_bname('g', key)}_{k} = u < {mul} ? __ldg(grow + {key[0]} + u * {key[2]} + {k}) : T(0);\n")
    s.append(f"{I}for (int64_t e = e_begin; e < e_end; ++e) {{\n")
    I2 = I + "  "
    s.append(f"{I2}const T* xr = x + __ldg(src + e) * d.in1;\n")
    s.append(f"{I2}const T* yr = y + e * d.in2;\n")
    s.append(f"{I2}const T* wr = w + e * d.w;\n")
    for c in y_cols:
        s.append(f"{I2}const T y{c} = __ldg(yr + {c});\n")
    s.append(f"{I2}T gy[{V}];  // this channel's grad_y partials, slot = used y column\n")
    s.append(f"{I2}#pragma unroll\n{I2}for (int v = 0; v < {V}; ++v) gy[v] = T(0);\n")
    for mul, ps in _by_mul(live):
        s.append(f"{I2}if (u < {mul}) {{\n")
        I3 = I2 + "  "
        my_in1 = [k for k in in1_keys if any(p.in1_key == k for p in ps)]
        my_w = [k for k in w_keys if any(p.w_key == k for p in ps)]
        for key in my_in1:
            used = sorted({i for p in ps if p.in1_key == key for (_, i, _, _) in p.nz})
            for i in used:
                s.append(f"{I3}const T {_bname('x', key)}_{i} = __ldg(xr + {key[0]} + u * {key[2]} + {i});\n")
            s.append(f"{I3}T " + ", ".join(f"{_bname('gx', key)}_{i} = T(0)" for i in range(key[2])) + ";\n")
        for key in my_w:
            s.append(f"{I3}T sw{key[0]} = T(0);\n")
        for p in ps:
            s.append(f"{I3}{{  // path {p.idx}: l {p.l1} x {p.l2} -> {p.l3}, {len(p.nz)} non-zeros\n")
            I4 = I3 + "  "
            s.append(f"{I4}const T wp = __ldg(wr + {p.w_off} + u * {p.w_stride});\n")
            js = sorted({j for (_, _, j, _) in p.nz})
            iset = sorted({i for (_, i, _, _) in p.nz})
            s.append(f"{I4}T " + ", ".join(f"py{j} = T(0)" for j in js) + ";\n")
            s.append(f"{I4}T " + ", ".join(f"px{i} = T(0)" for i in iset) + ";\n")
            s.append(f"{I4}T sw = T(0);\n")
            xk, gk = _bname('x', p.in1_key), _bname('g', p.out_key)
            for (q, i, j, k) in p.nz:
                yc = f"y{p.in2_off + j}"
                s.append(f"{I4}{{ const T cg = s_cg[{q}] * {gk}_{k}; const T t = cg * {xk}_{i}; "
                         f"sw = fma(t, {yc}, sw); py{j} += t; px{i} = fma(cg, {yc}, px{i}); }}\n")
            for j in js:
                v = slot[p.in2_off + j]
                s.append(f"{I4}gy[{v}] = fma(wp, py{j}, gy[{v}]);\n")
            for i in iset:
                s.append(f"{I4}{_bname('gx', p.in1_key)}_{i} = fma(wp, px{i}, {_bname('gx', p.in1_key)}_{i});\n")
            s.append(f"{I4}sw{p.w_off} += sw;\n")
            s.append(f"{I3}}}\n")
        for key in my_w:
            s.append(f"{I3}gw[e * d.w + {key[0]} + u * {key[2]}] = sw{key[0]};\n")
        for key in my_in1:
            for i in range(key[2]):
                s.append(f"{I3}work[e * d.in1 + {key[0]} + u * {key[2]} + {i}] = {_bname('gx', key)}_{i};\n")
        s.append(f"{I2}}}\n")
    s.append(f"""{I2}for (int q = threadIdx.x; q < d.w; q += kThreads)
{I2}  if (!w_covered(q)) gw[e * d.w + q] = T(0);
{I2}for (int q = threadIdx.x; q < d.in1; q += kThreads)
{I2}  if (!in1_covered(q)) work[e * d.in1 + q] = T(0);
{I2}// grad_y: sum over channels, fixed order: butterfly inside each warp, then warps in order.
{I2}const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, buf = int(e & 1);
{I2}const T mine = warp_butterfly<T, {V}>(gy, lane);
{I2}if ((lane & plain_mask<{V}>()) == 0) s_red[buf][warp][butterfly_slot<{V}>(lane)] = mine;
{I2}__syncthreads();
{I2}for (int q = threadIdx.x; q < d.in2; q += kThreads) {{
{I2}  const int v = q < kExtIn2 ? kSlotOf[q] : -1;
{I2}  T r = T(0);
{I2}  if (v >= 0)
{I2}    for (int k = 0; k < kWarps; ++k) r += s_red[buf][k][v];
{I2}  gyo[e * d.in2 + q] = r;
{I2}}}
{I}}}
""")
    slot_of = ", ".join(str(slot.get(c, -1)) for c in range(max(y_cols) + 1))
    return f"""
// Backward, part 1: block n = receiver, thread u = channel; grad_out[n] in registers; per edge:
// grad_w, grad_y, and the edge's grad_x contribution (work row e; summed by sender later).
constexpr int kWarps = kThreads / 32;
constexpr int kExtIn2 = {max(y_cols) + 1};
__constant__ int kSlotOf[kExtIn2] = {{{slot_of}}};
template <typename T>
__global__ void __launch_bounds__(kThreads) bwd_kernel(const T* __restrict__ x, const T* __restrict__ y,
    const T* __restrict__ w, const T* __restrict__ g, T* __restrict__ gyo, T* __restrict__ gw,
    T* __restrict__ work, const int64_t* __restrict__ src, const int64_t* __restrict__ dst_ptr,
    const T* __restrict__ cg_val, TPDims d) {{
  __shared__ T s_cg[kNnz];
  __shared__ T s_red[2][kWarps][{V}];
  for (int q = threadIdx.x; q < kNnz; q += kThreads) s_cg[q] = cg_val[q];
  __syncthreads();
  const int u = threadIdx.x;
  const int64_t n = blockIdx.x;
  const int64_t e_begin = dst_ptr[n], e_end = dst_ptr[n + 1];
  const T* grow = g + n * d.out;
{"".join(s)}}}
"""


_PRELUDE = r"""
// Generated by md_accel/ops/_codegen.py (GEN_VERSION {gen}) from a lowered tp_conv plan; do not edit.
// Structure key {key}: {num_paths} paths, {nnz} CG non-zeros, {threads} threads per block.
#include <cuda_runtime.h>
#include <cstdint>
#include "tp_spec_abi.h"

namespace md_accel {{
namespace {{

constexpr int kThreads = {threads};
constexpr int kNnz = {nnz};
constexpr int32_t kPaths[] = {{{paths}}};
constexpr int32_t kCgPtr[] = {{{cg_ptr}}};
constexpr int32_t kCgIdx[] = {{{cg_idx}}};

{covered}
// After warp_butterfly<T, V>, lanes whose bits under this mask are zero hold their slot's sum.
template <int V>
__device__ constexpr int plain_mask() {{ return 32 / V - 1; }}

// Sum of a[0..V) over the 32 lanes, fixed order. Each step sends half of the remaining slots to
// the partner lane and keeps the other half; after log2(V) steps a lane holds one slot, then
// plain xor-adds finish. Returns the lane's slot sum (valid on lanes with (lane & plain_mask<V>()) == 0).
template <typename T, int V>
__device__ __forceinline__ T warp_butterfly(T (&a)[V], int lane) {{
  int off = 16;
#pragma unroll
  for (int c = V; c > 1; c /= 2, off /= 2) {{
    const bool upper = (lane & off) != 0;
#pragma unroll
    for (int v = 0; v < c / 2; ++v) {{
      const T send = upper ? a[v] : a[v + c / 2];
      const T keep = upper ? a[v + c / 2] : a[v];
      a[v] = keep + __shfl_xor_sync(0xffffffffu, send, off);
    }}
  }}
  T r = a[0];
#pragma unroll
  for (; off > 0; off /= 2) r += __shfl_xor_sync(0xffffffffu, r, off);
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

// Backward, part 2: grad_x[n] = sum of the work rows of the edges sent by n, in src_perm order.
template <typename T>
__global__ void __launch_bounds__(256) gx_sum_kernel(const T* __restrict__ work,
    const int64_t* __restrict__ src_perm, const int64_t* __restrict__ src_ptr, int in1, T* __restrict__ gx) {{
  const int64_t n = blockIdx.x;
  const int64_t t0 = src_ptr[n], t1 = src_ptr[n + 1];
  for (int c = threadIdx.x; c < in1; c += blockDim.x) {{
    T s = T(0);
#pragma unroll 4
    for (int64_t t = t0; t < t1; ++t) s += work[__ldg(src_perm + t) * in1 + c];
    gx[n * in1 + c] = s;
  }}
}}
"""

_LAUNCHERS = r"""
const char* last_error() {{
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}}

template <typename T>
const char* fwd_launch(const TPTensors<T>& t, const TPGraph& g, const T* cg, const TPDims& d,
                       cudaStream_t stream) {{
  if (g.num_nodes == 0) return nullptr;
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
  fwd_kernel<T><<<unsigned(g.num_nodes), kThreads, 0, stream>>>(t.x, t.y, t.w, t.out, g.src, g.dst_ptr, cg, d);
  return last_error();
}}
{bwd_launch}
const TPSpec kSpec = {{kTPSpecAbiVersion, {num_paths}, kNnz, kPaths, kCgPtr, kCgIdx,
                      fwd_launch<float>, fwd_launch<double>, {bwd_f32}, {bwd_f64}}};

}}  // namespace
}}  // namespace md_accel

extern "C" const md_accel::TPSpec* md_accel_tp_spec_v1() {{ return &md_accel::kSpec; }}
"""

_BWD_LAUNCH = r"""
template <typename T>
const char* bwd_launch(const TPTensors<T>& t, const TPGraph& g, const T* cg, const TPDims& d, T* work,
                       cudaStream_t stream) {
  if (g.num_nodes == 0) return nullptr;
  if (g.num_nodes > 0x7fffffffLL) return "too many nodes";
  bwd_kernel<T><<<unsigned(g.num_nodes), kThreads, 0, stream>>>(t.x, t.y, t.w, t.g, t.gy, t.gw, work, g.src,
                                                                 g.dst_ptr, cg, d);
  if (const char* err = last_error()) return err;
  gx_sum_kernel<T><<<unsigned(g.num_nodes), 256, 0, stream>>>(work, g.src_perm, g.src_ptr, d.in1, t.gx);
  return last_error();
}
"""


def generate(struct) -> str:
    """CUDA source of the specialised library for one plan structure (raises Unsupported)."""
    ps, live, threads, nnz = _analyse(struct)
    paths, cg_ptr, cg_idx = struct
    covered = _covered_fn("out_covered", [p.out_off + q for p in live for q in range(p.mul * p.d3)])
    src = _PRELUDE.format(
        gen=GEN_VERSION, key=structure_key(struct), num_paths=len(paths), nnz=nnz, threads=threads,
        paths=", ".join(str(v) for r in paths for v in r), cg_ptr=", ".join(str(v) for v in cg_ptr),
        cg_idx=", ".join(str(v) for r in cg_idx for v in r), covered=covered)
    src += _gen_fwd(live)
    bwd = _gen_bwd(live)
    if bwd is not None:
        src += _covered_fn("in1_covered", [p.in1_off + q for p in live for q in range(p.mul * p.d1)])
        src += _covered_fn("w_covered", [p.w_off + u * p.w_stride for p in live for u in range(p.mul)])
        src += bwd
    src += _LAUNCHERS.format(
        bwd_launch=_BWD_LAUNCH if bwd is not None else "", num_paths=len(paths),
        bwd_f32="bwd_launch<float>" if bwd is not None else "nullptr",
        bwd_f64="bwd_launch<double>" if bwd is not None else "nullptr")
    return src


# --- build ---------------------------------------------------------------------------------------

def _cache_dir() -> Path:
    base = os.environ.get("MD_ACCEL_BUILD_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "md_accel")
    return Path(base) / "tp_specs"


def nvcc_command(cu: str, out: str, arch: str) -> List[str]:
    nvcc = os.environ.get("NVCC") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    if not os.path.exists(nvcc):
        nvcc = "nvcc"
    # No fast math: float64 must match the reference to ~1e-12.
    return [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-lineinfo", "-shared", "-Xcompiler", "-fPIC",
            "-I", str(_CSRC), cu, "-o", out]


def build(struct, arch: str) -> str:
    """Path of the built library for this structure and GPU arch (e.g. 'sm_90'); cached."""
    key = structure_key(struct)
    d = _cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    so = d / f"{key}-{arch}-v{GEN_VERSION}.so"
    if so.exists():
        return str(so)
    src = generate(struct)
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        cu = os.path.join(tmp, f"tp_spec_{key}.cu")
        Path(cu).write_text(src)
        out = os.path.join(tmp, "lib.so")
        r = subprocess.run(nvcc_command(cu, out, arch), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nvcc failed for tp_conv plan {key}:\n{r.stderr[-4000:]}")
        os.replace(out, so)  # atomic: concurrent builders race harmlessly
    return str(so)


def plan_structure(plan) -> tuple:
    """Structure tuple of a ``tp_problem.Plan`` (or anything with paths/cg_ptr/cg_idx tensors)."""
    return structure(plan.paths.tolist(), plan.cg_ptr.tolist(), plan.cg_idx.tolist())


def main(argv=None) -> None:
    """Write the generated source of a test-style 'uvu' problem: python -m md_accel.ops._codegen IN1 IN2 LMAX OUT.cu"""
    import sys

    from .tp_problem import TPProblem
    from ..o3 import Irreps

    a = argv if argv is not None else sys.argv[1:]
    i1, i2, lmax, path = Irreps(a[0]), Irreps(a[1]), int(a[2]), a[3]
    out, ins = [], []
    for x, m1 in enumerate(i1):
        for y, m2 in enumerate(i2):
            p = m1.ir.p * m2.ir.p
            for l3 in range(abs(m1.ir.l - m2.ir.l), min(m1.ir.l + m2.ir.l, lmax) + 1):
                if len(a) > 4 and a[4] == "parity" and (-1) ** l3 != p:
                    continue
                ins.append((x, y, len(out), "uvu", True))
                out.append(f"{m1.mul}x{l3}{'e' if p == 1 else 'o'}")
    plan = TPProblem.create(a[0], a[1], "+".join(out), ins).lower()
    Path(path).write_text(generate(plan_structure(plan)))


if __name__ == "__main__":
    main()
