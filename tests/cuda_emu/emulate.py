"""Run generated CUDA kernel libraries on the CPU: the source is compiled for the host with g++
against cuda_emu.h (one std::thread per CUDA thread) and called through ctypes with the same
ABI structs the op library passes (csrc/tp_conv.h, csrc/tp_fused_abi.h). Slow, and exact: fma is
std::fma, so results match the GPU's arithmetic wherever the summation order is fixed."""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

import torch

HERE = Path(__file__).resolve().parent
CSRC = HERE.parent.parent / "csrc"


def available() -> bool:
    return shutil.which("g++") is not None


def _inline_cuh(src: str, seen: set) -> str:
    """The csrc/*.cuh headers a source includes, pasted in (once each), so that the replacements
    below reach the kernels they hold too."""
    def paste(m):
        name = m.group(1)
        if name in seen:
            return ""
        seen.add(name)
        return _inline_cuh((CSRC / name).read_text().replace("#pragma once\n", ""), seen)
    return re.sub(r'^#include "(\w+\.cuh)"$', paste, src, flags=re.M)


def host_source(src: str) -> str:
    """Generated CUDA -> host C++: the runtime header, named barriers, dynamic shared memory and
    the <<<grid, block, smem, stream>>> launches are replaced by cuda_emu.h equivalents."""
    src = _inline_cuh(src, set())
    src = src.replace("#include <cuda_runtime.h>", '#include "cuda_emu.h"')
    src = src.replace('asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");',
                      "emu::named_sync(id, threads);")
    src = src.replace("extern __shared__ __align__(16) unsigned char smem_raw[];",
                      "unsigned char* smem_raw = emu::smem();")
    # static shared arrays: per-block storage that starts as NaN bytes, like the dynamic kind
    # (emu::block_static; its key, a static per declaration and kernel instantiation, names the array)
    src = re.sub(r"__shared__\s+(?:__align__\(\d+\)\s+)?([\w:]+)\s+(\w+)((?:\[[^\];]+\])+);",
                 r"static const char \2_emu_key = 0; auto& \2 = emu::block_static<\1\3>(&\2_emu_key);", src)

    def launch(m):
        grid, block, smem = [a.strip() for a in m.group(2).split(",")[:3]]
        return f"emu::launch({grid}, {block}, {smem}, [&] {{ {m.group(1)}({m.group(3)}); }});"

    # launch arguments may span lines (they never contain ';')
    return re.sub(r"([\w:]+(?:<[\w:, ]+>)?)<<<([^;]*?)>>>\(([^;]*?)\);", launch, src, flags=re.S)


def build(src: str, cache: Optional[Path] = None) -> str:
    """Host shared library of a generated source (cached by content)."""
    host = host_source(src)
    d = Path(cache or os.environ.get("MD_ACCEL_EMU_CACHE") or Path(tempfile.gettempdir()) / "md_accel_emu")
    d.mkdir(parents=True, exist_ok=True)
    headers = "".join(p.read_text() for p in sorted([*HERE.glob("*.h"), *CSRC.glob("*.h"), *CSRC.glob("*.cuh")]))
    so = d / f"{hashlib.sha256((host + headers).encode()).hexdigest()[:16]}.so"
    if not so.exists():
        with tempfile.TemporaryDirectory(dir=d) as tmp:
            cpp = Path(tmp) / "lib.cpp"
            cpp.write_text(host)
            out = Path(tmp) / "lib.so"
            r = subprocess.run(["g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-I", str(HERE), "-I",
                                str(CSRC), str(cpp), "-o", str(out)], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"host build failed:\n{r.stderr[-6000:]}")
            os.replace(out, so)
    return str(so)


class Graph(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("src", "dst", "dst_ptr", "src_perm", "src_ptr")] + [
        ("num_nodes", ctypes.c_int64), ("num_edges", ctypes.c_int64), ("w_row", ctypes.c_void_p)]


class Dims(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("in1", "in2", "w", "out", "accumulate", "split", "atomic_gx",
                                            "rows_in_gw")]

    def __init__(self, *args):
        super().__init__(*args)
        self.split = self.split or 1  # TPDims::split's default


class FusedTensors(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("x", "y", "h", "W", "g", "out", "gx", "gy", "gh", "gw")]


