"""The contract every md_accel model fulfils, and energy/forces/virial from it.

A ``Potential`` maps a graph (species per node; per edge the sender, the receiver and the
vector ``pos[src] - pos[dst] + shift``) to one energy per node. Forces and the virial are the
exact gradient of the summed energy with respect to the edge vectors, so periodic images
(ASE) and ghost atoms (LAMMPS) are handled by the same code.
"""

from typing import Dict, List, Optional

import torch

from ..ops import Graph, build_graph, check_partners, graph_order


class Potential(torch.nn.Module):
    """Base class. Subclasses set ``elements``, ``cutoff``, ``num_layers`` and implement
    ``node_energies`` (TorchScript-compatible) and ``spec``.

    Layered interface (optional; LAMMPS' ``comm layer`` mode needs it). A message-passing
    potential that exports these methods (``@torch.jit.export``) can be evaluated one layer at
    a time, with the caller replacing some rows of the features between layers (a LAMMPS rank
    overwrites its ghost atoms' rows with their owners' rows):

    * ``feature_dims() -> List[int]``: widths of ``h_0`` and of every layer's output
      ``h_1 .. h_L`` (``L = num_layers``).
    * ``edge_features(species, edge_vec, edge_src, edge_dst) -> List[Tensor]``: per-edge
      tensors (first dimension E) that the layers and the readout read; each depends only on
      its edge's vector and the species of its two ends.
    * ``embed(species) -> h_0`` ``[N, feature_dims()[0]]``, row by row.
    * ``interaction(k, h_k, species, edge_feats, edge_src, edge_dst, graph) -> h_{k+1}`` for
      ``k = 0 .. L-1``: row ``i`` is exact when every edge into ``i`` is present and ``h_k`` is
      exact on ``i`` and on the senders of those edges (rows of other nodes may hold anything).
    * ``readout_energies(species, [h_1 .. h_L], edge_feats, edge_src, edge_dst) -> [N]``: node
      energies; row ``i`` reads only row ``i`` of each ``h_k`` and the edges into ``i``.

    ``node_energies`` must equal ``readout_energies`` applied to the features that ``embed``
    and ``interaction`` give on the full graph (the implementations compute it that way).
    ``graph`` is ``receiver_graph``'s result for the same edges (``None`` on the CPU)."""

    elements: List[str]
    cutoff: float
    num_layers: int

    def node_energies(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
        graph: Optional[Graph] = None,
    ) -> torch.Tensor:
        """``graph``: the receiver-sorted graph of these edges, which are then in its order
        (``energy_forces_virial`` builds it once for all layers); ``None``: the potential
        orders the edges itself where its kernels need it (``ops.graph_order``). Where the graph
        has weight rows (``Graph.w_row``), its paired edges have equal lengths: what depends only
        on an edge's length may be computed once per row (``ops.weight_rows``)."""
        raise NotImplementedError

    def forward(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor
    ) -> torch.Tensor:
        return self.node_energies(species, edge_vec, edge_src, edge_dst)

    @torch.jit.export
    def receiver_graph(self, edge_src: torch.Tensor, edge_dst: torch.Tensor, num_nodes: int) -> Optional[Graph]:
        """The graph the layered methods take for edges already sorted by receiver: built on
        CUDA (where the kernels need it), ``None`` on the CPU."""
        if edge_src.is_cuda:
            return build_graph(edge_src, edge_dst, num_nodes, True)
        return None

    def spec(self) -> Dict:
        """JSON-able description that, with the state dict, rebuilds this module."""
        raise NotImplementedError

    @classmethod
    def from_spec(cls, spec: Dict) -> "Potential":
        """Rebuild from ``spec()`` (random weights; load the state dict after)."""
        return cls(spec)


class LayeredPotential(Potential):
    """A potential built from the layered interface above: ``node_energies`` is
    ``readout_energies`` of the features that ``embed`` and ``interaction`` give on the full
    graph, so the whole-graph and the layer-at-a-time evaluations are the same code."""

    def node_energies(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
        graph: Optional[Graph] = None,
    ) -> torch.Tensor:
        edge_vec, edge_src, edge_dst, graph = graph_order(edge_vec, edge_src, edge_dst, species.shape[0], graph)
        edge_feats = self.edge_features(species, edge_vec, edge_src, edge_dst)
        h = self.embed(species)
        features: List[torch.Tensor] = []
        for k in range(self.num_layers):
            h = self.interaction(k, h, species, edge_feats, edge_src, edge_dst, graph)
            features.append(h)
        return self.readout_energies(species, features, edge_feats, edge_src, edge_dst)


def energy_forces_virial(
    potential: torch.nn.Module,
    species: torch.Tensor,
    edge_vec: torch.Tensor,
    edge_src: torch.Tensor,
    edge_dst: torch.Tensor,
    num_local: Optional[int] = None,
    create_graph: bool = False,
    dst_sorted: bool = False,
    edge_partner: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """Energies of the first ``num_local`` nodes (all by default), forces on every node and the
    virial ``W = -sum_e vec_e (x) dE/dvec_e`` (3x3; stress = -W / V).

    On CUDA the receiver-sorted graph is built once here and serves every layer and the force
    sums; ``dst_sorted=True`` (edges already ordered by receiver, as md_accel's neighbour lists
    give them) skips the receiver sort, leaving one sort per call. ``edge_partner`` (CUDA): the
    index of each edge's reverse, every edge paired (``neighbors.Edges.partner``; ``ops.pair_rows``):
    the radial MLPs then run once per pair (the potential's radial features must depend on the
    edge's length only, as md_accel's models' do).
    """
    n = species.shape[0]
    if not edge_vec.requires_grad:
        edge_vec = edge_vec.detach().requires_grad_(True)
    graph: Optional[Graph] = None
    vec, src, dst = edge_vec, edge_src, edge_dst
    if edge_partner is not None and edge_vec.is_cuda and not torch.cuda.is_current_stream_capturing():
        check_partners(edge_partner, edge_vec.shape[0])  # a CUDA-graph capture checks in its warm-up steps
    if edge_vec.is_cuda:
        graph = build_graph(edge_src, edge_dst, n, dst_sorted, edge_partner)
        if not dst_sorted:
            vec = edge_vec.index_select(0, graph.perm)
        src, dst = graph.src, graph.dst
    node_e = potential.node_energies(species, vec, src, dst, graph)
    local_e = node_e if num_local is None else node_e[:num_local]
    energy = local_e.sum()
    g: Optional[torch.Tensor] = None
    if vec.shape[0] > 0:
        (g,) = torch.autograd.grad(energy, vec, create_graph=create_graph, allow_unused=True)
    if g is None:
        g = torch.zeros_like(vec)
    if graph is not None and not create_graph:
        # segmented sums in a fixed order: bit-reproducible (index_add uses float atomics on CUDA)
        into_dst = torch.segment_reduce(g, "sum", offsets=graph.dst_ptr, axis=0, unsafe=True)
        from_src = torch.segment_reduce(g.index_select(0, graph.src_perm), "sum", offsets=graph.src_ptr,
                                        axis=0, unsafe=True)
        forces = into_dst - from_src
    else:  # the CPU (deterministic anyway), or a result that must stay differentiable (Hessians)
        zeros = torch.zeros((n, 3), dtype=g.dtype, device=g.device)
        forces = zeros.index_add(0, dst, g) - zeros.index_add(0, src, g)
    virial = -(vec.unsqueeze(-1) * g.unsqueeze(-2)).sum(0)
    return {"energy": energy, "node_energies": local_e, "forces": forces, "virial": virial}
