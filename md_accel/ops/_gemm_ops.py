"""Registration of ``md_accel::gemm_3xtf32`` (torch.library).

``gemm_3xtf32(a, b, transpose_b) -> a @ (b.T if transpose_b else b)``: a [M, K], b [K, N] (or
[N, K] when ``transpose_b``), K and N multiples of 8; a new contiguous [M, N] tensor. a may be
[G, K, d]: out [G, N, d], ``out[g, :, m] = a[g, :, m] @ B`` (an equivariant linear's block). On CUDA
(``csrc/gemm_tf32x3*.cpp/.cu``, float32 only) it runs on tensor cores with the 3xTF32 split
(float32 accuracy, not TF32's); on the CPU it is a plain matmul (float32 / float64). The C++
library, when built, defines the schema and both implementations; here we add the fake (meta)
implementation. Without it we define the schema and register the reference (``grouped_mm``,
TF32 off) for CPU and CUDA tensors. No autograd: callers wrap the op (``dA = gemm(dC, B, not t)``).
"""
from __future__ import annotations

from typing import Tuple

import torch

from ._linear_ops import grouped_mm
from ._op_registry import _defined, register_family

SCHEMAS = {"gemm_3xtf32": "(Tensor a, Tensor b, bool transpose_b) -> Tensor"}


def _check(a: torch.Tensor, b: torch.Tensor, transpose_b: bool) -> Tuple[int, int]:
    """(K, N) of a valid call; the same errors as the C++ implementations."""
    if a.dim() not in (2, 3) or b.dim() != 2:
        raise RuntimeError(f"md_accel gemm_3xtf32: a must be 2-D or 3-D and b 2-D, got {tuple(a.shape)} and "
                           f"{tuple(b.shape)}")
    k = a.shape[1]
    n, kb = (b.shape[0], b.shape[1]) if transpose_b else (b.shape[1], b.shape[0])
    if kb != k:
        raise RuntimeError(f"md_accel gemm_3xtf32: shapes {tuple(a.shape)} and {tuple(b.shape)}"
                           f"{' (b transposed)' if transpose_b else ''} do not match")
    if k % 8 != 0 or n % 8 != 0:
        raise RuntimeError(f"md_accel gemm_3xtf32: K ({k}) and N ({n}) must be multiples of 8")
    if a.device != b.device:
        raise RuntimeError("md_accel gemm_3xtf32: a and b must be on the same device")
    if a.dtype != b.dtype:
        raise RuntimeError("md_accel gemm_3xtf32: a and b must have the same dtype")
    return k, n


def gemm_3xtf32_ref(a: torch.Tensor, b: torch.Tensor, transpose_b: bool) -> torch.Tensor:
    """The specification: ``a @ (b.T if transpose_b else b)`` in the operands' precision."""
    _check(a, b, transpose_b)
    if a.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f"md_accel gemm_3xtf32: float32 or float64 expected, got {a.dtype}")
    bb = b.t() if transpose_b else b

    def product():
        return grouped_mm(a, bb).contiguous()

    if a.is_cuda and torch.get_float32_matmul_precision() != "highest":
        prev = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")  # float32 accuracy, as the CUDA kernel
        try:
            return product()
        finally:
            torch.set_float32_matmul_precision(prev)
    return product()


def _fake(a, b, transpose_b):
    _, n = _check(a, b, transpose_b)
    if a.dtype not in ((torch.float32,) if a.is_cuda else (torch.float32, torch.float64)):
        raise RuntimeError(f"md_accel gemm_3xtf32: unsupported dtype {a.dtype} on {a.device.type}")
    return a.new_empty((a.shape[0], n, a.shape[2]) if a.dim() == 3 else (a.shape[0], n))


def register(cpp_library_loaded: bool) -> None:
    """Register once. ``cpp_library_loaded``: the C++ library is loaded (one built from older
    sources without this op counts as absent). With it, C++ serves CPU and CUDA: only the fake
    implementation is added here."""
    cpp = cpp_library_loaded and _defined("gemm_3xtf32")
    register_family(SCHEMAS, () if cpp else (("gemm_3xtf32", gemm_3xtf32_ref),), (("gemm_3xtf32", _fake),), (),
                    cpp_library_loaded)
