"""Named scalar activations, optionally normalised to unit second moment as e3nn does.

e3nn wraps every activation of ``Gate`` / ``Activation`` / ``FullyConnectedNet`` in
``normalize2mom``: ``f(x) * c`` with ``c = E[f(z)^2]^(-1/2)``, ``z ~ N(0, 1)``, estimated from one
million float64 normal samples of a generator seeded with 0 (so the constant is a fixed number,
not the exact integral), and dropped when ``|c - 1| < 1e-4``. Reproducing e3nn/sevenn/nequip
numbers needs that same estimate, computed here the same way.
"""

import functools
import math

import torch

ACTIVATIONS = ("silu", "ssp", "tanh", "abs", "relu", "sigmoid", "elu", "identity")


def apply_activation(name: str, x: torch.Tensor) -> torch.Tensor:
    """``name`` applied elementwise (``ssp`` = shifted softplus ``softplus(x) - log 2``)."""
    if name == "silu":
        return torch.nn.functional.silu(x)
    if name == "ssp":
        return torch.nn.functional.softplus(x) - math.log(2.0)
    if name == "tanh":
        return torch.tanh(x)
    if name == "abs":
        return torch.abs(x)
    if name == "relu":
        return torch.relu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "elu":
        return torch.nn.functional.elu(x)
    if name == "identity":
        return x
    raise ValueError("unknown activation " + name)


@functools.lru_cache(maxsize=None)
def second_moment_constant(name: str) -> float:
    """e3nn's ``normalize2mom`` constant for activation ``name`` (1.0 where e3nn skips it)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; known: {ACTIVATIONS}")
    gen = torch.Generator(device="cpu").manual_seed(0)
    z = torch.randn(1_000_000, generator=gen, dtype=torch.float64)
    cst = apply_activation(name, z).pow(2).mean().pow(-0.5).item()
    return 1.0 if abs(cst - 1.0) < 1e-4 else cst


class Activation(torch.nn.Module):
    """``f(x) * c`` with ``c`` the second-moment constant (``normalize=True``) or 1."""

    def __init__(self, name: str, normalize: bool = True):
        super().__init__()
        if name not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}; known: {ACTIVATIONS}")
        self.name = name
        self.cst = second_moment_constant(name) if normalize else 1.0
        self.scaled = self.cst != 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = apply_activation(self.name, x)
        if self.scaled:
            y = y.mul(self.cst)
        return y

    def extra_repr(self) -> str:
        return f"{self.name}, cst={self.cst:.6f}"
