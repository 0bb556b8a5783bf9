"""Ahead-of-time build of the generated CUDA kernels a model uses (``md-accel prebuild``).

The plan-specialised kernels (tensor-product convolutions, ``_codegen.py``; symmetric contractions,
``_sc_codegen.py``) are otherwise compiled with nvcc at their first use on a GPU and cached on disk
(``$MD_ACCEL_BUILD_DIR``). The largest term lists (MACE's correlation-3 contractions) take minutes
of nvcc; building them ahead moves that wait out of the first MD step. Only nvcc is needed, no GPU:
a login node can fill the cache that the GPU nodes read (same ``MD_ACCEL_BUILD_DIR``, same arch).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch

from . import _codegen, _sc_codegen
from .symmetric_contraction import SymmetricContraction
from .tp_conv import TensorProductConv

Job = Tuple[str, Callable[[], str]]  # (label, build returning the library path)


def _sc_job(m: SymmetricContraction, arch: str) -> Tuple[str, Job]:
    struct = _sc_codegen.structure(m.in_dims, m.out_dims, m.num_k, m.sc_terms, m.sc_values)
    key = "sc:" + _sc_codegen.structure_key(struct)
    return key, (f"symmetric contraction {key[3:11]} ({m.sc_terms.shape[0]} terms)",
                 lambda: _sc_codegen.build(struct, arch))


def _tp_job(conv: TensorProductConv, arch: str) -> Tuple[str, Job]:
    struct = _codegen.plan_structure(conv)
    key = "tp:" + _codegen.structure_key(struct)
    return key, (f"tensor-product conv {key[3:11]}", lambda: _codegen.build(struct, arch))


def kernel_jobs(modules: Iterable[torch.nn.Module], arch: str) -> List[Job]:
    """One build job per distinct generated kernel library among ``modules`` (and their children)."""
    jobs: Dict[str, Job] = {}
    for root in modules:
        for m in root.modules():
            if isinstance(m, SymmetricContraction):
                key, job = _sc_job(m, arch)
            elif isinstance(m, TensorProductConv):
                key, job = _tp_job(m, arch)
            else:
                continue
            jobs.setdefault(key, job)
    return list(jobs.values())


def prebuild(modules: Iterable[torch.nn.Module], arch: str = "sm_90", workers: int = 4,
             progress: Optional[Callable[[str], None]] = print) -> List[str]:
    """Build (or find cached) every generated kernel library of ``modules`` for ``arch``; returns
    the library paths. Shapes the generators do not handle are skipped (the generic kernels serve
    them at run time). Builds run in parallel (each is one or two nvcc processes)."""
    jobs = kernel_jobs(modules, arch)
    say = progress or (lambda _s: None)
    say(f"{len(jobs)} generated kernel libraries for {arch}")
    paths = []
    t0 = time.time()

    def run(job: Job):
        label, build = job
        try:
            return label, build()
        except (_codegen.Unsupported, _sc_codegen.Unsupported):
            return label, None

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        for fut in as_completed([ex.submit(run, j) for j in jobs]):
            label, path = fut.result()  # an nvcc failure raises here, naming the plan
            say(f"  [{time.time() - t0:6.1f} s] {label}: {path or 'not generated (generic kernels)'}")
            if path:
                paths.append(path)
    return paths


def prebuild_for(modules: Iterable[torch.nn.Module], device) -> None:
    """Call before moving ``modules`` to ``device``: on a CUDA device, build their missing
    generated kernels in parallel (the move itself builds them one layer at a time, so a model's
    first load would wait for each in turn). Does nothing off CUDA or without the op library; a
    failed build is left to the move, which warns once and runs the generic kernels."""
    from . import _cuda

    dev = torch.device(device)
    if dev.type != "cuda" or not _cuda.available():
        return
    major, minor = torch.cuda.get_device_capability(dev)
    try:
        prebuild(modules, arch=f"sm_{major}{minor}", workers=min(8, os.cpu_count() or 1), progress=None)
    except Exception:  # noqa: BLE001  (reported by the per-layer build during the move)
        pass