class FusedSpec(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("abi_version", "num_paths", "nnz", "hidden")] + [
        (n, ctypes.c_void_p) for n in ("paths", "cg_ptr", "cg_idx", "fwd_f32", "fwd_f64", "bwd_f32", "bwd_f64")]


_FWD = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(FusedTensors), ctypes.POINTER(Graph), ctypes.c_void_p,
                        ctypes.POINTER(Dims), ctypes.c_void_p)
_BWD = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(FusedTensors), ctypes.POINTER(Graph), ctypes.c_void_p,
                        ctypes.POINTER(Dims), ctypes.c_void_p, ctypes.c_void_p)


def _ptr(t: Optional[torch.Tensor]):
    return None if t is None else t.data_ptr()


class FusedLibrary:
    """A host-built fused-radial library (md_accel/ops/_codegen_fused.py) on CPU tensors: the
    graph (md_accel.ops.Graph), contiguous operands in one dtype; outputs are returned."""

    def __init__(self, src: str):
        self._lib = ctypes.CDLL(build(src))
        self._lib.md_accel_tp_fused_spec_v1.restype = ctypes.POINTER(FusedSpec)
        self.spec = self._lib.md_accel_tp_fused_spec_v1().contents

    def _fn(self, kind: str, dtype):
        ptr = getattr(self.spec, f"{kind}_{'f32' if dtype == torch.float32 else 'f64'}")
        assert ptr, f"no {kind} kernel for {dtype}"
        return (_FWD if kind == "fwd" else _BWD)(ptr)

    @staticmethod
    def _graph(g, num_nodes):
        return Graph(*(t.data_ptr() for t in (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)), num_nodes,
                     g.src.numel())

    def fwd(self, x, y, h, W, g, cg_val, dim_out):
        n = g.dst_ptr.numel() - 1
        out = torch.full((n, dim_out), float("nan"), dtype=x.dtype)
        t = FusedTensors(_ptr(x), _ptr(y), _ptr(h), _ptr(W), None, _ptr(out), None, None, None, None)
        d = Dims(x.shape[1], y.shape[1], W.shape[1], dim_out)
        err = self._fn("fwd", x.dtype)(ctypes.byref(t), ctypes.byref(self._graph(g, n)), _ptr(cg_val),
                                       ctypes.byref(d), None)
        assert err is None, err
        return out

    def bwd(self, grad_out, x, y, h, W, g, cg_val, grad_w: bool):
        """(grad_x, grad_y, grad_hidden, grad_w or None)."""
        n, e = g.dst_ptr.numel() - 1, g.src.numel()
        nan = float("nan")
        gx, gy, gh = (torch.full_like(t, nan) for t in (x, y, h))
        gw = torch.full((e, W.shape[1]), nan, dtype=x.dtype) if grad_w else None
        work = torch.full((max(e, 1), x.shape[1]), nan, dtype=x.dtype)
        t = FusedTensors(_ptr(x), _ptr(y), _ptr(h), _ptr(W), _ptr(grad_out), None, _ptr(gx), _ptr(gy), _ptr(gh),
                         _ptr(gw))
        d = Dims(x.shape[1], y.shape[1], W.shape[1], grad_out.shape[1])
        err = self._fn("bwd", x.dtype)(ctypes.byref(t), ctypes.byref(self._graph(g, n)), _ptr(cg_val),
                                       ctypes.byref(d), _ptr(work), None)
        assert err is None, err
        return gx, gy, gh, gw


class Tensors(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("x", "y", "w", "g", "ggx", "ggy", "ggw", "out", "gx", "gy", "gw")]


class Spec(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("abi_version", "num_paths", "nnz")] + [
        (n, ctypes.c_void_p) for n in ("paths", "cg_ptr", "cg_idx", "cg_val", "fwd_f32", "fwd_f64", "bwd_f32",
                                       "bwd_f64", "dbwd_f32", "dbwd_f64", "bwd_per_sm", "dbwd_per_sm")] + [
        ("rows_in_gw", ctypes.c_int), ("dbwd_in_gg_w", ctypes.c_int)]


_SPEC_FWD = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(Tensors), ctypes.POINTER(Graph), ctypes.POINTER(Dims),
                             ctypes.c_void_p)
