"""CUDA kernels for ``md_accel::symmetric_contraction_{fwd,bwd,dbwd}`` generated per term list
(``sc_reference.lower``), built with nvcc into a small shared library and loaded by the op
library (``csrc/sc_abi.h``; the thread mapping and the weight-gradient reduction are the shared
skeleton in ``csrc/sc_kernels.cuh``, this module writes the per-thread body).

The body of thread (node n, channel c) has the whole structure compiled in: the input
components ``x0..x{I-1}`` (and ``grad_x``, ``gg_x``) are named registers, the terms are unrolled
with their values as constants (so a library serves exactly one term list; the op library
compares it). Terms are grouped by weight column ``k`` (one load of ``W[s, k, c]``) and output
``o``; each group's polynomial ``P = sum v x_{i_1}..x_{i_nu}`` is a trie over its sorted
monomials evaluated in Horner form (about two FMAs per term):

* fwd: ``out_o += W_k P``;
* bwd: reverse mode through the Horner evaluation with seed ``g_o W_k`` gives ``grad_x``;
  ``sum_o g_o P`` feeds the weight gradient (``WG`` instantiation);
* dbwd: values and tangents (``DP = dP . gg_x``) of every trie node, ``g_grad_out_o +=
  W_k DP + V_k P``, reverse mode of both with seeds ``(g_o V_k, g_o W_k)`` gives ``g_x``,
  ``sum_o g_o DP`` feeds ``g_W``.

Cache: ``$MD_ACCEL_BUILD_DIR/sc_specs/<structure hash>-<arch>-v<GEN_VERSION>.so`` (default base
``~/.cache/md_accel``), next to the tp_conv kernels (``_codegen``), with its nvcc command.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ._codegen import _cache_dir as _tp_cache_dir
from ._codegen import nvcc_command

GEN_VERSION = 2  # bump when the generated code changes: names the cache entries
MAX_TERMS = 7000  # float64 values in constant memory (64 KB), compile time


class Unsupported(ValueError):
    """The term list has a shape the generator does not handle (the generic kernels do)."""


# --- structure -----------------------------------------------------------------------------------

def structure(in_dims: Sequence[int], out_dims: Sequence[int], num_k: int, terms: torch.Tensor,
              values: torch.Tensor) -> tuple:
    """Everything the generated code depends on, as plain tuples (values as exact hex floats)."""
    t = terms.detach().to("cpu", torch.int64)
    return (tuple(int(d) for d in in_dims), tuple(int(d) for d in out_dims), int(num_k), int(t.shape[1]),
            tuple(tuple(r) for r in t.tolist()),
            tuple(float(v).hex() for v in values.detach().to("cpu", torch.float64).tolist()))


def structure_key(struct) -> str:
    return hashlib.sha256(repr(struct).encode()).hexdigest()[:20]


class _Node:
    """Trie node: ``children`` by input component; a leaf carries the term value."""
    __slots__ = ("children", "val", "v", "t")

    def __init__(self):
        self.children: Dict[int, "_Node"] = {}
        self.val: Optional[str] = None
        self.v: str = ""
        self.t: str = ""


def _groups(struct) -> List[Tuple[int, List[Tuple[int, _Node]]]]:
    """``[(k, [(o, trie root)])]`` in term order; leaves read their value from ``cv<T>(term)``."""
    _, _, _, _, terms, _ = struct
    out: List[Tuple[int, List[Tuple[int, _Node]]]] = []
    for q, row in enumerate(terms):
        o, k, idx = row[0], row[1], [i for i in row[2:] if i >= 0]
        if not out or out[-1][0] != k:
            out.append((k, []))
        if not out[-1][1] or out[-1][1][-1][0] != o:
            out[-1][1].append((o, _Node()))
        node = out[-1][1][-1][1]
        for i in idx:
            node = node.children.setdefault(i, _Node())
        if node.val is not None or node.children:
            raise Unsupported(f"duplicate or mixed-order monomial {idx} in group (o={o}, k={k})")
        node.val = f"cv<T>({q})"
    return out


class _Code:
    def __init__(self):
        self.lines: List[str] = []
        self.count = 0

    def tmp(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def __call__(self, line: str, ind: int) -> None:
        self.lines.append("  " * ind + line)


def _accumulate(code: _Code, ind: int, name: str, products: List[Tuple[str, str]]) -> None:
    """``T name = sum of the products`` (first a multiplication, then FMAs)."""
    (a, b), rest = products[0], products[1:]
    code(f"T {name} = {a} * {b};", ind)
    for a, b in rest:
        code(f"{name} = fma_({a}, {b}, {name});", ind)


def _values(code: _Code, node: _Node, ind: int, tangent: bool) -> None:
    """Post-order: the value (and tangent along ``h``) of every inner node of the subtree."""
    vs, ts = [], []
    for i, ch in sorted(node.children.items()):
        if ch.val is not None:
            vs.append((ch.val, f"x{i}"))
            ts.append((ch.val, f"h{i}"))
        else:
            _values(code, ch, ind, tangent)
            vs.append((f"x{i}", ch.v))
            ts.extend([(f"h{i}", ch.v), (f"x{i}", ch.t)])
    node.v = code.tmp()
    _accumulate(code, ind, node.v, vs)
    if tangent:
        node.t = code.tmp()
        _accumulate(code, ind, node.t, ts)


def _reverse(code: _Code, node: _Node, adj: str, ind: int) -> None:
    """Reverse mode of the value with adjoint ``adj`` of ``node``: adds to ``gx``."""
    for i, ch in sorted(node.children.items()):
        if ch.val is not None:
            code(f"gx{i} = fma_({adj}, {ch.val}, gx{i});", ind)
        else:
            code(f"gx{i} = fma_({adj}, {ch.v}, gx{i});", ind)
            a = code.tmp()
            code(f"const T {a} = {adj} * x{i};", ind)
            _reverse(code, ch, a, ind)


def _reverse2(code: _Code, node: _Node, av: str, at: str, ind: int) -> None:
    """Reverse mode of (value, tangent) with adjoints ``(av, at)`` of ``node``: adds to ``gx``."""
    for i, ch in sorted(node.children.items()):
        if ch.val is not None:  # leaf: value constant, tangent zero
            code(f"gx{i} = fma_({av}, {ch.val}, gx{i});", ind)
        else:
            code(f"gx{i} = fma_({av}, {ch.v}, gx{i});", ind)
            code(f"gx{i} = fma_({at}, {ch.t}, gx{i});", ind)
            a, b = code.tmp(), code.tmp()
            code(f"const T {a} = fma_({at}, h{i}, {av} * x{i});", ind)
            code(f"const T {b} = {at} * x{i};", ind)
            _reverse2(code, ch, a, b, ind)


def _io(dims: Sequence[int], row: str) -> List[Tuple[int, str]]:
    """``(component, address)`` of each component of a row in e3nn layout."""
    out, off = [], 0
    for d in dims:
        for m in range(d):
            out.append((off + m, f"{row} + (C * {off} + c * {d} + {m})"))
        off += d
    return out


def _body(struct, mode: int) -> str:
    in_dims, out_dims, terms = struct[0], struct[1], struct[4]
    num_in, num_out = sum(in_dims), sum(out_dims)
    used_in = {i for r in terms for i in r[2:] if i >= 0}
    used_out = {r[0] for r in terms}
    code = _Code()
    ins, outs = _io(in_dims, "xrow"), _io(out_dims, "orow")
    nan_rows = []
    if mode != 1:
        nan_rows += [f"a.out[{addr}] = nan_<T>();" for _, addr in outs]
    if mode != 0:
        nan_rows += [f"a.gx[{addr}] = nan_<T>();" for _, addr in ins]
    code("const int64_t C = a.C;", 2)
    code(f"const int64_t xrow = n * (C * {num_in}), orow = n * (C * {num_out});", 2)
    code("if (s < 0 || s >= a.E) {", 2)
    for line in nan_rows:
        code(line, 3)
    code("return;", 3)
    code("}", 2)
    for i, addr in ins:
        if i in used_in:
            code(f"T x{i} = ld(a.x + {addr});", 2)
        if i in used_in and mode == 2:
            code(f"T h{i} = ld(a.ggx + {addr});", 2)
        if mode != 0:
            code(f"T gx{i} = T(0);", 2)
    if mode != 0:
        for o, addr in outs:
            if o in used_out:
                code(f"const T g{o} = ld(a.g + {addr});", 2)
    if mode != 1:
        for o, _ in outs:
            code(f"T o{o} = T(0);", 2)
    code("const T* const wr = a.w + s * (a.K * C) + c;", 2)
    if mode == 2:
        code("const T* const vr = a.ggw + s * (a.K * C) + c;", 2)
    opaque = " ".join(f"opaque(x{i});" for i in sorted(used_in))
    if mode == 2:
        opaque += " " + " ".join(f"opaque(h{i});" for i in sorted(used_in))
    for k, groups in _groups(struct):
        code("{", 2)
        code(opaque, 3)
        code(f"const T w = ld(wr + {k} * C);", 3)
        if mode == 2:
            code(f"const T v = ld(vr + {k} * C);", 3)
        if mode != 0:
            code("T gp = T(0);  // weight gradient of column k (WG)", 3)
        for o, root in groups:
            code("{", 3)
            _values(code, root, 4, tangent=mode == 2)
            if mode == 0:
                code(f"o{o} = fma_(w, {root.v}, o{o});", 4)
            elif mode == 1:
                code(f"gp = fma_(g{o}, {root.v}, gp);", 4)
                a = code.tmp()
                code(f"const T {a} = g{o} * w;", 4)
                _reverse(code, root, a, 4)
            else:
                code(f"o{o} = fma_(w, {root.t}, o{o});", 4)
                code(f"o{o} = fma_(v, {root.v}, o{o});", 4)
                code(f"gp = fma_(g{o}, {root.t}, gp);", 4)
                av, at = code.tmp(), code.tmp()
                code(f"const T {av} = g{o} * v;", 4)
                code(f"const T {at} = g{o} * w;", 4)
                _reverse2(code, root, av, at, 4)
            code("}", 3)
        if mode != 0:
            code("if (WG) {", 3)
            code(f"acc[{k} * stride] += gp;", 4)
            code("sc::fence();", 4)
            code("}", 3)
        code("}", 2)
    if mode != 1:
        for o, addr in outs:
            code(f"a.out[{addr}] = o{o};", 2)
    if mode != 0:
        for i, addr in ins:
            code(f"a.gx[{addr}] = gx{i};", 2)
    return "\n".join(code.lines)


# One translation unit per main kernel (MD_ACCEL_SC_PART = 4 * dtype + kernel, dtype 0: float32,
# 1: float64; kernel: fwd, bwd, bwd with weight gradient, dbwd) and one for the dispatch and the
# exported spec (MD_ACCEL_SC_PART = 8): the nine compile in parallel. Without the macro one unit has all.
NUM_PARTS = 9

_SOURCE = r"""// Generated by md_accel/ops/_sc_codegen.py (GEN_VERSION {gen}) for term list {key}:
// {num_in} input components ({in_dims}), {num_out} outputs ({out_dims}), {num_k} weight columns, {num_terms} terms.
// Built as nine objects compiled in parallel: -DMD_ACCEL_SC_PART=4*dtype+kernel (dtype 0 float32,
// 1 float64; kernel 0 fwd, 1 bwd, 2 bwd with weight gradient, 3 dbwd) and =8 (dispatch and the
// exported spec); without the macro, one translation unit has everything.
#include "sc_kernels.cuh"

