"""Padded inputs of ``md_accel.step`` (what a CUDA graph replays) give the energies, forces and
virial of the unpadded graph; layouts and the in-place buffer reuse. CPU only."""
import math

import numpy as np
import pytest
import torch
from ase.build import bulk

from lj_potential import LJ, LennardJones
from md_accel.model import energy_forces_virial
from md_accel.neighbors import neighbor_list
from md_accel.step import PAD_DEGREE, GraphedStep, Layout, PaddedGraph, capacity, padded_step

KEYS = ("energy", "node_energies", "forces", "virial")


def _alloy(potential, n=2, seed=0, other="Ag"):
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((n, n, n))
    rng = np.random.default_rng(seed)
    symbols = np.array(atoms.get_chemical_symbols())
    symbols[rng.choice(len(atoms), len(atoms) // 4, replace=False)] = other
    atoms.set_chemical_symbols(symbols.tolist())
    atoms.rattle(0.1, seed=seed)
    pos = torch.tensor(atoms.positions)
    edges = neighbor_list(pos, torch.tensor(np.asarray(atoms.cell)), atoms.pbc, potential.cutoff)
    species = torch.tensor([potential.elements.index(s) for s in atoms.get_chemical_symbols()])
    return species, edges.vec, edges.src, edges.dst


def _unpadded(potential, species, vec, src, dst):
    out = energy_forces_virial(potential, species, vec, src, dst)
    return {k: out[k].detach() for k in KEYS}


def _assert_close(a, b, atol):
    for k in KEYS:
        assert a[k].shape == b[k].shape, k
        assert torch.allclose(a[k], b[k], rtol=0, atol=atol), (k, (a[k] - b[k]).abs().max().item())


def _lj_two_species():
    return LennardJones(["Cu", "Ag"], [LJ["epsilon"], 1.3 * LJ["epsilon"]], LJ["sigma"], LJ["cutoff"], LJ["onset"])


def test_capacity_ladder_and_layouts():
    rungs = sorted({capacity(n) for n in range(0, 200_000, 37)})
    assert rungs[0] == 32 and all(r % 32 == 0 for r in rungs)
    assert all(b / a <= 1.25 + 32 / a + 1e-12 for a, b in zip(rungs, rungs[1:]))  # geometric, not finer
    assert all(capacity(r) == r and capacity(r + 1) > r for r in rungs[:-1])
    for n, e in [(0, 0), (1, 0), (5, 3), (108, 4536), (864, 36288), (864, 70000), (4000, 10), (13, 900)]:
        lay = Layout.for_graph(n, e)
        assert lay.fits(n, e) and not lay.fits(n + 1, e) and not lay.fits(n, lay.edge_capacity + 1)
        assert lay.node_capacity > n and lay.edge_capacity >= e
        # the worst crowding of a padding node the layout accepts
        worst = math.ceil((lay.edge_capacity - lay.min_edges) / (lay.node_capacity - n))
        assert worst <= PAD_DEGREE * max(1, math.ceil(e / max(n, 1)))


def test_padding_never_touches_real_nodes():
    pot = _lj_two_species()
    species, vec, src, dst = _alloy(pot)
    n, e = species.numel(), src.numel()
    lay = Layout.for_graph(n, e)
    pg = PaddedGraph(lay, pot.cutoff, torch.float64, torch.device("cpu"))
    pg.load(species, vec, src, dst)
    pad = slice(e, None)
    assert torch.equal(pg.src[:e], src) and torch.equal(pg.dst[:e], dst) and torch.equal(pg.vec[:e], vec)
    assert torch.equal(pg.src[pad], pg.dst[pad]) and bool((pg.src[pad] >= n).all())
    assert torch.equal(pg.vec[pad].norm(dim=-1), torch.full((lay.edge_capacity - e,), pot.cutoff, dtype=torch.float64))
    with pytest.raises(ValueError, match="does not fit"):
        pg.load(species, vec[: lay.min_edges - 1], src[: lay.min_edges - 1], dst[: lay.min_edges - 1])


# Padding edges at 0.8 cutoff carry energy (to the padding nodes): only their isolation from
# the real nodes keeps the results exact, so these cases catch any leak.
@pytest.mark.parametrize("extra,pad_frac", [(0, 1.0), (0, 0.8), (1, 0.8), (3, 0.8)])
def test_lennard_jones_padded_equals_unpadded(extra, pad_frac):
    pot = _lj_two_species()
    species, vec, src, dst = _alloy(pot, seed=extra)
    n, e = species.numel(), src.numel()
    lay = Layout.for_graph(n, e)
    if extra:  # far more padding than a layout would choose
        lay = Layout(n, lay.node_capacity + 32 * extra, capacity(e * (1 + extra)), e)
    ref = _unpadded(pot, species, vec, src, dst)
    out = padded_step(pot, species, vec, src, dst, lay, pad_length=pad_frac * pot.cutoff)
    _assert_close(out, ref, 1e-12)


def test_sevennet0_padded_equals_unpadded():
    pytest.importorskip("sevenn")
    from md_accel.convert.sevenn import convert_sevenn

    pot = convert_sevenn("sevennet-0", dtype=torch.float64)
    for p in pot.parameters():
        p.requires_grad_(False)
    species, vec, src, dst = _alloy(pot, seed=1)
    n, e = species.numel(), src.numel()
    ref = _unpadded(pot, species, vec, src, dst)
    assert ref["forces"].abs().max() > 0.1  # a rattled alloy: forces are far from zero
    lay = Layout.for_graph(n, e)
    crowded = Layout(n, n + 1, capacity(2 * e), e)  # every padding edge on one padding node
    for layout, pad_length in ((lay, None), (crowded, 0.6 * pot.cutoff)):
        out = padded_step(pot, species, vec, src, dst, layout, pad_length=pad_length)
        assert all(torch.isfinite(out[k]).all() for k in KEYS)
        _assert_close(out, ref, 1e-12)


def test_buffers_reused_across_edge_counts_equal_fresh_padding():
    """Shrinking the edge count inside one layout restores the freed slots to padding."""
    pot = _lj_two_species()
    step = GraphedStep(pot, mode="padded")
    species, vec, src, dst = _alloy(pot, seed=2)
    e = src.numel()
    keep = torch.ones(e, dtype=torch.bool)
    keep[:: 9] = False  # a smaller graph: drop every ninth edge
    small = (species, vec[keep], src[keep], dst[keep])
    step(species, vec, src, dst)
    layout = step.layout
    assert layout.fits(species.numel(), int(keep.sum()))
    again = step(*small)
    assert step.layout is layout  # same layout, buffers reused in place
    fresh_buffers = PaddedGraph(layout, pot.cutoff, torch.float64, torch.device("cpu"))
    fresh_buffers.load(*small)
    for name in ("species", "src", "dst", "vec"):
        assert torch.equal(getattr(step._padded, name), getattr(fresh_buffers, name)), name
    fresh = padded_step(pot, *small, layout=layout)
    for k in KEYS:
        assert torch.equal(again[k], fresh[k]), k
    _assert_close(again, _unpadded(pot, *small), 1e-12)


def test_new_layout_on_growth_and_on_large_drop():
    pot = _lj_two_species()
    step = GraphedStep(pot, mode="padded")
    species, vec, src, dst = _alloy(pot, seed=3)
    e = src.numel()
    step(species, vec, src, dst)
    first = step.layout
    cut = first.min_edges - 1  # below the hysteresis band: a smaller layout
    out = step(species, vec[:cut], src[:cut], dst[:cut])
    assert step.layout is not first and step.layout.edge_capacity < first.edge_capacity
    _assert_close(out, _unpadded(pot, species, vec[:cut], src[:cut], dst[:cut]), 1e-12)
    twice = (torch.cat([vec, vec]), torch.cat([src, src]), torch.cat([dst, dst]))  # growth
    out = step(species, *twice)
    assert step.layout.edge_capacity >= 2 * e
    _assert_close(out, _unpadded(pot, species, *twice), 1e-12)


def test_graph_mode_falls_back_to_plain_on_cpu(lj_potential):
    species, vec, src, dst = _alloy(lj_potential, other="Cu")
    step = GraphedStep(lj_potential)
    out = step(species, vec, src, dst)
    ref = _unpadded(lj_potential, species, vec, src, dst)
    assert step.num_captures == 0 and step.layout is None
    for k in KEYS:
        assert torch.equal(out[k], ref[k]), k
