"""Radial functions of the edge length: Bessel basis, cutoff envelopes, and the MLP that maps
the radial embedding to per-edge tensor-product weights.

Formulas follow the sources (sevenn / nequip / e3nn) operation by operation, so float32 results
round the same way. Envelopes are not zeroed beyond the cutoff: the neighbour list guarantees
``r < cutoff``.
"""

import math
import os
from typing import Dict, List, Sequence

import torch

from ..ops import _linear_ops, _mlp_ops  # noqa: F401  (register torch.ops.md_accel.mlp_hidden_*, linear_tf32x3)
from ..ops._op_registry import defined_in_cpp
from .activations import Activation


class BesselBasis(torch.nn.Module):
    """``(2 / r_c) * sin(k_n r) / r`` with ``k_n = n pi / r_c`` (trainable ``k`` if asked)."""

    def __init__(self, cutoff: float, num_basis: int = 8, trainable: bool = True):
        super().__init__()
        self.cutoff = float(cutoff)
        self.num_basis = int(num_basis)
        self.prefactor = 2.0 / self.cutoff
        coeffs = torch.tensor([n * math.pi / self.cutoff for n in range(1, self.num_basis + 1)])
        if trainable:
            self.coeffs = torch.nn.Parameter(coeffs)
        else:
            self.register_buffer("coeffs", coeffs)
        self.trainable = trainable

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        ur = r.unsqueeze(-1)
        return self.prefactor * torch.sin(self.coeffs * ur) / ur

    def spec(self) -> Dict:
        return {"name": "bessel", "num_basis": self.num_basis, "trainable": self.trainable}


class PolynomialCutoff(torch.nn.Module):
    """Envelope ``1 - (p+1)(p+2)/2 x^p + p(p+2) x^(p+1) - p(p+1)/2 x^(p+2)``, ``x = r / r_c``."""

    def __init__(self, cutoff: float, p: float = 6.0):
        super().__init__()
        self.cutoff = float(cutoff)
        self.p = float(p)
        self.c0 = (self.p + 1.0) * (self.p + 2.0) / 2.0
        self.c1 = self.p * (self.p + 2.0)
        self.c2 = self.p * (self.p + 1.0) / 2.0

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        x = r / self.cutoff
        return (1 - self.c0 * torch.pow(x, self.p) + self.c1 * torch.pow(x, self.p + 1.0)
                - self.c2 * torch.pow(x, self.p + 2.0))

    def spec(self) -> Dict:
        return {"name": "polynomial", "p": self.p}


class XPLORCutoff(torch.nn.Module):
    """XPLOR switching: 1 below ``r_on``, then
    ``(r_c^2 - r^2)^2 (r_c^2 + 2 r^2 - 3 r_on^2) / (r_c^2 - r_on^2)^3``."""

    def __init__(self, cutoff: float, r_on: float):
        super().__init__()
        if not r_on < cutoff:
            raise ValueError(f"XPLOR cutoff needs r_on < cutoff, got {r_on} >= {cutoff}")
        self.cutoff = float(cutoff)
        self.r_on = float(r_on)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        r_sq = r * r
        on_sq = self.r_on * self.r_on
        cut_sq = self.cutoff * self.cutoff
        switched = (cut_sq - r_sq) ** 2 * (cut_sq + 2 * r_sq - 3 * on_sq) / (cut_sq - on_sq) ** 3
        return torch.where(r < self.r_on, torch.ones_like(r), switched)

    def spec(self) -> Dict:
        return {"name": "xplor", "r_on": self.r_on}


def make_cutoff_fn(cutoff: float, spec: Dict) -> torch.nn.Module:
    name = spec.get("name")
    if name == "polynomial":
        return PolynomialCutoff(cutoff, spec.get("p", 6.0))
    if name == "xplor":
        return XPLORCutoff(cutoff, spec["r_on"])
    raise ValueError(f"unknown cutoff function {name!r} (known: polynomial, xplor)")


