"""md_accel's equivariant operators: a plain-torch CPU reference (the specification) and fused
CUDA kernels behind the same torch custom ops (``torch.ops.md_accel.*``)."""
from ..o3.spherical_harmonics import SphericalHarmonics, spherical_harmonics
from . import _custom_ops, _gemm_ops, _linear_ops, _mlp_ops, _sc_ops
from ._cuda import set_dbwd_in_gg_w, set_deterministic, set_rows_in_grad_w
from .tp_conv import (Graph, TensorProductConv, build_graph, check_partners, graph_order, pair_rows, per_edge,
                      weight_rows)
from .symmetric_contraction import SymmetricContraction
from .tp_problem import Instruction, TPProblem


def _load_cpp_library() -> bool:
    """Load the compiled C++/CUDA library if it was built (it defines the op schemas)."""
    try:
        from . import _cuda
    except ImportError:
        return False
    return bool(_cuda.load())


_CPP_LOADED = _load_cpp_library()
_custom_ops.register(cpp_library_loaded=_CPP_LOADED)
_sc_ops.register(cpp_library_loaded=_CPP_LOADED)
_mlp_ops.register(cpp_library_loaded=_CPP_LOADED)
_linear_ops.register(cpp_library_loaded=_CPP_LOADED)
_gemm_ops.register(cpp_library_loaded=_CPP_LOADED)

__all__ = ["SphericalHarmonics", "spherical_harmonics", "TensorProductConv", "Graph", "build_graph", "graph_order",
           "check_partners", "pair_rows", "per_edge", "weight_rows", "TPProblem", "Instruction", "SymmetricContraction",
           "set_dbwd_in_gg_w", "set_deterministic", "set_rows_in_grad_w"]