#ifndef MD_ACCEL_SC_PART
#define SC_KERNEL(dtype, kernel) 1
#define SC_HOST 1
#else
#define SC_KERNEL(dtype, kernel) (MD_ACCEL_SC_PART == 4 * (dtype) + (kernel))
#define SC_HOST (MD_ACCEL_SC_PART == 8)
#endif
#define SC_F32 (SC_KERNEL(0, 0) || SC_KERNEL(0, 1) || SC_KERNEL(0, 2) || SC_KERNEL(0, 3))
#define SC_F64 (SC_KERNEL(1, 0) || SC_KERNEL(1, 1) || SC_KERNEL(1, 2) || SC_KERNEL(1, 3))
#define SC_HIDDEN __attribute__((visibility("hidden")))

namespace md_accel {{

// The main kernels' launches, one per translation unit: sc_main_<T>_<MODE>_<WG>.
#define SC_MAIN(T, MODE, WG)                                                                                \
  SC_HIDDEN const char* sc_main_##T##_##MODE##_##WG(const SCArgs<T>& a, int64_t rows, unsigned bc, unsigned by, \
                                                    size_t smem, cudaStream_t stream)
SC_MAIN(float, 0, false);
SC_MAIN(float, 1, false);
SC_MAIN(float, 1, true);
SC_MAIN(float, 2, true);
SC_MAIN(double, 0, false);
SC_MAIN(double, 1, false);
SC_MAIN(double, 1, true);
SC_MAIN(double, 2, true);

namespace {{

using sc::fma_;
using sc::ld;
using sc::nan_;
using sc::opaque;

// The term values in constant memory: instructions read them as constant-bank operands (as
// immediates the compiler would keep repeated constants in registers for the whole kernel).
#if SC_F32
__constant__ float kValuesF32[] = {{{values_f32}}};
#endif
#if SC_F64
__constant__ double kValuesF64[] = {{{values}}};
#endif

template <typename T>
__device__ __forceinline__ T cv(int q) {{
#if SC_F32
  if constexpr (sizeof(T) == 4) return kValuesF32[q];
#endif
#if SC_F64
  if constexpr (sizeof(T) == 8) return kValuesF64[q];
#endif
}}

struct Body {{
  template <int MODE, bool WG, typename T>
  __device__ __forceinline__ void node(const SCArgs<T>& a, int64_t n, int64_t c, int64_t s, T* __restrict__ acc,
                                       int64_t stride) const {{
    if constexpr (MODE == 0) fwd<T>(a, n, c, s);
    else if constexpr (MODE == 1) bwd<WG, T>(a, n, c, s, acc, stride);
    else dbwd<WG, T>(a, n, c, s, acc, stride);
  }}

