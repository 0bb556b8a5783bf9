"""Finds, or builds at first use, md_accel's C++/CUDA op library and loads it into ``torch.ops``.

Order of preference: a library built by setup.py (``md_accel/_C*.so``), the path in
``MD_ACCEL_OPS_LIBRARY``, then a JIT build of ``csrc/`` (torch.utils.cpp_extension.load) into
``$MD_ACCEL_BUILD_DIR/<torch>-<cuda>-<sources hash>`` (default base ``~/.cache/md_accel``). The JIT build
runs only where torch has CUDA and ``MD_ACCEL_NO_BUILD`` is unset.

``specialise(plan)`` builds (nvcc, cached) and loads plan-specialised kernels (``_codegen.py``);
plans without one run the generic kernels. C++ users preload built ones with
``MD_ACCEL_TP_KERNELS=/path/a.so:/path/b.so``. ``specialise_fused(plan, hidden)`` does the same for
the fused-radial kernels (``_codegen_fused.py``; ``MD_ACCEL_TP_FUSED_KERNELS``).

Load this before ``_custom_ops.register``: the library defines the op schemas itself.
"""
from __future__ import annotations

import glob
import importlib.util
import os
from pathlib import Path
from typing import Optional, Union

import torch

_PKG = Path(__file__).resolve().parent.parent
_CSRC = _PKG.parent / "csrc"

_path: Optional[str] = None
_error: Optional[str] = None
_tried = False


