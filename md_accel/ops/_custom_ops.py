"""Registration of the ``md_accel::tp_conv_*`` custom operators (torch.library).

The C++ library (``csrc/``, when built) defines the schemas, the CUDA kernels and a C++
autograd kernel, so TorchScript models calling the ops also run from C++ (LAMMPS). Here we add
the CPU implementation (the plain-torch reference) and the fake (meta) implementations used by
torch.compile / export. Without the C++ library we define the schemas ourselves and register
the autograd formulas in Python; either way the ops are differentiable twice.
"""
from __future__ import annotations

from typing import List, Tuple

import torch

from .tp_reference import tp_conv_bwd_ref, tp_conv_dbwd_ref, tp_conv_fwd_ref

_GRAPH = "Tensor src, Tensor dst, Tensor dst_ptr, Tensor src_perm, Tensor src_ptr"
_PLAN = "Tensor paths, Tensor cg_ptr, Tensor cg_idx, Tensor cg_val"
SCHEMAS = {
    "tp_conv_fwd": f"(Tensor x, Tensor y, Tensor w, {_GRAPH}, {_PLAN}, int dim_out) -> Tensor",
    "tp_conv_bwd": f"(Tensor grad_out, Tensor x, Tensor y, Tensor w, {_GRAPH}, {_PLAN}) -> (Tensor, Tensor, Tensor)",
    "tp_conv_dbwd": (
        f"(Tensor gg_x, Tensor gg_y, Tensor gg_w, Tensor grad_out, Tensor x, Tensor y, Tensor w, {_GRAPH}, "
        f"{_PLAN}) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
}


def _dense_cg(paths: torch.Tensor, cg_ptr: torch.Tensor, cg_idx: torch.Tensor, cg_val: torch.Tensor,
              dtype: torch.dtype) -> Tuple[List[List[int]], List[torch.Tensor]]:
    """PLAN tensors -> (paths as lists, dense CG block per path) for the reference."""
    plist = paths.tolist()
    ptr = cg_ptr.tolist()
    idx = cg_idx.to("cpu", torch.int64)
    val = cg_val.to("cpu", dtype)
    dense = []
    for p, row in enumerate(plist):
        l1, l2, l3 = row[2], row[4], row[6]
        c = torch.zeros((2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1), dtype=dtype)
        sl = slice(ptr[p], ptr[p + 1])
        c[idx[sl, 0], idx[sl, 1], idx[sl, 2]] = val[sl]
        dense.append(c)
    return plist, dense


def _fwd_cpu(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out):
    plist, dense = _dense_cg(paths, cg_ptr, cg_idx, cg_val, x.dtype)
    return tp_conv_fwd_ref(x, y, w, src, dst, dst_ptr.numel() - 1, plist, dense, dim_out)


def _bwd_cpu(grad_out, x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val):
    plist, dense = _dense_cg(paths, cg_ptr, cg_idx, cg_val, x.dtype)
    return tp_conv_bwd_ref(grad_out, x, y, w, src, dst, plist, dense)


def _dbwd_cpu(gg_x, gg_y, gg_w, grad_out, x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
              cg_idx, cg_val):
    plist, dense = _dense_cg(paths, cg_ptr, cg_idx, cg_val, x.dtype)
    return tp_conv_dbwd_ref(gg_x, gg_y, gg_w, grad_out, x, y, w, src, dst, plist, dense)


def _fwd_fake(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out):
    return x.new_empty((dst_ptr.shape[0] - 1, dim_out))


def _bwd_fake(grad_out, x, y, w, *rest):
    return torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


def _dbwd_fake(gg_x, gg_y, gg_w, grad_out, x, y, w, *rest):
    return torch.empty_like(grad_out), torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


# --- Python autograd (used only when the C++ library is not loaded) -----------------------------
_N_REST = 9  # graph (5) + plan (4) tensors after the differentiable inputs


def _fwd_setup(ctx, inputs, output):
    x, y, w = inputs[:3]
    ctx.save_for_backward(x, y, w, *inputs[3:3 + _N_REST])


def _fwd_backward(ctx, grad_out):
    x, y, w, *rest = ctx.saved_tensors
    gx, gy, gw = torch.ops.md_accel.tp_conv_bwd(grad_out.contiguous(), x, y, w, *rest)
    return (gx, gy, gw) + (None,) * (_N_REST + 1)


def _bwd_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:4 + _N_REST])


def _bwd_backward(ctx, gg_x, gg_y, gg_w):
    grad_out, x, y, w, *rest = ctx.saved_tensors
    gg = [g if g is not None else torch.zeros_like(t) for g, t in ((gg_x, x), (gg_y, y), (gg_w, w))]
    g_go, g_x, g_y, g_w = torch.ops.md_accel.tp_conv_dbwd(*[g.contiguous() for g in gg], grad_out, x, y, w, *rest)
    return (g_go, g_x, g_y, g_w) + (None,) * _N_REST


_REGISTERED = False
_LIBS: List[torch.library.Library] = []


def register(cpp_library_loaded: bool) -> None:
    """Register the ops once. ``cpp_library_loaded``: the C++ library defined the schemas."""
    global _REGISTERED
    if _REGISTERED:
        return
    if cpp_library_loaded:
        lib = torch.library.Library("md_accel", "IMPL")
    else:
        lib = torch.library.Library("md_accel", "DEF")
        for name, schema in SCHEMAS.items():
            lib.define(name + schema)
    _LIBS.append(lib)
    for name, fn in (("tp_conv_fwd", _fwd_cpu), ("tp_conv_bwd", _bwd_cpu), ("tp_conv_dbwd", _dbwd_cpu)):
        lib.impl(name, fn, "CPU")
    for name, fn in (("tp_conv_fwd", _fwd_fake), ("tp_conv_bwd", _bwd_fake), ("tp_conv_dbwd", _dbwd_fake)):
        torch.library.register_fake(f"md_accel::{name}", fn, lib=lib)
    if not cpp_library_loaded:
        torch.library.register_autograd("md_accel::tp_conv_fwd", _fwd_backward, setup_context=_fwd_setup, lib=lib)
        torch.library.register_autograd("md_accel::tp_conv_bwd", _bwd_backward, setup_context=_bwd_setup, lib=lib)
    _REGISTERED = True