_SPEC_BWD = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.POINTER(Tensors), ctypes.POINTER(Graph), ctypes.POINTER(Dims),
                             ctypes.c_void_p, ctypes.c_void_p)


class SpecLibrary:
    """A host-built plan-specialised tp_conv library (md_accel/ops/_codegen.py, csrc/tp_spec_abi.h).
    Graphs are given as the five int64 CPU tensors of ``TPGraph`` (any views: chunk graphs too),
    optionally a sixth, ``w_row``; outputs are written into the tensors passed."""

    def __init__(self, src: str):
        self._lib = ctypes.CDLL(build(src))
        self._lib.md_accel_tp_spec_v1.restype = ctypes.POINTER(Spec)
        self.spec = self._lib.md_accel_tp_spec_v1().contents

    def _fn(self, kind: str, dtype, proto):
        ptr = getattr(self.spec, f"{kind}_{'f32' if dtype == torch.float32 else 'f64'}")
        assert ptr, f"no {kind} kernel for {dtype}"
        return proto(ptr)

    @staticmethod
    def _graph(src, dst, dst_ptr, src_perm, src_ptr, w_row=None):
        return Graph(*(_ptr(t) for t in (src, dst, dst_ptr, src_perm, src_ptr)), dst_ptr.numel() - 1, src.numel(),
                     _ptr(w_row))

    def cg_val(self) -> torch.Tensor:
        """The CG values compiled into the library (float64)."""
        return torch.tensor([ctypes.cast(self.spec.cg_val, ctypes.POINTER(ctypes.c_double))[q]
                             for q in range(self.spec.nnz)], dtype=torch.float64)

    def fwd(self, x, y, w, graph, out, accumulate=False):
        t = Tensors(_ptr(x), _ptr(y), _ptr(w), None, None, None, None, _ptr(out), None, None, None)
        d = Dims(x.shape[1], y.shape[1], w.shape[1], out.shape[1], int(accumulate))
        err = self._fn("fwd", x.dtype, _SPEC_FWD)(ctypes.byref(t), ctypes.byref(self._graph(*graph)), ctypes.byref(d),
                                                   None)
        assert err is None, err

    def dbwd(self, ggx, ggy, ggw, grad_out, x, y, w, graph, g_out, gx, gy, gw, work, split=1, atomic_gx=False,
             rows_in_gw=False):
        """The double backward (tp_conv_dbwd_launch): g_grad_out into g_out, then grad_x, grad_y, grad_w;
        split: TPDims::split (blocks per receiver of the per-edge kernel); atomic_gx: TPDims::atomic_gx
        (work is then gx, zeroed by the caller, as tp_conv_cuda.cpp passes it); rows_in_gw: TPDims::rows_in_gw
        (work unused: may be None)."""
        t = Tensors(_ptr(x), _ptr(y), _ptr(w), _ptr(grad_out), _ptr(ggx), _ptr(ggy), _ptr(ggw), _ptr(g_out), _ptr(gx),
                    _ptr(gy), _ptr(gw))
        d = Dims(x.shape[1], y.shape[1], w.shape[1], grad_out.shape[1], 0, split, int(atomic_gx), int(rows_in_gw))
        err = self._fn("dbwd", x.dtype, _SPEC_BWD)(ctypes.byref(t), ctypes.byref(self._graph(*graph)), ctypes.byref(d),
                                                    _ptr(work), None)
        assert err is None, err

    def bwd(self, grad_out, x, y, w, graph, gx, gy, gw, work, accumulate=False, split=1, atomic_gx=False,
            rows_in_gw=False):
        t = Tensors(_ptr(x), _ptr(y), _ptr(w), _ptr(grad_out), None, None, None, None, _ptr(gx), _ptr(gy), _ptr(gw))
        d = Dims(x.shape[1], y.shape[1], w.shape[1], grad_out.shape[1], int(accumulate), split, int(atomic_gx),
                 int(rows_in_gw))
        err = self._fn("bwd", x.dtype, _SPEC_BWD)(ctypes.byref(t), ctypes.byref(self._graph(*graph)), ctypes.byref(d),
                                                   _ptr(work), None)
        assert err is None, err
