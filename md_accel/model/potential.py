"""The contract every md_accel model fulfils, and energy/forces/virial from it.

A ``Potential`` maps a graph (species per node; per edge the sender, the receiver and the
vector ``pos[src] - pos[dst] + shift``) to one energy per node. Forces and the virial are the
exact gradient of the summed energy with respect to the edge vectors, so periodic images
(ASE) and ghost atoms (LAMMPS) are handled by the same code.
"""

from typing import Dict, List, Optional

import torch


class Potential(torch.nn.Module):
    """Base class. Subclasses set ``elements``, ``cutoff``, ``num_layers`` and implement
    ``node_energies`` (TorchScript-compatible) and ``spec``."""

    elements: List[str]
    cutoff: float
    num_layers: int

    def node_energies(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor
    ) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor
    ) -> torch.Tensor:
        return self.node_energies(species, edge_vec, edge_src, edge_dst)

    def spec(self) -> Dict:
        """JSON-able description that, with the state dict, rebuilds this module."""
        raise NotImplementedError

    @classmethod
    def from_spec(cls, spec: Dict) -> "Potential":
        """Rebuild from ``spec()`` (random weights; load the state dict after)."""
        return cls(spec)


def energy_forces_virial(
    potential: torch.nn.Module,
    species: torch.Tensor,
    edge_vec: torch.Tensor,
    edge_src: torch.Tensor,
    edge_dst: torch.Tensor,
    num_local: Optional[int] = None,
    create_graph: bool = False,
) -> Dict[str, torch.Tensor]:
    """Energies of the first ``num_local`` nodes (all by default), forces on every node and the
    virial ``W = -sum_e vec_e (x) dE/dvec_e`` (3x3; stress = -W / V)."""
    n = species.shape[0]
    if not edge_vec.requires_grad:
        edge_vec = edge_vec.detach().requires_grad_(True)
    node_e = potential.node_energies(species, edge_vec, edge_src, edge_dst)
    local_e = node_e if num_local is None else node_e[:num_local]
    energy = local_e.sum()
    if edge_vec.shape[0] > 0:
        (g,) = torch.autograd.grad(energy, edge_vec, create_graph=create_graph, allow_unused=True)
        if g is None:
            g = torch.zeros_like(edge_vec)
    else:
        g = torch.zeros_like(edge_vec)
    forces = _edge_sum_to_nodes(g, edge_dst, n, create_graph) - _edge_sum_to_nodes(g, edge_src, n, create_graph)
    virial = -(edge_vec.unsqueeze(-1) * g.unsqueeze(-2)).sum(0)
    return {"energy": energy, "node_energies": local_e, "forces": forces, "virial": virial, "edge_grad": g}


def _edge_sum_to_nodes(values: torch.Tensor, index: torch.Tensor, n: int, create_graph: bool) -> torch.Tensor:
    """``out[i] = sum_{e: index[e] = i} values[e]``. On CUDA a sorted segmented reduction, so
    forces are bit-reproducible (``index_add`` uses float atomics there); ``index_add`` where the
    result must stay differentiable (Hessians) or on the CPU, where it is deterministic anyway."""
    if not values.is_cuda or create_graph:
        return torch.zeros((n, values.shape[1]), dtype=values.dtype, device=values.device).index_add(0, index, values)
    order = torch.argsort(index, stable=True)
    offsets = torch.searchsorted(index.index_select(0, order),
                                 torch.arange(n + 1, dtype=index.dtype, device=index.device))
    return torch.segment_reduce(values.index_select(0, order), "sum", offsets=offsets, axis=0, unsafe=True)
