"""Registration of the ``md_accel::species_linear_*`` custom operators (torch.library).

Same scheme as ``_custom_ops`` (tp_conv): the C++ library (``csrc/species_linear_ops.cpp``, when
built) defines the schemas, the CUDA kernels and a C++ autograd kernel; here we add the CPU
implementation (``sl_reference``, the specification) and the fake implementations. Without the
C++ library we define the schemas ourselves, register the reference for CUDA tensors too and the
autograd formulas in Python. The three ops are closed under differentiation, so any order works.

``fwd(x, weight, species, order, ins, path_weights, dim_out) -> out``
``bwd_x(grad_out, weight, species, order, ins, path_weights, dim_in) -> grad_x``
``bwd_w(x, grad_out, species, order, ins, path_weights, num_species) -> grad_weight``
``order`` = ``torch.argsort(species, stable=True)`` (the CUDA kernels walk nodes species by
species; the reference ignores it). Tables: see ``sl_reference``.
"""
from __future__ import annotations

import torch

from ._op_registry import register_family
from .sl_reference import (species_linear_bwd_w_ref, species_linear_bwd_x_ref, species_linear_fwd_ref,
                           weight_numel)

_ARGS = "Tensor species, Tensor order, int[] ins, float[] path_weights"
SCHEMAS = {
    "species_linear_fwd": f"(Tensor x, Tensor weight, {_ARGS}, int dim_out) -> Tensor",
    "species_linear_bwd_x": f"(Tensor grad_out, Tensor weight, {_ARGS}, int dim_in) -> Tensor",
    "species_linear_bwd_w": f"(Tensor x, Tensor grad_out, {_ARGS}, int num_species) -> Tensor",
}


def _fwd_impl(x, weight, species, order, ins, path_weights, dim_out):
    return species_linear_fwd_ref(x, weight, species, ins, path_weights, dim_out)


def _bwd_x_impl(grad_out, weight, species, order, ins, path_weights, dim_in):
    return species_linear_bwd_x_ref(grad_out, weight, species, ins, path_weights, dim_in)


def _bwd_w_impl(x, grad_out, species, order, ins, path_weights, num_species):
    return species_linear_bwd_w_ref(x, grad_out, species, ins, path_weights, num_species)


def _fwd_fake(x, weight, species, order, ins, path_weights, dim_out):
    return x.new_empty((x.shape[0], dim_out))


def _bwd_x_fake(grad_out, weight, species, order, ins, path_weights, dim_in):
    return grad_out.new_empty((grad_out.shape[0], dim_in))


def _bwd_w_fake(x, grad_out, species, order, ins, path_weights, num_species):
    return x.new_empty((num_species, weight_numel(ins)))


# --- Python autograd (used only when the C++ library does not define the ops) -------------------
# inputs (a, b, species, order, ins, path_weights, size); a and b are the differentiable operands

# a is kept only when b requires grad and b only when a does (each gradient needs the other
# operand), as the C++ autograd does; the sizes are kept instead.

def _setup(ctx, inputs, output):
    a, b, species, order, ins, pw, _ = inputs
    ctx.save_for_backward(a if b.requires_grad else None, b if a.requires_grad else None, species, order)
    ctx.tables = (ins, pw)
    ctx.a_cols, ctx.b_rows, ctx.b_cols = a.shape[1], b.shape[0], b.shape[1]


def _fwd_backward(ctx, g):
    x, w, species, order = ctx.saved_tensors
    ops, g = torch.ops.md_accel, g.contiguous()
    gx = ops.species_linear_bwd_x(g, w, species, order, *ctx.tables, ctx.a_cols) if ctx.needs_input_grad[0] else None
    gw = ops.species_linear_bwd_w(x, g, species, order, *ctx.tables, ctx.b_rows) if ctx.needs_input_grad[1] else None
    return gx, gw, None, None, None, None, None


def _bwd_x_backward(ctx, h):
    g, w, species, order = ctx.saved_tensors
    ops, h = torch.ops.md_accel, h.contiguous()
    gg = ops.species_linear_fwd(h, w, species, order, *ctx.tables, ctx.a_cols) if ctx.needs_input_grad[0] else None
    gw = ops.species_linear_bwd_w(h, g, species, order, *ctx.tables, ctx.b_rows) if ctx.needs_input_grad[1] else None
    return gg, gw, None, None, None, None, None


def _bwd_w_backward(ctx, hw):
    x, g, species, order = ctx.saved_tensors
    ops, hw = torch.ops.md_accel, hw.contiguous()
    gx = ops.species_linear_bwd_x(g, hw, species, order, *ctx.tables, ctx.a_cols) if ctx.needs_input_grad[0] else None
    gg = ops.species_linear_fwd(x, hw, species, order, *ctx.tables, ctx.b_cols) if ctx.needs_input_grad[1] else None
    return gx, gg, None, None, None, None, None


def register(cpp_library_loaded: bool) -> None:
    """Register the ops once. ``cpp_library_loaded``: the C++ library is loaded (a library built
    from older sources without these ops counts as absent)."""
    register_family(
        SCHEMAS,
        (("species_linear_fwd", _fwd_impl), ("species_linear_bwd_x", _bwd_x_impl),
         ("species_linear_bwd_w", _bwd_w_impl)),
        (("species_linear_fwd", _fwd_fake), ("species_linear_bwd_x", _bwd_x_fake),
         ("species_linear_bwd_w", _bwd_w_fake)),
        (("species_linear_fwd", _fwd_backward, _setup), ("species_linear_bwd_x", _bwd_x_backward, _setup),
         ("species_linear_bwd_w", _bwd_w_backward, _setup)),
        cpp_library_loaded)


def _register_now() -> None:
    """Register at import (``md_accel.ops`` has loaded the C++ library by now, if it can)."""
    from . import _cuda

    register(cpp_library_loaded=_cuda.load())


_register_now()