def _build_module():
    spec = importlib.util.spec_from_file_location("_md_accel_csrc_build", _CSRC / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _prebuilt() -> Optional[str]:
    env = os.environ.get("MD_ACCEL_OPS_LIBRARY")
    if env:
        return env
    found = sorted(glob.glob(str(_PKG / "_C*.so")))
    return found[0] if found else None


def _jit_build(verbose: bool) -> str:
    from torch.utils import cpp_extension

    b = _build_module()
    tag = b.jit_tag()
    base = os.environ.get("MD_ACCEL_BUILD_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "md_accel")
    build_dir = os.path.join(base, tag)
    os.makedirs(build_dir, exist_ok=True)
    return cpp_extension.load(
        name=b.LIB_NAME,
        sources=b.sources(cuda=True),
        extra_cflags=b.cxx_flags(),
        extra_cuda_cflags=b.nvcc_flags(),
        extra_ldflags=b.ldflags(),
        build_directory=build_dir,
        is_python_module=False,
        verbose=verbose,
    )


def load(build: bool = True, verbose: bool = False) -> bool:
    """Load the library once (building it if allowed and needed); True when it is loaded."""
    global _path, _error, _tried
    if _tried:
        return _path is not None
    _tried = True
    try:
        path = _prebuilt()
        if path is not None:
            torch.ops.load_library(path)
        elif build and torch.version.cuda is not None and _CSRC.is_dir() and not os.environ.get("MD_ACCEL_NO_BUILD"):
            path = _jit_build(verbose)  # cpp_extension.load also loads it
        else:
            _error = "no prebuilt library and no JIT build possible (CPU torch or MD_ACCEL_NO_BUILD)"
            return False
        _path = path
    except Exception as exc:  # a failed build leaves the pure-torch path working
        _error = f"{type(exc).__name__}: {exc}"
    return _path is not None


def available() -> bool:
    """The library is loaded and a CUDA device can run its kernels."""
    return load() and torch.cuda.is_available()


def library_path() -> Optional[str]:
    """Path of the loaded library (for C++ users: dlopen it before loading a TorchScript model)."""
    load()
    return _path


def load_error() -> Optional[str]:
    """Why the library is not loaded, if it is not."""
    return _error


def specialise(plan, device=None) -> Optional[str]:
    """Build (once, cached on disk) and load the kernels specialised to ``plan`` (a lowered
    ``TPProblem`` or a ``TensorProductConv``: anything ``_codegen.plan_structure`` reads) for the
    GPU of ``device``.

    Returns the library path, or None where the plan has a shape the generator does not handle
    (the generic kernels then serve it). Loading the same library twice is harmless.
    """
    from . import _codegen

    if not available():
        raise RuntimeError(f"md_accel CUDA library not available: {load_error()}")
    major, minor = torch.cuda.get_device_capability(device)
    struct = _codegen.plan_structure(plan)
    try:
        path = _codegen.build(struct, f"sm_{major}{minor}")
    except _codegen.Unsupported:
        return None
    if path not in _loaded_specs:
        torch.ops.md_accel._tp_conv_load_specialised(path)
        _loaded_specs.append(path)
    return path


def set_specialised(enabled: bool) -> bool:
    """Use (True) or bypass (False) loaded specialised kernels; returns the previous setting."""
    load()
    return bool(torch.ops.md_accel._tp_conv_set_specialised(enabled))


def set_deterministic(enabled: bool) -> bool:
    """grad_x of the specialised CUDA backward and double backward (the conv op's, and the edge chunks of
    the fused-radial and pair ops the models run): deterministic (True, the default;
    per-edge rows summed per sender in a fixed order) or atomic adds into grad_x (False: E x in1 less
    memory and one pass less, results not bit-reproducible; ``torch.use_deterministic_algorithms(True)``
    overrides it). Process-wide, also from ``MD_ACCEL_DETERMINISTIC=0``; returns the previous setting.
    Without the CUDA library every path is deterministic: True, nothing to set."""
    if not load():
        return True
    return bool(torch.ops.md_accel._tp_conv_set_deterministic(enabled))


_ROWS_MODES = {False: 0, True: 1, "auto": 2}


def set_rows_in_grad_w(mode: Union[bool, str]) -> Union[bool, str]:
    """Where the deterministic backward and double backward keep each edge's grad_x contribution until the
    per-sender sum: in a scratch buffer of E x in1 elements (False), or in grad_w columns that are written later
    (True: no scratch, the per-edge kernel launched once per run of passes, ``md_accel/ops/_rows_plan.py``;
    slower than the scratch in most cells of the kernel table). ``"auto"``, the default: in grad_w only in the
    conv op's final backwards, those autograd runs without ``create_graph`` (the first-order backward of a
    forward + backward, the double backward of a training step on forces unless its grad_w goes into the incoming
    gradient's memory: ``set_dbwd_in_gg_w``), where the rows set the pass's peak; a
    backward under ``create_graph`` (a double backward follows and holds more), direct op calls and the models'
    fused-radial and pair ops keep the scratch. Either way the same bits. Process-wide, also from
    ``MD_ACCEL_ROWS_IN_GRAD_W=0|1|auto``; returns the previous mode. Without the CUDA library there is nothing to
    set: "auto"."""
    if not (isinstance(mode, bool) or mode == "auto"):
        raise ValueError(f"rows-in-grad_w mode must be True, False or 'auto', got {mode!r}")
    if not load():
        return "auto"
    previous = int(torch.ops.md_accel._tp_conv_set_rows_in_grad_w(_ROWS_MODES[mode]))
    return {v: k for k, v in _ROWS_MODES.items()}[previous]


def set_dbwd_in_gg_w(enabled: bool) -> bool:
    """Whether the conv op's final double backward (autograd without ``create_graph``: a training step on forces)
    writes its gradient to the weights into the memory of its incoming gradient gg_w, where nothing else
    references that tensor (True, the default: one E x w buffer less at the pass's peak, the same bits; the
    deterministic grad_x rows then go to the scratch, not grad_w: ``set_rows_in_grad_w``, unless forced on).
    Process-wide, also from ``MD_ACCEL_DBWD_IN_GG_W=0|1``; returns the previous setting. Without the CUDA library
    there is nothing to set: True."""
    if not load():
        return True
    return bool(torch.ops.md_accel._tp_conv_set_dbwd_in_gg_w(bool(enabled)))


_loaded_specs: list = []


def specialise_fused(plan, hidden: int, device=None) -> Optional[str]:
    """Build (cached) and load the fused-radial kernels (``md_accel::tp_conv_fused_*``) of ``plan``
    for hidden width ``hidden``; None where the generator does not handle the shape (the fused ops
    then run materialised: ``w = hidden @ W`` and the unfused kernels)."""
    from . import _codegen, _codegen_fused

    if not available():
        raise RuntimeError(f"md_accel CUDA library not available: {load_error()}")
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:  # the fused kernels run the weights on the tensor cores (mma.sync, sm_80+)
        return None
    try:
        path = _codegen_fused.build_fused(_codegen.plan_structure(plan), int(hidden), f"sm_{major}{minor}")
    except _codegen.Unsupported:
        return None
    if path not in _loaded_fused:
        torch.ops.md_accel._tp_conv_fused_load(path)
        _loaded_fused.append(path)
    return path


def set_fused(enabled: bool) -> bool:
    """Use (True) or bypass (False) loaded fused-radial kernels; returns the previous setting."""
    load()
    return bool(torch.ops.md_accel._tp_conv_fused_set(enabled))


_loaded_fused: list = []
