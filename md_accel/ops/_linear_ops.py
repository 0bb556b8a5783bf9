"""Registration of ``md_accel::linear_tf32x3`` (``csrc/linear_tf32x3_ops.cpp``): ``a @ b``,
differentiable, on tensor cores at float32 accuracy (3xTF32) for CUDA float32 inputs, ``mm``
otherwise. The radial MLPs' last layer (``E x hidden`` times ``hidden x weights``) runs through
it, and the equivariant linears: ``a`` may be ``[G, K, d]`` (nodes x channels x components), then
``out[g, :, m] = a[g, :, m] @ b``, ``[G, N, d]``. Without the C++ library the schema is defined
here with the plain ``mm`` behind it.
"""
from __future__ import annotations

import torch

from ._op_registry import register_family

SCHEMAS = {"linear_tf32x3": "(Tensor a, Tensor b) -> Tensor"}


def grouped_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``; for a [G, K, d] per group and component (``out[g, :, m] = a[g, :, m] @ b``) as one
    GEMM over a transposed copy's rows (``torch.matmul`` would batch per group). The Python twin of
    csrc/grouped_mm.h."""
    if a.dim() == 3:
        g, k, d = a.shape
        return torch.mm(a.transpose(1, 2).reshape(g * d, k), b).view(g, d, b.shape[1]).transpose(1, 2).contiguous()
    return torch.mm(a, b)



def _fake(a, b):
    if a.dim() == 3:
        return a.new_empty((a.shape[0], b.shape[1], a.shape[2]))
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, g):
    a, b = ctx.saved_tensors
    ga = torch.ops.md_accel.linear_tf32x3(g, b.t().contiguous()) if ctx.needs_input_grad[0] else None
    gb = None
    if ctx.needs_input_grad[1]:
        gb = a.t().mm(g) if a.dim() == 2 else torch.tensordot(a, g, dims=([0, 2], [0, 2]))
    return ga, gb


def register(cpp_library_loaded: bool) -> None:
    register_family(SCHEMAS, (("linear_tf32x3", grouped_mm),), (("linear_tf32x3", _fake),),
                    (("linear_tf32x3", _backward, _setup),), cpp_library_loaded)
