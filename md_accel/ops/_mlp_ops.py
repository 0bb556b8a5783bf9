"""Registration of the ``md_accel::mlp_hidden_*`` custom operators (torch.library).

Same scheme as ``_sl_ops``: the C++ library (``csrc/mlp_hidden_ops.cpp``, when built) defines the
schemas, the fused CUDA kernels and a C++ autograd kernel; here we add the CPU implementation
(``mlp_reference``, the specification) and the fake implementations. Without the C++ library we
define the schemas ourselves, register the reference for CUDA tensors too and the autograd in
Python (the same formulas as the C++ one).

``fwd(x, weights, cst) -> h``; ``bwd(x, grad_h, weights, cst) -> grad_x`` (see ``mlp_reference``).
Autograd: ``fwd``'s x-gradient is ``bwd``; everything else (the weight gradients, ``bwd``'s own
gradients) comes from autograd through the differentiable reference, recomputed in the backward.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import torch

from ._op_registry import register_family
from .mlp_reference import mlp_hidden_bwd_ref, mlp_hidden_fwd_ref

SCHEMAS = {
    "mlp_hidden_fwd": "(Tensor x, Tensor[] weights, float cst) -> Tensor",
    "mlp_hidden_bwd": "(Tensor x, Tensor grad_h, Tensor[] weights, float cst) -> Tensor",
}


def _fwd_fake(x, weights, cst):
    return x.new_empty((x.shape[0], weights[-1].shape[1]))


def _bwd_fake(x, grad_h, weights, cst):
    return x.new_empty(x.shape)


# --- Python autograd (used only when the C++ library does not define the ops) -------------------

def reference_vjp(fn: Callable, inputs: Sequence[torch.Tensor], need: Sequence[bool],
                  grad: torch.Tensor) -> List[Optional[torch.Tensor]]:
    """Gradients of ``<grad, fn(*inputs)>`` for the inputs with ``need``, by autograd through ``fn``
    recomputed here. Under create_graph the inputs themselves are used (the results stay
    differentiable); otherwise detached copies keep the recomputed graph local."""
    if not any(need):
        return [None] * len(need)
    create = torch.is_grad_enabled()
    with torch.enable_grad():
        ins = [t if create and t.requires_grad else t.detach().requires_grad_(n) for t, n in zip(inputs, need)]
        got = iter(torch.autograd.grad(fn(*ins), [t for t, n in zip(ins, need) if n], grad, create_graph=create))
    return [next(got) if n else None for n in need]


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:-2], *inputs[-2])
    ctx.cst = inputs[-1]


def _fwd_backward(ctx, g):
    x, *ws = ctx.saved_tensors
    need_x, need_w = ctx.needs_input_grad[0], list(ctx.needs_input_grad[1])
    g = g.contiguous()
    gx = torch.ops.md_accel.mlp_hidden_bwd(x, g, ws, ctx.cst) if need_x else None
    gw = reference_vjp(lambda x, *w: mlp_hidden_fwd_ref(x, list(w), ctx.cst), [x, *ws], [False] + need_w, g)
    return gx, gw[1:], None


def _bwd_backward(ctx, gg):
    x, grad_h, *ws = ctx.saved_tensors
    need = [ctx.needs_input_grad[0], ctx.needs_input_grad[1]] + list(ctx.needs_input_grad[2])
    got = reference_vjp(lambda x, g, *w: mlp_hidden_bwd_ref(x, g, list(w), ctx.cst), [x, grad_h, *ws], need,
                        gg.contiguous())
    return got[0], got[1], got[2:], None


def register(cpp_library_loaded: bool) -> None:
    """Register the ops once. ``cpp_library_loaded``: the C++ library is loaded (a library built
    from older sources without these ops counts as absent)."""
    register_family(
        SCHEMAS,
        (("mlp_hidden_fwd", mlp_hidden_fwd_ref), ("mlp_hidden_bwd", mlp_hidden_bwd_ref)),
        (("mlp_hidden_fwd", _fwd_fake), ("mlp_hidden_bwd", _bwd_fake)),
        (("mlp_hidden_fwd", _fwd_backward, _setup), ("mlp_hidden_bwd", _bwd_backward, _setup)),
        cpp_library_loaded)
