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

from .tp_reference import (tp_conv_bwd_ref, tp_conv_dbwd_ref, tp_conv_fused_bwd_ref, tp_conv_fused_fwd_ref,
                           tp_conv_fwd_ref)

_GRAPH = "Tensor src, Tensor dst, Tensor dst_ptr, Tensor src_perm, Tensor src_ptr"
_PLAN = "Tensor paths, Tensor cg_ptr, Tensor cg_idx, Tensor cg_val"
SCHEMAS = {
    "tp_conv_fwd": f"(Tensor x, Tensor y, Tensor w, {_GRAPH}, {_PLAN}, int dim_out) -> Tensor",
    "tp_conv_bwd": f"(Tensor grad_out, Tensor x, Tensor y, Tensor w, {_GRAPH}, {_PLAN}) -> (Tensor, Tensor, Tensor)",
    "tp_conv_dbwd": (
        f"(Tensor gg_x, Tensor gg_y, Tensor gg_w, Tensor grad_out, Tensor x, Tensor y, Tensor w, {_GRAPH}, "
        f"{_PLAN}, bool need_grad_out=True) -> (Tensor, Tensor, Tensor, Tensor)"
    ),
    # the radial MLP's last linear layer fused in: w = hidden @ W (md_accel/ops/_codegen_fused.py)
    "tp_conv_fused_fwd": f"(Tensor x, Tensor y, Tensor hidden, Tensor W, {_GRAPH}, {_PLAN}, int dim_out) -> Tensor",
    "tp_conv_fused_bwd": (
        f"(Tensor grad_out, Tensor x, Tensor y, Tensor hidden, Tensor W, {_GRAPH}, {_PLAN}, bool need_grad_W) "
        "-> (Tensor, Tensor, Tensor, Tensor)"
    ),
    # tp_conv_fused_fwd with hidden.index_select(0, w_row): edges that share weight rows
    "tp_conv_pair_fwd": (
        f"(Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor w_row, {_GRAPH}, {_PLAN}, int dim_out) -> Tensor"
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
              cg_idx, cg_val, need_grad_out=True):
    plist, dense = _dense_cg(paths, cg_ptr, cg_idx, cg_val, x.dtype)
    return tp_conv_dbwd_ref(gg_x, gg_y, gg_w, grad_out, x, y, w, src, dst, plist, dense, need_grad_out)


def _fused_fwd_cpu(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out):
    plist, dense = _dense_cg(paths, cg_ptr, cg_idx, cg_val, x.dtype)
    return tp_conv_fused_fwd_ref(x, y, h, W, src, dst, dst_ptr.numel() - 1, plist, dense, dim_out)


def _fused_bwd_cpu(grad_out, x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val,
                   need_grad_W):
    plist, dense = _dense_cg(paths, cg_ptr, cg_idx, cg_val, x.dtype)
    return tp_conv_fused_bwd_ref(grad_out, x, y, h, W, src, dst, plist, dense, need_grad_W)


def _pair_fwd_composed(x, y, h, W, w_row, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val,
                       dim_out):
    """The definition of ``tp_conv_pair_fwd``; its implementation where the C++ library is not loaded."""
    return torch.ops.md_accel.tp_conv_fused_fwd(x, y, h.index_select(0, w_row), W, src, dst, dst_ptr, src_perm,
                                                src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out)


def _fwd_fake(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out):
    return x.new_empty((dst_ptr.shape[0] - 1, dim_out))


def _bwd_fake(grad_out, x, y, w, *rest):
    return torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


def _dbwd_fake(gg_x, gg_y, gg_w, grad_out, x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx,
               cg_val, need_grad_out=True):
    g_go = torch.empty_like(grad_out) if need_grad_out else grad_out.new_empty((0, grad_out.shape[1]))
    return g_go, torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


def _fused_fwd_fake(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out):
    return x.new_empty((dst_ptr.shape[0] - 1, dim_out))


def _pair_fwd_fake(x, y, h, W, w_row, src, dst, dst_ptr, *rest):
    return x.new_empty((dst_ptr.shape[0] - 1, rest[-1]))


def _fused_bwd_fake(grad_out, x, y, h, W, *rest):
    need_grad_W = rest[-1]
    return (torch.empty_like(x), torch.empty_like(y), torch.empty_like(h),
            W.new_empty((W.shape[0] if need_grad_W else 0, W.shape[1])))


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
    need_go = ctx.needs_input_grad[0]
    g_go, g_x, g_y, g_w = torch.ops.md_accel.tp_conv_dbwd(*[g.contiguous() for g in gg], grad_out, x, y, w, *rest,
                                                          need_go)
    return (g_go if need_go else None, g_x, g_y, g_w) + (None,) * _N_REST


def _fused_fwd_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:4 + _N_REST])


