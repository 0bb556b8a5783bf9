"""md_accel's model building blocks and composed potentials (no e3nn / mace / sevenn needed)."""
from __future__ import annotations

from typing import Callable, Dict, Type

from .embedding import ScaleShift, SpeciesEmbedding
from .gate import Gate
from .linear import Linear
from .potential import Potential, energy_forces_virial
from .radial import BesselBasis, PolynomialCutoff, RadialMLP, XPLORCutoff

_REGISTRY: Dict[str, Type[Potential]] = {}


def register(name: str) -> Callable[[Type[Potential]], Type[Potential]]:
    """Class decorator: make ``build({"type": name, ...})`` construct this potential class,
    which must provide ``from_spec(spec) -> Potential``."""

    def deco(cls: Type[Potential]) -> Type[Potential]:
        _REGISTRY[name] = cls
        return cls

    return deco


def build(spec: Dict) -> Potential:
    """Rebuild a potential (random weights) from ``Potential.spec()``; load its state dict after."""
    _import_builtin_models()
    kind = spec.get("type")
    if kind not in _REGISTRY:
        raise ValueError(f"unknown model type {kind!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[kind].from_spec(spec)


def _import_builtin_models() -> None:
    """Import the modules that register the built-in potential types."""
    import importlib

    for mod in ("nequip_like", "mace"):
        try:
            importlib.import_module(f"{__name__}.{mod}")
        except ModuleNotFoundError as e:  # a family not written yet
            if e.name != f"{__name__}.{mod}":
                raise


__all__ = ["Potential", "energy_forces_virial", "register", "build", "Linear", "Gate", "BesselBasis",
           "PolynomialCutoff", "XPLORCutoff", "RadialMLP", "SpeciesEmbedding", "ScaleShift"]