def make_radial_basis(cutoff: float, spec: Dict) -> torch.nn.Module:
    name = spec.get("name")
    if name == "bessel":
        return BesselBasis(cutoff, spec.get("num_basis", 8), spec.get("trainable", True))
    raise ValueError(f"unknown radial basis {name!r} (known: bessel)")


class _MLPLayer(torch.nn.Module):
    def __init__(self, h_in: int, h_out: int, act: str):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h_in, h_out))
        self.h_in = h_in
        self.has_act = act != ""
        self.act = Activation(act if act else "identity")

    def scaled_weight(self) -> torch.Tensor:
        # e3nn divides the weight (not the product) by sqrt(fan_in)
        return self.weight / float(self.h_in) ** 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x @ self.scaled_weight()
        if self.has_act:
            x = self.act(x)
        return x


class LastLayerSplit:
    """For bias-free MLPs (``layers``, each with ``scaled_weight()``) whose last layer is linear:
    ``mlp(x) == mlp.hidden(x) @ mlp.last_weight()``, so the last product can be fused into the
    tensor-product kernels (``TensorProductConv.forward_fused``).

    On CUDA, ``hidden`` runs all hidden layers as one fused ``md_accel::mlp_hidden_fwd`` op when
    each is followed by the same SiLU and the C++ library serves the op (``hidden_op``, decided
    by ``init_hidden_op`` at construction: TorchScript cannot ask the op registry;
    ``MD_ACCEL_FUSED_MLP=0`` keeps the layer loop)."""

    def init_hidden_op(self) -> None:
        """Call once ``layers`` exist (sets ``hidden_op`` and ``hidden_cst``)."""
        hidden = list(self.layers)[:-1]
        silu = (len(hidden) > 0 and all(layer.has_act and layer.act.name == "silu" for layer in hidden)
                and len({float(layer.act.cst) for layer in hidden}) == 1)
        self.hidden_cst: float = float(hidden[0].act.cst) if silu else 1.0
        off = os.environ.get("MD_ACCEL_FUSED_MLP", "1") == "0"  # for comparisons
        self.hidden_op: bool = silu and defined_in_cpp("mlp_hidden_fwd") and not off

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # md_accel::linear_tf32x3: a @ b, on tensor cores at float32 accuracy for CUDA float32
        return torch.ops.md_accel.linear_tf32x3(self.hidden(x), self.last_weight())

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Output of every layer but the last."""
        n = len(self.layers)
        if self.hidden_op and x.is_cuda:
            weights: List[torch.Tensor] = []
            for i, layer in enumerate(self.layers):
                if i < n - 1:
                    weights.append(layer.scaled_weight())
            return torch.ops.md_accel.mlp_hidden_fwd(x, weights, self.hidden_cst)
        for i, layer in enumerate(self.layers):
            if i < n - 1:
                x = layer(x)
        return x

    def last_weight(self) -> torch.Tensor:
        """The last layer's effective weight ``[hidden, out]``."""
        n = len(self.layers)
        w = torch.empty(0)
        for i, layer in enumerate(self.layers):
            if i == n - 1:
                w = layer.scaled_weight()
        return w


class RadialMLP(LastLayerSplit, torch.nn.Module):
    """e3nn ``FullyConnectedNet(hs, act)``: bias-free layers, weights ``W / sqrt(fan_in)``,
    normalised activation after every layer but the last."""

    def __init__(self, hs: Sequence[int], act: str = "silu"):
        super().__init__()
        self.hs: List[int] = [int(h) for h in hs]
        self.act_name = act
        n = len(self.hs) - 1
        self.layers = torch.nn.ModuleList(
            [_MLPLayer(self.hs[i], self.hs[i + 1], act if i < n - 1 else "") for i in range(n)]
        )
        self.init_hidden_op()

    def spec(self) -> Dict:
        return {"hs": self.hs, "act": self.act_name}
