"""Radial weights once per pair of edges (``ops.Graph`` weight rows from ``Edges.partner``) against
once per edge: the same energies, forces and virial, on the CPU (float64) through the model code
that the CUDA path runs (the layers' ``weight_rows`` / ``per_edge``, ``forward_fused``'s rows)."""
from __future__ import annotations

from typing import Dict

import numpy as np
import torch

from ase.neighborlist import primitive_neighbor_list

from md_accel.neighbors import Edges, _lex_order, edge_partners
from md_accel.ops import build_graph


def ase_edges(atoms, cutoff: float) -> Edges:
    """md_accel's edge convention from ASE's neighbour list (no vesin needed), receiver-sorted."""
    i, j, s = primitive_neighbor_list("ijS", atoms.get_pbc(), np.array(atoms.get_cell()), atoms.get_positions(),
                                      cutoff, self_interaction=False)
    src, dst, s = torch.from_numpy(j).long(), torch.from_numpy(i).long(), torch.from_numpy(s).long()
    order = _lex_order(src, dst, s)
    src, dst, s = src[order], dst[order], s[order]
    pos = torch.tensor(atoms.get_positions(), dtype=torch.float64)
    cell = torch.tensor(np.array(atoms.get_cell()), dtype=torch.float64)
    sf = s.to(torch.float64)
    shift = sf[:, 0:1] * cell[0] + sf[:, 1:2] * cell[1] + sf[:, 2:3] * cell[2]
    return Edges(src, dst, shift, pos[src] - pos[dst] + shift, edge_partners(src, dst, s))


def evaluate(potential, atoms, pairs: bool, through_fused_op: bool = False) -> Dict[str, torch.Tensor]:
    """``through_fused_op``: every convolution takes ``forward_fused`` (on CUDA: for large graphs),
    whose CPU branch expands the rows per edge."""
    from md_accel.ops import TensorProductConv

    for m in potential.modules():
        if isinstance(m, TensorProductConv):
            if through_fused_op:
                m.use_fused = lambda x, num_edges, graph=None: True
            elif "use_fused" in m.__dict__:
                del m.use_fused
    edges = ase_edges(atoms, potential.cutoff)
    assert edges.partner is not None, "every edge has its reverse"
    assert torch.equal(edges.vec[edges.partner], -edges.vec)
    index = {s: k for k, s in enumerate(potential.elements)}
    species = torch.tensor([index[s] for s in atoms.get_chemical_symbols()], dtype=torch.int64)
    n = len(atoms)
    graph = build_graph(edges.src, edges.dst, n, True, edges.partner if pairs else None)
    vec = edges.vec.detach().to(torch.float64).requires_grad_(True)
    energy = potential.node_energies(species, vec, edges.src, edges.dst, graph).sum()
    (g,) = torch.autograd.grad(energy, vec)
    zeros = torch.zeros((n, 3), dtype=g.dtype)
    forces = zeros.index_add(0, edges.dst, g) - zeros.index_add(0, edges.src, g)
    return {"energy": energy.detach(), "forces": forces, "virial": -(vec.detach().T @ g), "dE_dvec": g,
            "rows": torch.tensor(graph.row_edge.numel() if graph.row_edge is not None else edges.src.numel())}


def assert_pairs_equal_edges(potential, atoms, rtol: float = 1e-12) -> None:
    """Per pair (unfused and through the fused op's branch) against per edge."""
    per_edge = evaluate(potential, atoms, False)
    e = per_edge["dE_dvec"].shape[0]
    assert int(per_edge["rows"]) == e
    for fused in (False, True):
        per_pair = evaluate(potential, atoms, True, through_fused_op=fused)
        assert int(per_pair["rows"]) * 2 == e
        for q in ("energy", "forces", "virial"):
            scale = max(per_edge[q].abs().max().item(), 1e-3)
            err = (per_pair[q] - per_edge[q]).abs().max().item()
            assert err <= rtol * scale, (q, fused, err, scale)
        # the pairs were used: the radial part of a pair's gradient sits on one of its two edges
        assert not torch.allclose(per_pair["dE_dvec"], per_edge["dE_dvec"], rtol=1e-6, atol=1e-9)
    evaluate(potential, atoms, False)  # the modules as they were (use_fused restored)
