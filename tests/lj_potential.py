"""Test-only md_accel potential: Lennard-Jones with ASE's smooth cutoff and per-species epsilon.

``u_ij = 4 eps_ij ((sigma/r)^12 - (sigma/r)^6) * fc(r^2)``, ``eps_ij = sqrt(eps_i eps_j)``,
``fc`` the C^1 switch of ``ase.calculators.lj`` (1 below ``onset``, 0 beyond ``cutoff``);
half of every pair energy goes to the receiver of each of the two directed edges, so with one
species it equals ``ase.calculators.lj.LennardJones(smooth=True)``.
"""
from typing import Dict, List, Optional, Sequence

import torch

from md_accel.model import Potential, register
from md_accel.ops import Graph

# Lennard-Jones "copper": fcc a = 3.61 A is the energy minimum for these parameters.
LJ = {"epsilon": 0.409, "sigma": 2.338, "cutoff": 5.0, "onset": 4.0}


@register("test_lj")
class LennardJones(Potential):
    # Real (not string) annotations: TorchScript cannot resolve the base class's postponed ones.
    elements: List[str]
    cutoff: float
    num_layers: int

    def __init__(
        self, elements: Sequence[str], epsilon: Sequence[float], sigma: float, cutoff: float, onset: float
    ) -> None:
        super().__init__()
        self.elements: List[str] = list(elements)
        self.cutoff = float(cutoff)
        self.num_layers = 1
        self.sigma = float(sigma)
        self.onset = float(onset)
        self.epsilon = torch.nn.Parameter(torch.tensor(list(epsilon), dtype=torch.float64))
        # derived from the spec, not stored in the state dict (like real models' CG tables)
        self.register_buffer("sigma6", torch.tensor(self.sigma**6, dtype=torch.float64), persistent=False)

    @classmethod
    def from_spec(cls, spec: Dict) -> "LennardJones":
        n = len(spec["elements"])
        return cls(spec["elements"], [1.0] * n, spec["sigma"], spec["cutoff"], spec["onset"])

    def spec(self) -> Dict:
        return {
            "type": "test_lj",
            "elements": list(self.elements),
            "sigma": self.sigma,
            "cutoff": self.cutoff,
            "onset": self.onset,
        }

    def node_energies(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
        graph: Optional[Graph] = None,
    ) -> torch.Tensor:
        r2 = (edge_vec * edge_vec).sum(-1)
        eps = torch.sqrt(self.epsilon[species[edge_src]] * self.epsilon[species[edge_dst]]).to(edge_vec.dtype)
        c6 = self.sigma6.to(r2.dtype) / (r2 * r2 * r2)
        rc2 = self.cutoff * self.cutoff
        ro2 = self.onset * self.onset
        fc = torch.where(
            r2 < ro2,
            torch.ones_like(r2),
            torch.where(r2 < rc2, (rc2 - r2) ** 2 * (rc2 + 2 * r2 - 3 * ro2) / (rc2 - ro2) ** 3, torch.zeros_like(r2)),
        )
        pair = 2.0 * eps * (c6 * c6 - c6) * fc  # half of 4 eps (...): each pair appears twice
        out = torch.zeros(species.shape[0], dtype=edge_vec.dtype, device=edge_vec.device)
        return out.index_add(0, edge_dst, pair)
