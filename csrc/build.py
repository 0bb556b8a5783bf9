"""Build description of md_accel's C++/CUDA op library, shared by setup.py and the JIT loader
(``md_accel/ops/_cuda.py``).

The library is loaded with ``torch.ops.load_library`` (it registers ``md_accel::tp_conv_*``
through TORCH_LIBRARY and has no Python module init of its own).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from pathlib import Path
from typing import List, Optional, Tuple

CSRC = Path(__file__).resolve().parent
LIB_NAME = "md_accel_ops"

# ops.cpp, fused_ops.cpp: schemas + C++ autograd (device-agnostic); the rest: the CUDA implementation.
CPU_SOURCES = ["ops.cpp", "fused_ops.cpp"]
CPU_SOURCES += ["species_linear_ops.cpp", "linear_tf32x3_ops.cpp"]
CUDA_SOURCES = ["tp_conv_cuda.cpp", "tp_conv_fused_cuda.cpp", "tp_conv_chunked_cuda.cpp", "tp_conv_kernels.cu"]
CUDA_SOURCES += ["chunk_graph_kernels.cu", "row_sum_kernels.cu"]
CUDA_SOURCES += ["species_linear_cuda.cpp", "species_linear_kernels.cu"]
HEADERS = ["tp_conv.h", "tp_conv_chunked.h", "tp_spec_abi.h", "tp_fused_abi.h", "spec_registry.h"]
HEADERS += ["species_linear.h", "vec16.cuh", "grouped_mm.h"]
# symmetric contraction (sc_ops.cpp: schemas + C++ autograd)
CPU_SOURCES += ["sc_ops.cpp"]
CUDA_SOURCES += ["sc_cuda.cpp", "sc_kernels.cu"]
HEADERS += ["sc_abi.h", "sc_kernels.cuh"]
# fused radial-MLP hidden layers (mlp_hidden_ops.cpp: schemas + C++ autograd)
CPU_SOURCES += ["mlp_hidden_ops.cpp"]
CUDA_SOURCES += ["mlp_hidden_cuda.cpp", "mlp_hidden_kernels.cu"]
HEADERS += ["mlp_hidden.h", "mlp_hidden_aten.h"]
# float32 GEMM on tensor cores, 3xTF32 split (gemm_tf32x3.cpp: schema + CPU and CUDA implementations)
CUDA_SOURCES += ["gemm_tf32x3.cpp", "gemm_tf32x3_kernels.cu", "cublas_tf32.cpp"]
HEADERS += ["cublas_tf32.h"]


def sources(cuda: bool = True) -> List[str]:
    names = CPU_SOURCES + (CUDA_SOURCES if cuda else [])
    return [str(CSRC / n) for n in names]


@functools.lru_cache(maxsize=None)  # flags, link line and build tag all ask; search once
def cublas() -> Optional[Tuple[str, str]]:
    """(include dir, library file) of cuBLAS for the CUDA build, or None: the CUDA toolkit's
    (CUDA_HOME) or the nvidia wheel's that a CUDA build of torch depends on. MD_ACCEL_CUBLAS_INCLUDE
    names a header directory alone (compile checks without a GPU)."""
    roots = []
    env = os.environ.get("MD_ACCEL_CUBLAS_INCLUDE")
    if env:
        return (env, "") if (Path(env) / "cublas_v2.h").is_file() else None
    try:
        from torch.utils.cpp_extension import CUDA_HOME

        if CUDA_HOME:
            roots.append((Path(CUDA_HOME) / "include", Path(CUDA_HOME) / "lib64"))
    except Exception:  # noqa: BLE001 (no torch / no CUDA: no cuBLAS build)
        pass
    for pkg in ("nvidia.cu13", "nvidia.cublas"):
        try:
            spec = importlib.util.find_spec(pkg)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            roots.append((Path(loc) / "include", Path(loc) / "lib"))
    for inc, lib in roots:
        libs = sorted(lib.glob("libcublas.so*")) if lib.is_dir() else []
        if (inc / "cublas_v2.h").is_file() and libs:
            return str(inc), str(libs[0])
    return None


def cxx_flags(cuda: bool = True) -> List[str]:
    found = cublas() if cuda else None
    # -idirafter: the toolkit's (and torch's) CUDA headers keep precedence; this directory only
    # supplies cuBLAS's where they have none
    return ["-O3"] + (["-DMD_ACCEL_WITH_CUBLAS=1", f"-idirafter{found[0]}"] if found else [])


def nvcc_flags() -> List[str]:
    # No --use_fast_math: the float64 path must match the reference to ~1e-12.
    return ["-O3", "-lineinfo"]


def ldflags(cuda: bool = True) -> List[str]:
    # dlopen of the plan-specialised kernel libraries (part of libc from glibc 2.34 on); cuBLAS
    # for gemm_3xtf32's small-K shapes (the same soname torch has loaded already)
    found = cublas() if cuda else None
    lib = found[1] if found else ""
    return ["-ldl"] + ([lib, f"-Wl,-rpath,{Path(lib).parent}"] if lib else [])


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

    blas = "-cublas" if cublas() else ""
    return f"torch{torch.__version__}-cuda{torch.version.cuda}{blas}-{source_hash()}".replace("+", "_")


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
    return cpp_extension.CppExtension(name, sources(False), extra_compile_args={"cxx": cxx_flags(False)})