  template <typename T>
  static __device__ __forceinline__ void fwd(const SCArgs<T>& a, int64_t n, int64_t c, int64_t s) {{
{fwd}
  }}

  template <bool WG, typename T>
  static __device__ __forceinline__ void bwd(const SCArgs<T>& a, int64_t n, int64_t c, int64_t s,
                                             T* __restrict__ acc, int64_t stride) {{
{bwd}
  }}

  template <bool WG, typename T>
  static __device__ __forceinline__ void dbwd(const SCArgs<T>& a, int64_t n, int64_t c, int64_t s,
                                              T* __restrict__ acc, int64_t stride) {{
{dbwd}
  }}
}};

}}  // namespace

#define SC_MAIN_DEF(T, MODE, WG) \
  SC_MAIN(T, MODE, WG) {{ return sc::launch_main<Body, T, MODE, WG>(a, rows, bc, by, smem, stream); }}
#if SC_KERNEL(0, 0)
SC_MAIN_DEF(float, 0, false)
#endif
#if SC_KERNEL(0, 1)
SC_MAIN_DEF(float, 1, false)
#endif
#if SC_KERNEL(0, 2)
SC_MAIN_DEF(float, 1, true)
#endif
#if SC_KERNEL(0, 3)
SC_MAIN_DEF(float, 2, true)
#endif
#if SC_KERNEL(1, 0)
SC_MAIN_DEF(double, 0, false)
#endif
#if SC_KERNEL(1, 1)
SC_MAIN_DEF(double, 1, false)
#endif
#if SC_KERNEL(1, 2)
SC_MAIN_DEF(double, 1, true)
#endif
#if SC_KERNEL(1, 3)
SC_MAIN_DEF(double, 2, true)
#endif

#if SC_HOST
namespace {{
const char* sc_launch_f32(int mode, const SCArgs<float>* a, cudaStream_t stream) {{
  const sc::MainLaunches<float> kernels = {{sc_main_float_0_false, sc_main_float_1_false, sc_main_float_1_true,
                                           sc_main_float_2_true}};
  return sc::launch(mode, *a, kernels, stream);
}}

const char* sc_launch_f64(int mode, const SCArgs<double>* a, cudaStream_t stream) {{
  const sc::MainLaunches<double> kernels = {{sc_main_double_0_false, sc_main_double_1_false,
                                            sc_main_double_1_true, sc_main_double_2_true}};
  return sc::launch(mode, *a, kernels, stream);
}}

constexpr int32_t kInDims[] = {{{in_dims}}};
constexpr int32_t kOutDims[] = {{{out_dims}}};
constexpr int32_t kTerms[] = {{{terms}}};
constexpr double kValues[] = {{{values}}};
const SCSpec kSpec = {{kSCAbiVersion, {num_in_blocks}, {num_out_blocks}, {num_k}, {width}, {num_terms}, kInDims,
                      kOutDims, kTerms, kValues, sc_launch_f32, sc_launch_f64}};
}}  // namespace
#endif

}}  // namespace md_accel

