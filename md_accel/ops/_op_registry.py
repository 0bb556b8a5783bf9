"""Registration of a family of ``md_accel::*`` ops with torch.library, shared by the op modules.

The C++ library, when loaded, defines the schemas, the CUDA kernels and the C++ autograd; the
Python side then adds the CPU reference and the fake (meta) implementations. Without it (or with
a library built from older sources that lacks the family), the schemas are defined here, the
reference serves CUDA tensors too and autograd is registered in Python.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import torch

_LIBS: List[torch.library.Library] = []  # kept alive: a dropped Library unregisters its ops
_REGISTERED: List[str] = []
_FROM_CPP: List[str] = []  # ops of the families whose schemas and CUDA kernels came from C++


def _defined(name: str) -> bool:
    try:
        getattr(torch.ops.md_accel, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def register_family(schemas: Dict[str, str], impls: Sequence[Tuple[str, Callable]],
                    fakes: Sequence[Tuple[str, Callable]],
                    autograd: Sequence[Tuple[str, Callable, Callable]], cpp_library_loaded: bool) -> None:
    """Once per family (keyed by its first op): ``impls`` (name, CPU reference), ``fakes``
    (name, fake impl), ``autograd`` (name, backward, setup_context; Python fallback only)."""
    key = next(iter(schemas))
    if key in _REGISTERED:
        return
    cpp = cpp_library_loaded and _defined(key)
    if cpp:
        lib = torch.library.Library("md_accel", "IMPL")
    else:
        lib = torch.library.Library("md_accel", "FRAGMENT")
        for name, schema in schemas.items():
            lib.define(name + schema)
    _LIBS.append(lib)
    for name, fn in impls:
        lib.impl(name, fn, "CPU")
        if not cpp:  # the reference serves CUDA tensors too
            lib.impl(name, fn, "CUDA")
    for name, fn in fakes:
        torch.library.register_fake(f"md_accel::{name}", fn, lib=lib)
    if not cpp:
        for name, backward, setup in autograd:
            torch.library.register_autograd(f"md_accel::{name}", backward, setup_context=setup, lib=lib)
    _REGISTERED.append(key)
    if cpp:
        _FROM_CPP.extend(schemas)


def defined_in_cpp(name: str) -> bool:
    """``md_accel::name`` is served by the loaded C++ library (not the Python fallback)."""
    return name in _FROM_CPP