def _fused_fwd_backward(ctx, grad_out):
    x, y, h, W, *rest = ctx.saved_tensors
    need_W = ctx.needs_input_grad[3]
    gx, gy, gh, gW = torch.ops.md_accel.tp_conv_fused_bwd(grad_out.contiguous(), x, y, h, W, *rest, need_W)
    return (gx, gy, gh, gW if need_W else None) + (None,) * (_N_REST + 1)


def _fused_bwd_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:5 + _N_REST])


def _fused_bwd_backward(ctx, gg_x, gg_y, gg_h, gg_W):
    """Composed from unfused ops, as csrc/fused_ops.cpp (see there): gg_w = gg_h W + h gg_W."""
    g, x, y, h, W, *rest = ctx.saved_tensors
    if gg_W is not None and gg_W.numel() == 0:
        gg_W = None
    w = h @ W
    gg_w = torch.zeros_like(w)
    if gg_h is not None:
        gg_w = gg_w + gg_h @ W
    if gg_W is not None:
        gg_w = gg_w + h @ gg_W
    gg_x = gg_x.contiguous() if gg_x is not None else torch.zeros_like(x)
    gg_y = gg_y.contiguous() if gg_y is not None else torch.zeros_like(y)
    need_g = ctx.needs_input_grad[0]
    g_g, g_x, g_y, g_w = torch.ops.md_accel.tp_conv_dbwd(gg_x, gg_y, gg_w.contiguous(), g, x, y, w, *rest, need_g)
    g_g = g_g if need_g else None
    need_h, need_W = ctx.needs_input_grad[3], ctx.needs_input_grad[4]
    gw = None
    if (need_h and gg_W is not None) or (need_W and gg_h is not None):
        gw = torch.ops.md_accel.tp_conv_bwd(g, x, y, w, *rest)[2]
    g_h = g_W = None
    if need_h:
        g_h = g_w @ W.t() if gg_W is None else g_w @ W.t() + gw @ gg_W.t()
    if need_W:
        g_W = h.t() @ g_w if gg_h is None else h.t() @ g_w + gg_h.t() @ gw
    return (g_g, g_x, g_y, g_h, g_W) + (None,) * (_N_REST + 1)


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
    for name, fn in (("tp_conv_fwd", _fwd_cpu), ("tp_conv_bwd", _bwd_cpu), ("tp_conv_dbwd", _dbwd_cpu),
                     ("tp_conv_fused_fwd", _fused_fwd_cpu), ("tp_conv_fused_bwd", _fused_bwd_cpu)):
        lib.impl(name, fn, "CPU")
    for name, fn in (("tp_conv_fwd", _fwd_fake), ("tp_conv_bwd", _bwd_fake), ("tp_conv_dbwd", _dbwd_fake),
                     ("tp_conv_fused_fwd", _fused_fwd_fake), ("tp_conv_fused_bwd", _fused_bwd_fake)):
        torch.library.register_fake(f"md_accel::{name}", fn, lib=lib)
    if cpp_library_loaded:
        torch.library.register_fake("md_accel::tp_conv_pair_fwd", _pair_fwd_fake, lib=lib)
    else:
        lib.impl("tp_conv_pair_fwd", _pair_fwd_composed, "CompositeImplicitAutograd")
        for name, bwd, setup in (("tp_conv_fwd", _fwd_backward, _fwd_setup), ("tp_conv_bwd", _bwd_backward, _bwd_setup),
                                 ("tp_conv_fused_fwd", _fused_fwd_backward, _fused_fwd_setup),
                                 ("tp_conv_fused_bwd", _fused_bwd_backward, _fused_bwd_setup)):
            torch.library.register_autograd(f"md_accel::{name}", bwd, setup_context=setup, lib=lib)
    _REGISTERED = True
