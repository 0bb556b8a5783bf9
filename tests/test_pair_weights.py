"""Edges paired with their reverse (``neighbors.Edges.partner``), the graph's weight rows
(``ops.pair_rows``, ``build_graph``), and a converted SevenNet-0 evaluated once per pair against
once per edge (tests/pair_testing.py; MACE: tests/mace/test_mace_pairs.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.build import bulk, fcc111

from md_accel.neighbors import VerletNeighborList, _sorted_pairs, edge_partners, neighbor_list
from md_accel.ops import build_graph, check_partners, pair_rows
from pair_testing import assert_pairs_equal_edges, evaluate


def _structures():
    periodic = bulk("Cu", "fcc", a=3.61, cubic=True).repeat(2)
    periodic.rattle(0.1, seed=0)
    tri = bulk("Cu", "fcc", a=3.61) * (2, 1, 1)  # images of an atom are its own neighbours
    tri.rattle(0.1, seed=3)
    slab = fcc111("Cu", size=(2, 2, 3), a=3.61, vacuum=5.0)
    slab.pbc = (True, True, False)
    cluster = periodic.copy()
    cluster.pbc = False
    return {"periodic": periodic, "triclinic": tri, "slab": slab, "cluster": cluster}


def _edges(atoms, cutoff=5.0):
    pos = torch.tensor(atoms.get_positions())
    return neighbor_list(pos, torch.tensor(np.array(atoms.get_cell())), atoms.get_pbc(), cutoff)


@pytest.mark.parametrize("name", list(_structures()))
def test_every_edge_has_its_reverse(name):
    edges = _edges(_structures()[name])
    p = edges.partner
    e = torch.arange(p.numel())
    assert p is not None and p.numel() > 0
    assert torch.equal(p[p], e) and not (p == e).any()
    assert torch.equal(edges.src[p], edges.dst) and torch.equal(edges.dst[p], edges.src)
    assert torch.equal(edges.shift[p], -edges.shift)
    assert torch.equal(edges.vec[p], -edges.vec)  # exactly: equal lengths, kept and dropped together


def test_partners_follow_the_verlet_filter():
    atoms = _structures()["periodic"]
    nl = VerletNeighborList(5.0, skin=1.0)
    pos = torch.tensor(atoms.get_positions())
    cell = torch.tensor(np.array(atoms.get_cell()))
    species = torch.zeros(len(atoms), dtype=torch.int64)
    nl.update(pos, cell, atoms.get_pbc(), species)
    moved = pos + 0.25 * (2 * torch.rand(pos.shape, generator=torch.Generator().manual_seed(1), dtype=pos.dtype) - 1)
    edges = nl.update(moved, cell, atoms.get_pbc(), species)
    fresh = neighbor_list(moved, cell, atoms.get_pbc(), 5.0)
    assert nl.num_builds == 1
    assert torch.equal(edges.src, fresh.src) and torch.equal(edges.dst, fresh.dst)
    assert torch.equal(edges.partner, fresh.partner)
    assert torch.equal(edges.vec[edges.partner], -edges.vec)


def test_an_edge_without_its_reverse_gives_no_partners():
    atoms = _structures()["triclinic"]
    src, dst, s, partner = _sorted_pairs(torch.tensor(atoms.get_positions()), torch.tensor(np.array(atoms.get_cell())),
                                         (True, True, True), 5.0)
    assert partner is not None and torch.equal(edge_partners(src, dst, s), partner)
    perm = torch.randperm(src.numel(), generator=torch.Generator().manual_seed(0))  # any order
    shuffled = edge_partners(src[perm], dst[perm], s[perm])
    assert torch.equal(perm[shuffled], partner[perm])
    keep = torch.ones(src.numel(), dtype=torch.bool)
    keep[5] = False
    assert edge_partners(src[keep], dst[keep], s[keep]) is None


@pytest.mark.parametrize("dst_sorted", [True, False])
def test_graph_weight_rows(dst_sorted):
    edges = _edges(_structures()["triclinic"])
    n = int(edges.dst.max()) + 1
    e = edges.src.numel()
    if dst_sorted:
        src, dst, partner = edges.src, edges.dst, edges.partner
    else:  # shuffled: build_graph sorts by receiver and carries the partners along
        perm = torch.randperm(e, generator=torch.Generator().manual_seed(2))
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(e)
        src, dst, partner = edges.src[perm], edges.dst[perm], inv[edges.partner[perm]]
    g = build_graph(src, dst, n, dst_sorted, partner)
    assert g.w_row is not None and g.row_edge is not None and g.row_edge.numel() * 2 == e
    assert int(g.w_row.min()) == 0 and int(g.w_row.max()) == e // 2 - 1
    assert torch.equal(torch.bincount(g.w_row), torch.full((e // 2,), 2))  # two edges per row
    # the two edges of a row are each other's reverse (in the graph's order), and row_edge is one of them
    orig = g.perm
    first, second = [], []
    for r in range(e // 2):
        a, b = (g.w_row == r).nonzero().squeeze(-1).tolist()
        first.append(a)
        second.append(b)
        assert int(partner[orig[a]]) == int(orig[b])
    assert torch.equal(g.row_edge, torch.tensor(first))


def test_pair_rows_numbering():
    partner = torch.tensor([3, 2, 1, 0, 5, 4])
    w_row, row_edge = pair_rows(partner)
    assert w_row.tolist() == [0, 1, 1, 0, 2, 2] and row_edge.tolist() == [0, 1, 4]


def test_check_partners():
    check_partners(torch.tensor([3, 2, 1, 0]), 4)
    for bad in ([0, 1, 3, 2], [1, 2, 3, 0], [1, 0, 3, 5], [1, 0, 2], [3, 2, 1, 0, 5]):  # self, cycle, range, sizes
        with pytest.raises(ValueError, match="pair each of the"):
            check_partners(torch.tensor(bad), 4)


def test_sevennet0_per_pair_equals_per_edge():
    pytest.importorskip("sevenn")
    from md_accel.convert.sevenn import convert_sevenn, load_sevenn

    torch.set_num_threads(1)
    pot = convert_sevenn(load_sevenn("sevennet-0", torch.float64))
    structures = _structures()
    for name in ("periodic", "triclinic", "slab"):
        assert_pairs_equal_edges(pot, structures[name])
    # the TorchScript model (what md_accel.io.save writes) on a paired graph: the same as eager
    scripted = torch.jit.script(pot)
    eager, script = evaluate(pot, structures["periodic"], True), evaluate(scripted, structures["periodic"], True)
    for q in ("energy", "forces", "virial"):
        assert torch.allclose(script[q], eager[q], rtol=1e-12, atol=1e-12), q