#if SC_HOST
extern "C" const md_accel::SCSpec* md_accel_sc_spec_v1() {{ return &md_accel::kSpec; }}
#endif
"""


def generate(struct) -> str:
    """CUDA source of the kernel library for one term list (raises Unsupported)."""
    in_dims, out_dims, num_k, width, terms, values = struct
    if not terms:
        raise Unsupported("no terms")
    if len(terms) > MAX_TERMS:
        raise Unsupported(f"{len(terms)} terms > {MAX_TERMS}")
    return _SOURCE.format(
        gen=GEN_VERSION, key=structure_key(struct), num_in=sum(in_dims), num_out=sum(out_dims),
        in_dims=", ".join(map(str, in_dims)), out_dims=", ".join(map(str, out_dims)), num_k=num_k,
        num_terms=len(terms), width=width, num_in_blocks=len(in_dims), num_out_blocks=len(out_dims),
        terms=", ".join(str(v) for r in terms for v in r), values=", ".join(values),
        values_f32=", ".join(f"float({v})" for v in values),
        fwd=_body(struct, 0), bwd=_body(struct, 1), dbwd=_body(struct, 2))


# --- build and load --------------------------------------------------------------------------------

def _nvcc(cu: str, out: str, arch: str, extra: Sequence[str]) -> List[str]:
    """``_codegen.nvcc_command`` (the tp_conv kernels' flags), compiling an object when ``extra`` has -c."""
    cmd = nvcc_command(cu, out, arch)
    if "-c" in extra:
        cmd = [c for c in cmd if c != "-shared"]
    return cmd[:1] + list(extra) + cmd[1:]


def build(struct, arch: str) -> str:
    """Path of the built library for this term list and GPU arch (e.g. 'sm_90'); cached. The
    NUM_PARTS translation units compile in parallel (one nvcc process each)."""
    key = structure_key(struct)
    d = _tp_cache_dir().parent / "sc_specs"
    d.mkdir(parents=True, exist_ok=True)
    so = d / f"{key}-{arch}-v{GEN_VERSION}.so"
    if so.exists():
        return str(so)
    src = generate(struct)
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        cu = os.path.join(tmp, f"sc_spec_{key}.cu")
        Path(cu).write_text(src)
        objs = [os.path.join(tmp, f"part{p}.o") for p in range(NUM_PARTS)]
        procs = [subprocess.Popen(_nvcc(cu, o, arch, ["-c", f"-DMD_ACCEL_SC_PART={p}"]), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for p, o in enumerate(objs)]
        errors = [p.communicate()[1] for p in procs]
        out = os.path.join(tmp, "lib.so")
        if all(p.returncode == 0 for p in procs):
            link = nvcc_command(objs[0], out, arch)
            at = link.index(objs[0]) + 1
            link[at:at] = objs[1:]
            r = subprocess.run(link, capture_output=True, text=True)
            errors.append(r.stderr)
            ok = r.returncode == 0
        else:
            ok = False
        if not ok:
            raise RuntimeError(f"nvcc failed for symmetric-contraction term list {key}:\n"
                               + "\n".join(e[-3000:] for e in errors if e))
        os.replace(out, so)  # atomic: concurrent builders race harmlessly
    return str(so)


_loaded: List[str] = []


def specialise(in_dims: Sequence[int], out_dims: Sequence[int], num_k: int, terms: torch.Tensor,
               values: torch.Tensor, device=None) -> Optional[str]:
    """Build (once, cached on disk) and load the kernels generated for this term list, for the GPU
    of ``device``. Returns the library path, or None where the generator does not handle the term
    list (the generic kernels then serve it)."""
    from . import _cuda

    if not _cuda.available():
        raise RuntimeError(f"md_accel CUDA library not available: {_cuda.load_error()}")
    major, minor = torch.cuda.get_device_capability(device)
    try:
        path = build(structure(in_dims, out_dims, num_k, terms, values), f"sm_{major}{minor}")
    except Unsupported:
        return None
    if path not in _loaded:
        torch.ops.md_accel._sc_load_specialised(path)
        _loaded.append(path)
    return path


def set_specialised(enabled: bool) -> bool:
    """Use (True) or bypass (False) the loaded generated kernels; returns the previous setting."""
    return bool(torch.ops.md_accel._sc_set_specialised(enabled))


def main(argv=None) -> None:
    """Write the generated source for coupling tensors saved with ``torch.save(u)`` (``u[r][nu-1]``
    as mace's ``U_matrix_{nu}``): python -m md_accel.ops._sc_codegen U.pt IN_DIMS OUT.cu
    (IN_DIMS e.g. 1,3,5,7)."""
    import sys

    from .symmetric_contraction import SymmetricContraction

    a = argv if argv is not None else sys.argv[1:]
    u = torch.load(a[0])
    in_dims = [int(v) for v in a[1].split(",")]
    w = [[torch.zeros(1, t.shape[-1], 1, dtype=t.dtype) for t in ur] for ur in u]
    m = SymmetricContraction.from_tensors(in_dims, u, w)
    Path(a[2]).write_text(generate(structure(m.in_dims, m.out_dims, m.num_k, m.sc_terms, m.sc_values)))


if __name__ == "__main__":
    main()
