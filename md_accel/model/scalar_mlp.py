"""NequIP's scalar MLP (``ScalarMLPFunction``): bias-free layers ``x @ (W * alpha)`` with
``W`` stored ``[in, out]`` and a per-layer constant ``alpha`` (``gain / sqrt(in)``), and a
plain (not second-moment-normalised) activation between layers, none after the last."""
from typing import Dict, List, Sequence

import torch

from .activations import Activation
from .radial import LastLayerSplit


class _Layer(torch.nn.Module):
    def __init__(self, h_in: int, h_out: int, alpha: float, act: str):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(h_in, h_out))
        self.alpha = float(alpha)
        self.has_act = act != ""
        self.act = Activation(act if act else "identity", normalize=False)

    def scaled_weight(self) -> torch.Tensor:
        return self.weight * self.alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x @ self.scaled_weight()
        if self.has_act:
            x = self.act(x)
        return x


class ScalarMLP(LastLayerSplit, torch.nn.Module):
    """``hs`` = widths ``[in, hidden..., out]``, ``alphas`` one per layer, ``act`` by name."""

    def __init__(self, hs: Sequence[int], alphas: Sequence[float], act: str = "silu"):
        super().__init__()
        self.hs: List[int] = [int(h) for h in hs]
        self.alphas: List[float] = [float(a) for a in alphas]
        if len(self.alphas) != len(self.hs) - 1:
            raise ValueError(f"{len(self.alphas)} alphas for {len(self.hs) - 1} layers")
        self.act_name = act
        n = len(self.hs) - 1
        self.layers = torch.nn.ModuleList(
            [_Layer(self.hs[i], self.hs[i + 1], self.alphas[i], act if i < n - 1 else "") for i in range(n)])
        self.init_hidden_op()

    def spec(self) -> Dict:
        return {"kind": "scalar_mlp", "hs": self.hs, "alphas": self.alphas, "act": self.act_name}
