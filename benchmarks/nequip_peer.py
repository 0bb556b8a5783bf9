"""NequIP as a benchmark peer: a saved model (``.ckpt`` / ``.nequip.zip``) loaded by nequip
itself (eager), optionally with one of nequip's tensor-product accelerations applied by its
model modifiers, as a bare model fed a prebuilt graph or as nequip's own ASE calculator.

nequip's ``set_global_state`` (run by every nequip loader) changes process-wide defaults
(torch's default dtype to float64, e3nn's code generation flags); both are restored after a
load so that backends loaded later in the same process are unaffected. nequip's inputs
(positions, cell, shifts) are float64, as under nequip's own global state; the model casts to
its ``model_dtype`` after the edge vectors.

A model trained in one precision is benchmarked in another by rebuilding it from its config
with the other ``model_dtype`` and copying the weights (what training in that precision would
have built; same weights up to rounding, like md_accel's conversion of the same file).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from typing import Dict

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(REPO, "models", "nequip_cu", "nequip_cu_l3.ckpt")
# variant -> (nequip model modifier, the module it swaps in, the package it needs)
VARIANTS = {
    "e3nn": (None, None, None),
    "oeq": ("enable_OpenEquivariance", "OpenEquivarianceTensorProductScatter", "openequivariance"),
    "cueq": ("enable_CuEquivariance", "CuEquivarianceTensorProductScatter", "cuequivariance_torch"),
}
_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64"}


def model_name(path: str) -> str:
    """'.../nequip_cu_l3.nequip.zip' -> 'nequip_cu_l3' (groups same-weights rows)."""
    base = os.path.basename(path)
    for ext in (".nequip.zip", ".ckpt"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


@contextlib.contextmanager
def nequip_state():
    """nequip's global state for loading; torch's default dtype and e3nn's flags restored after."""
    import e3nn
    from nequip.utils.global_state import set_global_state

    dtype, flags = torch.get_default_dtype(), e3nn.get_optimization_defaults()
    try:
        set_global_state()
        torch.set_default_dtype(torch.float64)  # set only on nequip's first call in a process
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_default_dtype(dtype)
        e3nn.set_optimization_defaults(**flags)


def _config(path: str) -> Dict:
    """The model's build config (``_target_`` and hyperparameters) stored in the file."""
    from md_accel.convert.nequip import model_config

    return model_config(path)


def _rebuild(model: torch.nn.Module, path: str, dtype: torch.dtype) -> torch.nn.Module:
    """The same model built by nequip with ``model_dtype`` = ``dtype``, weights copied."""
    from hydra.utils import get_method

    cfg = dict(_config(path))
    cfg["model_dtype"], cfg["compile_mode"] = _DTYPE_NAMES[dtype], "eager"
    new = get_method(cfg.pop("_target_"))(**cfg)
    new.load_state_dict(model.state_dict(), strict=True)
    return new


def load(path: str, variant: str = "e3nn", dtype: torch.dtype = torch.float32, device="cpu") -> torch.nn.Module:
    """nequip ``GraphModel`` (built on the CPU, eval) of ``path`` in ``dtype`` with ``variant``'s
    modifier. Raises if the accelerator's package (on CUDA: cuEquivariance's ops, without which
    it runs a slow fallback) is missing or the modifier replaced nothing. Use the ``.ckpt``
    for accelerations: a ``.nequip.zip`` packaged without the accelerator installed cannot
    import it."""
    from nequip.model.modify_utils import modify
    from nequip.model.saved_models.load_utils import load_saved_model

    if variant not in VARIANTS:
        raise ValueError(f"unknown nequip variant {variant!r} ({', '.join(VARIANTS)})")
    modifier, swapped, package = VARIANTS[variant]
    if package:
        importlib.import_module(package)
    if variant == "cueq" and torch.device(device).type == "cuda":
        importlib.import_module("cuequivariance_ops_torch")
    with nequip_state():
        model = load_saved_model(os.fspath(path), compile_mode="eager")
        if model.model_dtype != dtype:
            model = _rebuild(model, os.fspath(path), dtype)
        if modifier:
            model = modify(model, [{"modifier": modifier}])
            if not any(type(m).__name__ == swapped for m in model.modules()):
                raise RuntimeError(f"nequip modifier {modifier} swapped in no {swapped}")
    return model.eval()


def graph_input(model: torch.nn.Module, g: Dict, device) -> Dict[str, torch.Tensor]:
    """nequip's single-frame ``AtomicDataDict`` (the keys its ASE calculator passes) from a
    ``common.copper_graph`` graph: ``edge_index[0]`` is the centre (receiver), ``[1]`` the
    neighbour, edge vector ``pos[1] - pos[0] + edge_cell_shift @ cell``."""
    f64 = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64, device=device)  # noqa: E731
    n = int(g["num_nodes"])
    cu = str(model.metadata["type_names"]).split(" ").index("Cu")
    return {
        "pos": f64(g["pos"]), "cell": f64(g["cell"]).view(1, 3, 3),
        "pbc": torch.ones((1, 3), dtype=torch.bool, device=device),
        "atom_types": torch.full((n,), cu, dtype=torch.int64, device=device),
        "edge_index": torch.stack([torch.as_tensor(g["dst"]), torch.as_tensor(g["src"])]).to(device, torch.int64),
        "edge_cell_shift": f64(g["unit_shift"]),
    }


def calculator(path: str, variant: str = "e3nn", dtype: torch.dtype = torch.float32, device="cuda",
               neighborlist: str = "matscipy"):
    """nequip's ``NequIPCalculator`` around ``load(path, variant, dtype)``, with the transforms
    its ``_from_saved_model`` builds (type mapping by chemical symbol, nequip's neighbour list).
    It builds its inputs in torch's default dtype, so it computes under float64, as nequip's
    global state would have it."""
    from nequip.integrations.ase import NequIPCalculator
    from nequip.integrations.utils import basic_transforms, handle_chemical_species_map

    class _Calc(NequIPCalculator):
        def calculate(self, *args, **kwargs):
            previous = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                super().calculate(*args, **kwargs)
            finally:
                torch.set_default_dtype(previous)

    model = load(path, variant, dtype, device)
    meta = model.metadata
    type_names = str(meta["type_names"]).split(" ")
    species = handle_chemical_species_map(True, type_names)
    transforms = basic_transforms(meta, float(meta["r_max"]), type_names, species, neighborlist_backend=neighborlist)
    return _Calc(model=model, device=device, transforms=transforms)
