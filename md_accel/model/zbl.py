"""Ziegler-Biersack-Littmark screened nuclear repulsion, as NequIP adds it to the node energies
(constants of LAMMPS ``pair_zbl``). Per edge ``j -> i``::

    x   = (Z_i^0.23 + Z_j^0.23) r / 0.46850
    psi = sum_k c_k exp(d_k x)
    e   = prefactor * Z_i Z_j / r * psi * u_p(r / r_cut)       (prefactor = e^2/(4 pi eps0) / 2)

summed onto the receiver i. Both edge directions are present, hence the 1/2 in the prefactor.
"""
from typing import Dict, List, Sequence

import torch

from .radial import PolynomialCutoff


class ZBL(torch.nn.Module):
    """``atomic_numbers`` per species; ``prefactor`` in energy * length units (metal: 14.399645/2)."""

    def __init__(self, cutoff: float, atomic_numbers: Sequence[int], prefactor: float, p: float = 6.0):
        super().__init__()
        self.atomic_numbers: List[int] = [int(z) for z in atomic_numbers]
        self.prefactor = float(prefactor)
        self.envelope = PolynomialCutoff(cutoff, p)
        self.register_buffer("z", torch.tensor(self.atomic_numbers, dtype=torch.float64), persistent=False)

    def forward(self, species: torch.Tensor, r: torch.Tensor, edge_src: torch.Tensor,
                edge_dst: torch.Tensor) -> torch.Tensor:
        z = self.z.to(r.dtype).index_select(0, species)
        zi, zj = z.index_select(0, edge_dst), z.index_select(0, edge_src)
        x = (torch.pow(zi, 0.23) + torch.pow(zj, 0.23)) * r / 0.46850
        psi = (0.02817 * torch.exp(-0.20162 * x) + 0.28022 * torch.exp(-0.40290 * x)
               + 0.50986 * torch.exp(-0.94229 * x) + 0.18175 * torch.exp(-3.19980 * x))
        e = self.prefactor * (zi * zj / r) * psi * self.envelope(r)
        return torch.zeros(species.shape[0], dtype=r.dtype, device=r.device).index_add(0, edge_dst, e)

    def spec(self) -> Dict:
        return {"name": "zbl", "atomic_numbers": self.atomic_numbers, "prefactor": self.prefactor,
                "p": self.envelope.p}
