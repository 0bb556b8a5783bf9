"""Registration of the ``md_accel::symmetric_contraction_*`` custom operators (torch.library).

Same scheme as ``_custom_ops`` (tp_conv): the C++ library (``csrc/sc_ops.cpp``, when built)
defines the schemas, the CUDA kernels and a C++ autograd kernel; here we add the CPU
implementation (``sc_reference``, the specification) and the fake implementations. Without the
C++ library we define the schemas ourselves, register the reference for CUDA tensors too and the
autograd formulas in Python; either way the ops are differentiable twice.

``fwd(x, species, w, terms, values, in_dims, out_dims) -> out``;
``bwd(grad_out, ..., need_w) -> (grad_x, grad_w)`` (``grad_w`` zeros unless ``need_w``);
``dbwd(gg_x, gg_w, grad_out, x, species, w, ...) -> (g_grad_out, g_x, g_w)``.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import torch

from ._op_registry import register_family
from .sc_reference import reference_tables, sc_bwd_ref, sc_dbwd_ref, sc_fwd_ref

_TABLES = "Tensor terms, Tensor values, int[] in_dims, int[] out_dims"
SCHEMAS = {
    "symmetric_contraction_fwd": f"(Tensor x, Tensor species, Tensor w, {_TABLES}) -> Tensor",
    "symmetric_contraction_bwd": (
        f"(Tensor grad_out, Tensor x, Tensor species, Tensor w, {_TABLES}, bool need_w) -> (Tensor, Tensor)"),
    "symmetric_contraction_dbwd": (
        f"(Tensor gg_x, Tensor gg_w, Tensor grad_out, Tensor x, Tensor species, Tensor w, {_TABLES}) "
        "-> (Tensor, Tensor, Tensor)"),
}

# reference tables per term list: (key tensors held so their ids cannot be reused, versions, tables)
_CACHE: Dict[Tuple, Tuple] = {}


def _tables(terms: torch.Tensor, values: torch.Tensor, in_dims: List[int], out_dims: List[int], num_k: int,
            like: torch.Tensor):
    key = (id(terms), id(values), tuple(in_dims), tuple(out_dims), num_k, like.device, like.dtype)
    hit = _CACHE.get(key)
    if hit is not None and hit[1] == (terms._version, values._version):
        return hit[2]
    mono, coeff, group_k, sel = reference_tables(terms, values, sum(in_dims), sum(out_dims), num_k)
    tables = (mono.to(like.device), coeff.to(like.device, like.dtype), group_k.to(like.device),
              sel.to(like.device, like.dtype))
    _CACHE[key] = ((terms, values), (terms._version, values._version), tables)
    return tables


def _fwd_impl(x, species, w, terms, values, in_dims, out_dims):
    return sc_fwd_ref(x, species, w, *_tables(terms, values, in_dims, out_dims, w.shape[1], x), in_dims, out_dims)


def _bwd_impl(grad_out, x, species, w, terms, values, in_dims, out_dims, need_w):
    tables = _tables(terms, values, in_dims, out_dims, w.shape[1], x)
    return sc_bwd_ref(grad_out, x, species, w, *tables, in_dims, out_dims, need_w)


def _dbwd_impl(gg_x, gg_w, grad_out, x, species, w, terms, values, in_dims, out_dims):
    tables = _tables(terms, values, in_dims, out_dims, w.shape[1], x)
    return sc_dbwd_ref(gg_x, gg_w, grad_out, x, species, w, *tables, in_dims, out_dims)


def _fwd_fake(x, species, w, terms, values, in_dims, out_dims):
    return x.new_empty((x.shape[0], x.shape[1] // sum(in_dims) * sum(out_dims)))


def _bwd_fake(grad_out, x, species, w, *rest):
    return torch.empty_like(x), torch.empty_like(w)


def _dbwd_fake(gg_x, gg_w, grad_out, x, species, w, *rest):
    return torch.empty_like(grad_out), torch.empty_like(x), torch.empty_like(w)


# --- Python autograd (used only when the C++ library is not loaded) -----------------------------

def _fwd_setup(ctx, inputs, output):
    x, species, w, terms, values, in_dims, out_dims = inputs
    ctx.save_for_backward(x, species, w, terms, values)
    ctx.dims = (in_dims, out_dims)


def _fwd_backward(ctx, grad_out):
    x, species, w, terms, values = ctx.saved_tensors
    need_w = ctx.needs_input_grad[2]
    gx, gw = torch.ops.md_accel.symmetric_contraction_bwd(grad_out.contiguous(), x, species, w, terms, values,
                                                           *ctx.dims, need_w)
    return gx, None, gw if need_w else None, None, None, None, None


def _bwd_setup(ctx, inputs, output):
    grad_out, x, species, w, terms, values, in_dims, out_dims, need_w = inputs
    ctx.save_for_backward(grad_out, x, species, w, terms, values)
    ctx.dims = (in_dims, out_dims)


def _bwd_backward(ctx, gg_x, gg_w):
    grad_out, x, species, w, terms, values = ctx.saved_tensors
    gg_x = torch.zeros_like(x) if gg_x is None else gg_x.contiguous()
    gg_w = torch.zeros_like(w) if gg_w is None else gg_w.contiguous()
    g_go, g_x, g_w = torch.ops.md_accel.symmetric_contraction_dbwd(gg_x, gg_w, grad_out, x, species, w, terms,
                                                                   values, *ctx.dims)
    return g_go, g_x, None, g_w, None, None, None, None, None


def register(cpp_library_loaded: bool) -> None:
    """Register the ops once. ``cpp_library_loaded``: the C++ library is loaded (a library built
    from older sources without these ops counts as absent)."""
    register_family(
        SCHEMAS,
        (("symmetric_contraction_fwd", _fwd_impl), ("symmetric_contraction_bwd", _bwd_impl),
         ("symmetric_contraction_dbwd", _dbwd_impl)),
        (("symmetric_contraction_fwd", _fwd_fake), ("symmetric_contraction_bwd", _bwd_fake),
         ("symmetric_contraction_dbwd", _dbwd_fake)),
        (("symmetric_contraction_fwd", _fwd_backward, _fwd_setup),
         ("symmetric_contraction_bwd", _bwd_backward, _bwd_setup)),
        cpp_library_loaded)
