"""``VerletGraphStep`` (the Calculator's whole step: Verlet pairs -> cutoff filter -> padded edges ->
model -> packed results) run eagerly on the CPU: the same work its CUDA graph replays
(tests/gpu/test_cuda_graph.py replays it). Checked against the eager path it replaces: a fresh
neighbour list, ``padded_step`` on the same layout, packed the same way."""
import copy

import numpy as np
import pytest
import torch
from ase import units
from ase.build import bulk
from ase.md.verlet import VelocityVerlet

from lj_potential import LJ, LennardJones
from md_accel.neighbors import VerletNeighborList, neighbor_list
from md_accel.step import padded_step
from md_accel.verlet_step import VerletGraphStep


def _lj_two_species():
    return LennardJones(["Cu", "Ag"], [LJ["epsilon"], 1.3 * LJ["epsilon"]], LJ["sigma"], LJ["cutoff"], LJ["onset"])


def _alloy(n=3, seed=0):
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((n, n, n))
    rng = np.random.default_rng(seed)
    symbols = np.array(atoms.get_chemical_symbols())
    symbols[rng.choice(len(atoms), len(atoms) // 4, replace=False)] = "Ag"
    atoms.set_chemical_symbols(symbols.tolist())
    atoms.rattle(0.05, seed=seed)
    return atoms


def _species(potential, atoms):
    return torch.tensor([potential.elements.index(s) for s in atoms.get_chemical_symbols()])


def _eager(potential, atoms, layout):
    """The packed results from a fresh neighbour list, padded to ``layout``, run eagerly."""
    pos, cell = torch.tensor(atoms.positions), torch.tensor(np.asarray(atoms.cell))
    edges = neighbor_list(pos, cell, atoms.pbc, potential.cutoff)
    out = padded_step(potential, _species(potential, atoms), edges.vec, edges.src, edges.dst, layout,
                      dtype=torch.float64, edge_partner=edges.partner)
    parts = [out[k].reshape(-1) for k in ("node_energies", "forces", "virial")]
    shortest = torch.linalg.vector_norm(edges.vec, dim=-1).min()
    return torch.cat(parts).numpy(), float(shortest), edges.src.numel()


def _run(step, neighbors, atoms, species):
    pos, cell = atoms.get_positions(), np.array(atoms.cell, dtype=np.float64)
    probe = (torch.from_numpy(pos), torch.from_numpy(cell), species)
    return step(pos, cell, species, neighbors.current_pairs(probe, atoms.pbc, lambda: probe))


@pytest.mark.parametrize("pair_weights", [True, False])
def test_md_with_rebuilds_and_growth_equals_eager_bitwise(pair_weights):
    """Thirty steps of free flight at 1500 K velocities with a small skin (rebuilds), a 4 %
    compression after twenty that brings in the next neighbour shell (the edge count outgrows
    the layout: rerun on a new one)."""
    potential = _lj_two_species()
    atoms = _alloy()
    species = _species(potential, atoms)
    step = VerletGraphStep(potential, torch.device("cpu"), pair_weights=pair_weights)
    neighbors = VerletNeighborList(potential.cutoff, skin=0.3)
    rng = np.random.default_rng(1)
    atoms.set_velocities(rng.normal(size=(len(atoms), 3)) * np.sqrt(1500 * units.kB / atoms.get_masses())[:, None])
    capacities = []
    for i in range(30):
        if i == 20:
            atoms.set_cell(atoms.cell * 0.96, scale_atoms=True)
        atoms.positions += atoms.get_velocities() * 2 * units.fs
        flat = _run(step, neighbors, atoms, species)
        n = len(atoms)
        ref, shortest, num_edges = _eager(potential, atoms, step.layout)
        assert flat.shape == (4 * n + 11,)
        assert np.array_equal(flat[: 4 * n + 9], ref), f"step {i}: max diff {np.abs(flat[:4 * n + 9] - ref).max()}"
        assert flat[-1] == num_edges == step.num_edges
        assert flat[-2] == pytest.approx(shortest, rel=1e-15)
        assert step.layout.edge_capacity >= num_edges
        capacities.append(step.layout.edge_capacity)
    assert neighbors.num_builds >= 3
    assert capacities[-1] > capacities[0]


def test_edge_count_past_the_capacity_reruns():
    """The same pairs (a large skin) first at an expanded cell, then compressed: the replayed count
    exceeds the layout made for the first, and the step reruns on one that holds every edge."""
    potential = _lj_two_species()
    atoms = _alloy(seed=2)
    species = _species(potential, atoms)
    step = VerletGraphStep(potential, torch.device("cpu"))
    neighbors = VerletNeighborList(potential.cutoff, skin=2.0)
    stretched = atoms.copy()
    stretched.set_cell(atoms.cell * 1.15, scale_atoms=True)
    _run(step, neighbors, stretched, species)
    small = step.layout
    flat = _run(step, neighbors, atoms, species)
    assert neighbors.num_builds == 1
    ref, _, num_edges = _eager(potential, atoms, step.layout)
    assert num_edges > small.edge_capacity and step.layout.edge_capacity >= num_edges
    n = len(atoms)
    assert np.array_equal(flat[: 4 * n + 9], ref) and flat[-1] == num_edges


def test_declines_past_max_edges():
    """More edges than ``max_edges`` at a new layout: None, nothing kept; also when the count
    outgrows a layout made under the limit."""
    potential = _lj_two_species()
    atoms = _alloy()
    species = _species(potential, atoms)
    neighbors = VerletNeighborList(potential.cutoff, skin=2.0)
    step = VerletGraphStep(potential, torch.device("cpu"), max_edges=100)
    assert _run(step, neighbors, atoms, species) is None
    assert step.num_edges > 100 and step.layout is None
    stretched = atoms.copy()
    stretched.set_cell(atoms.cell * 1.15, scale_atoms=True)
    limit = int(neighbor_list(torch.tensor(stretched.positions), torch.tensor(np.asarray(stretched.cell)),
                              stretched.pbc, potential.cutoff).src.numel())
    step = VerletGraphStep(potential, torch.device("cpu"), max_edges=limit)
    neighbors = VerletNeighborList(potential.cutoff, skin=2.0)
    assert _run(step, neighbors, stretched, species) is not None and step.layout is not None
    assert _run(step, neighbors, atoms, species) is None  # the same pairs, more edges than the limit
    assert step.num_edges > limit and step.layout is None and step._pair_buffers is None


def test_calculator_switches_paths_at_max_edges(lj_potential):
    """A Calculator whose step declines past its ``max_edges`` runs the plain step, and returns to the
    graphed one when the edges fall back under it: the same results either way."""
    from md_accel.calculator import Calculator

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    atoms.rattle(0.02, seed=5)
    expanded = atoms.copy()
    expanded.set_cell(atoms.cell * 1.15, scale_atoms=True)
    count = lambda a: int(neighbor_list(torch.tensor(a.positions), torch.tensor(np.asarray(a.cell)),  # noqa: E731
                                        a.pbc, lj_potential.cutoff).src.numel())
    stepped = Calculator(copy.deepcopy(lj_potential), device="cpu")
    stepped.step = VerletGraphStep(stepped.model, torch.device("cpu"), max_edges=count(expanded))
    plain = Calculator(copy.deepcopy(lj_potential), device="cpu")
    paths = []
    for a in (expanded, atoms, atoms, expanded, expanded):
        stepped.reset()  # recompute: ASE would return the cached results for the same atoms
        e, f = stepped.get_potential_energy(a), stepped.get_forces(a)
        assert e == pytest.approx(plain.get_potential_energy(a), rel=1e-12)
        assert np.abs(f - plain.get_forces(a)).max() < 1e-12
        assert stepped.stats == plain.stats
        paths.append(stepped.step.layout is not None)
    # graphed; declined (too many edges); plain (decided from the last count); plain again, which
    # counts the edges under the limit; graphed
    assert paths == [True, False, False, False, True]


def test_calculator_through_the_step_equals_plain(lj_potential):
    """The Calculator's graphed branch (the step run eagerly here) in NVE MD: the same energies,
    forces and stress as the Calculator without it, and the distance check still names the atoms."""
    from md_accel.calculator import Calculator

    stepped = Calculator(copy.deepcopy(lj_potential), device="cpu", skin=0.3)
    assert stepped.step is None  # no graph off CUDA; attach the eager step to test the branch
    stepped.step = VerletGraphStep(stepped.model, torch.device("cpu"))
    plain = Calculator(copy.deepcopy(lj_potential), device="cpu", skin=0.3)
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    atoms.rattle(0.05, seed=3)
    rng = np.random.default_rng(3)
    atoms.set_velocities(rng.normal(size=(len(atoms), 3)) * np.sqrt(1200 * units.kB / atoms.get_masses())[:, None])
    atoms.calc = stepped
    dyn = VelocityVerlet(atoms, timestep=2 * units.fs)
    for _ in range(12):
        dyn.run(1)
        e, f, s = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress()
        assert e == pytest.approx(plain.get_potential_energy(atoms), rel=1e-12, abs=1e-12)
        assert np.abs(f - plain.get_forces(atoms)).max() < 1e-12
        assert np.abs(s - plain.get_stress(atoms)).max() < 1e-12
        assert stepped.stats == plain.stats
    assert stepped.neighbors.num_builds >= 2 and stepped.step.num_edges == stepped.stats["edges"]
    atoms.positions[5] = atoms.positions[9] + [0.2, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"atoms (5 and 9|9 and 5) are 0\.2000 A apart"):
        atoms.get_potential_energy()


@pytest.mark.parametrize("capacity_short", [False, True])
def test_load_kept_slots_and_partners(capacity_short):
    """``PaddedGraph.load_kept``: the kept pairs in order, partners renumbered to slots (an
    involution), padding past the count; a count past the capacity leaves only padding (no
    partner index out of range), and the count it returns is the true one."""
    from md_accel.step import Layout, PaddedGraph

    potential = _lj_two_species()
    atoms = _alloy(n=2, seed=4)
    pos, cell = torch.tensor(atoms.positions), torch.tensor(np.asarray(atoms.cell))
    pairs = VerletNeighborList(potential.cutoff, skin=1.0).rebuild(pos, cell, atoms.pbc, _species(potential, atoms))
    src, dst, s, partner = pairs
    edges = neighbor_list(pos, cell, atoms.pbc, potential.cutoff)
    e = edges.src.numel()
    from md_accel.neighbors import pair_vectors

    vec = pair_vectors(pos, cell, src, dst, s)[1]
    keep = vec.pow(2).sum(-1) < potential.cutoff ** 2
    keep &= keep[partner]
    layout = Layout.for_graph(len(atoms), e // 2 if capacity_short else e)
    padded = PaddedGraph(layout, potential.cutoff, torch.float64, torch.device("cpu"))
    count = padded.load_kept(keep, src, dst, vec, partner)
    assert int(count) == e
    if capacity_short:
        assert torch.equal(padded.src, padded._pad_node) and torch.equal(padded.vec, padded._pad_vec)
        assert torch.equal(padded.partner, padded._pad_partner)
        return
    assert torch.equal(padded.src[:e], edges.src) and torch.equal(padded.dst[:e], edges.dst)
    assert torch.equal(padded.vec[:e], edges.vec) and torch.equal(padded.partner[:e], edges.partner)
    assert torch.equal(padded.src[e:], padded._pad_node[e:]) and torch.equal(padded.vec[e:], padded._pad_vec[e:])
    assert torch.equal(padded.partner[padded.partner], torch.arange(layout.edge_capacity))
