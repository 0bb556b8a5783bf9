"""Build description of md_accel's C++/CUDA op library, shared by setup.py and the JIT loader
(``md_accel/ops/_cuda.py``).

The library is loaded with ``torch.ops.load_library`` (it registers ``md_accel::tp_conv_*``
through TORCH_LIBRARY and has no Python module init of its own).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import List

CSRC = Path(__file__).resolve().parent
LIB_NAME = "md_accel_ops"

# ops.cpp, fused_ops.cpp: schemas + C++ autograd (device-agnostic); the rest: the CUDA implementation.
CPU_SOURCES = ["ops.cpp", "fused_ops.cpp"]
CPU_SOURCES += ["species_linear_ops.cpp", "linear_tf32x3_ops.cpp"]
CUDA_SOURCES = ["tp_conv_cuda.cpp", "tp_conv_fused_cuda.cpp", "tp_conv_chunked_cuda.cpp", "tp_conv_kernels.cu"]
CUDA_SOURCES += ["species_linear_cuda.cpp", "species_linear_kernels.cu"]
HEADERS = ["tp_conv.h", "tp_conv_chunked.h", "tp_spec_abi.h", "tp_fused_abi.h", "spec_registry.h"]
HEADERS += ["species_linear.h", "vec16.cuh"]
# symmetric contraction (sc_ops.cpp: schemas + C++ autograd)
CPU_SOURCES += ["sc_ops.cpp"]
CUDA_SOURCES += ["sc_cuda.cpp", "sc_kernels.cu"]
HEADERS += ["sc_abi.h", "sc_kernels.cuh"]
# fused radial-MLP hidden layers (mlp_hidden_ops.cpp: schemas + C++ autograd)
CPU_SOURCES += ["mlp_hidden_ops.cpp"]
CUDA_SOURCES += ["mlp_hidden_cuda.cpp", "mlp_hidden_kernels.cu"]
HEADERS += ["mlp_hidden.h", "mlp_hidden_aten.h"]
# float32 GEMM on tensor cores, 3xTF32 split (gemm_tf32x3.cpp: schema + CPU and CUDA implementations)
CUDA_SOURCES += ["gemm_tf32x3.cpp", "gemm_tf32x3_kernels.cu"]


def sources(cuda: bool = True) -> List[str]:
    names = CPU_SOURCES + (CUDA_SOURCES if cuda else [])
    return [str(CSRC / n) for n in names]


def cxx_flags() -> List[str]:
    return ["-O3"]


def nvcc_flags() -> List[str]:
    # No --use_fast_math: the float64 path must match the reference to ~1e-12.
    return ["-O3", "-lineinfo"]


def ldflags() -> List[str]:
    # dlopen of the plan-specialised kernel libraries (part of libc from glibc 2.34 on)
    return ["-ldl"]


def source_hash(cuda: bool = True) -> str:
    """Hash of every source and header: names the JIT build directory."""
    h = hashlib.sha256()
    for n in sorted(CPU_SOURCES + (CUDA_SOURCES if cuda else []) + HEADERS):
        h.update(n.encode())
        h.update((CSRC / n).read_bytes())
    return h.hexdigest()[:16]


def jit_tag() -> str:
    """Name of the JIT build of the installed torch, its CUDA and these sources (the build
    directory's name; tools/gpu_check.sh names carried builds by it)."""
    import torch

    return f"torch{torch.__version__}-cuda{torch.version.cuda}-{source_hash()}".replace("+", "_")


def extension(name: str = "md_accel._C", cuda: bool = True):
    """setuptools extension for setup.py: ``ext_modules=[extension()]`` with torch's BuildExtension.

    Set TORCH_CUDA_ARCH_LIST (e.g. "9.0") to choose the GPU architectures; torch's default is the
    visible GPU, or a broad list without one.
    """
    from torch.utils import cpp_extension

    if cuda:
        return cpp_extension.CUDAExtension(
            name, sources(True), extra_compile_args={"cxx": cxx_flags(), "nvcc": nvcc_flags()},
            extra_link_args=ldflags())
    return cpp_extension.CppExtension(name, sources(False), extra_compile_args={"cxx": cxx_flags()})
