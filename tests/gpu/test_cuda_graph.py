"""The Calculator's CUDA-graph step during MD (neighbour-list rebuilds, an edge-capacity growth):
bitwise equal to the same padded step run uncaptured, and equal within rounding to the
unpadded step (cuda_graph=False). Skipped without CUDA."""
import copy
import os

import numpy as np
import pytest
import torch
from ase import units
from ase.build import bulk
from ase.md.verlet import VelocityVerlet
from ase.stress import full_3x3_to_voigt_6_stress

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

# per dtype: force (eV/A), relative energy, stress (eV/A^3) tolerances against the unpadded step
TOL = {"float64": (1e-12, 1e-12, 1e-12), "float32": (1e-4, 1e-6, 1e-5)}


@pytest.fixture(scope="module")
def model():
    """SevenNet-0, or SevenNet-l3i5 where only that checkpoint is installed; without sevenn, the
    shipped MACE copper model (models/mace_cu/mace_cu.mdx, md_accel's own file)."""
    try:
        from md_accel.convert.sevenn import convert_sevenn, resolve_checkpoint
    except ImportError:
        resolve_checkpoint = None
    for name in ("sevennet-0", "sevennet-l3i5") if resolve_checkpoint is not None else ():
        try:
            resolve_checkpoint(name)
        except (FileNotFoundError, ValueError, ImportError):
            continue
        return convert_sevenn(name, dtype=torch.float64)
    from md_accel import io

    return io.load(os.path.join(os.path.dirname(__file__), "..", "..", "models", "mace_cu", "mace_cu.mdx"),
                   dtype=torch.float64)


def _hot_copper():
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    atoms.rattle(0.05, seed=0)
    rng = np.random.default_rng(0)
    sigma = np.sqrt(1500 * units.kB / atoms.get_masses())[:, None]  # 1500 K
    v = rng.normal(size=(len(atoms), 3)) * sigma
    atoms.set_velocities(v - v.mean(0))
    return atoms


def _uncaptured_padded(model, species, layout, dtype, atoms):
    """The step on ``layout`` (a graphed step's current one), run without the graph, from a fresh
    neighbour list (identical to the Verlet list's edges, by its contract)."""
    from md_accel.neighbors import neighbor_list
    from md_accel.step import padded_step

    pos = torch.tensor(atoms.positions, dtype=torch.float64, device="cuda")
    cell = torch.tensor(np.asarray(atoms.cell), dtype=torch.float64, device="cuda")
    edges = neighbor_list(pos, cell, atoms.pbc, model.cutoff)
    out = padded_step(model, species, edges.vec, edges.src, edges.dst, layout, dtype=dtype,
                      dst_sorted=True, edge_partner=edges.partner)  # the Calculator's default: weights per pair
    node_e = out["node_energies"].to(torch.float64).cpu().numpy()  # summed on the host, as the Calculator does
    w = out["virial"].to(torch.float64).cpu().numpy()
    return (float(node_e.sum()), out["forces"].to(torch.float64).cpu().numpy(),
            full_3x3_to_voigt_6_stress(-0.5 * (w + w.T) / atoms.get_volume()), edges.src.numel())


def _rescale_out_of_layout(calc, atoms):
    """The mildest cell scaling (a compression of up to 8 % or an expansion of up to 14 %) whose
    edge count the step's current layout does not fit, with a 2 % margin for the next time step's
    motion: which one depends on the cutoff and on how far the hot lattice's own edge count has
    grown the layout already."""
    from md_accel.neighbors import neighbor_list

    layout = calc.step.layout
    for f in (0.96, 1.04, 0.94, 1.06, 0.92, 1.08, 1.10, 1.12, 1.14):
        trial = atoms.copy()
        trial.set_cell(atoms.cell * f, scale_atoms=True)
        pos, cell = torch.tensor(trial.positions), torch.tensor(np.asarray(trial.cell))
        e = neighbor_list(pos, cell, trial.pbc, calc.model.cutoff).src.numel()
        if e > 1.02 * layout.edge_capacity or e < 0.98 * layout.min_edges:
            return f
    raise AssertionError("no cell scaling in the list changes the layout")


def _through_the_fused_op(calc):
    """Every conv of the calculator's model takes forward_fused (with pairs: md_accel::tp_conv_pair_fwd,
    its P weight rows kept in the graph's pool), as large systems do."""
    from md_accel.ops.tp_conv import TensorProductConv

    for m in calc.model.modules():
        if isinstance(m, TensorProductConv) and m.fused_hidden > 0:
            m.save_weights_bytes = 0
    return calc


@pytest.mark.parametrize("weights", ["whole", "fused_op"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_graphed_md_equals_uncaptured_steps(model, dtype, weights):
    from md_accel.calculator import Calculator

    prepare = _through_the_fused_op if weights == "fused_op" else (lambda calc: calc)
    graphed = prepare(Calculator(copy.deepcopy(model), device="cuda", dtype=dtype, skin=0.3))
    plain = prepare(Calculator(copy.deepcopy(model), device="cuda", dtype=dtype, skin=0.3, cuda_graph=False))
    per_edge = prepare(Calculator(copy.deepcopy(model), device="cuda", dtype=dtype, skin=0.3, cuda_graph=False,
                                  pair_weights=False))
    assert graphed.step is not None and plain.step is None
    atoms = _hot_copper()
    atoms.calc = graphed
    dyn = VelocityVerlet(atoms, timestep=2 * units.fs)
    f_tol, e_tol, s_tol = TOL[dtype]
    for i in range(30):
        if i == 15:  # a new neighbour shell enters or leaves the cutoff: a new layout, a new capture
            before = (graphed.step.layout, graphed.step.num_captures)
            atoms.set_cell(atoms.cell * _rescale_out_of_layout(graphed, atoms), scale_atoms=True)
        dyn.run(1)
        e, f, s = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress()
        if i == 15:
            assert graphed.step.layout != before[0] and graphed.step.num_captures > before[1]
        e_ref, f_ref, s_ref, num_edges = _uncaptured_padded(graphed.model, graphed._species(atoms),
                                                          graphed.step.layout, graphed.dtype, atoms)
        assert graphed.stats["edges"] == num_edges
        assert e == e_ref and np.array_equal(f, f_ref) and np.array_equal(s, s_ref), (
            f"step {i}: replay != eager: |dE| {abs(e - e_ref):.3g}, max |dF| {np.abs(f - f_ref).max():.3g}, "
            f"max |dS| {np.abs(s - s_ref).max():.3g}")
        e_plain, f_plain, s_plain = plain.get_potential_energy(atoms), plain.get_forces(atoms), plain.get_stress(atoms)
        assert abs(e - e_plain) <= e_tol * abs(e_plain), (i, e, e_plain)
        assert np.abs(f - f_plain).max() <= f_tol, (i, np.abs(f - f_plain).max())
        assert np.abs(s - s_plain).max() <= s_tol, (i, np.abs(s - s_plain).max())
        e_edge, f_edge = per_edge.get_potential_energy(atoms), per_edge.get_forces(atoms)  # weights per edge
        assert abs(e - e_edge) <= e_tol * abs(e_edge) and np.abs(f - f_edge).max() <= f_tol, i
        assert np.abs(f).max() > 0.1
    assert graphed.step.mode == "graph", "capture failed and the step fell back to plain"
    assert graphed.neighbors.num_builds >= 3  # Verlet-list rebuilds happened during the run
    assert graphed.step.num_captures <= 5 and graphed.step.num_replays >= 31  # every call replayed


def test_replay_past_the_capacity_reruns(model):
    """The same stored pairs (a 2 A skin) first in a cell stretched by 15 %, then at the lattice
    constant: the replay's edge count outgrows the layout made for the first (with pair weights,
    whose partner indices must stay in range), and the step reruns on a new layout: bitwise the
    uncaptured padded step on a fresh list, every edge present."""
    from md_accel.neighbors import VerletNeighborList
    from md_accel.verlet_step import VerletGraphStep

    potential = copy.deepcopy(model).to("cuda")
    step = VerletGraphStep(potential, torch.device("cuda"))
    neighbors = VerletNeighborList(potential.cutoff, skin=2.0)
    atoms = _hot_copper()
    stretched = atoms.copy()
    stretched.set_cell(atoms.cell * 1.15, scale_atoms=True)
    species = torch.zeros(len(atoms), dtype=torch.int64, device="cuda")
    species += potential.elements.index("Cu")

    def run(a):
        pos, cell = a.get_positions(), np.array(a.cell, dtype=np.float64)
        probe = (torch.from_numpy(pos), torch.from_numpy(cell), species.cpu())
        up = lambda x: torch.from_numpy(x).to("cuda")  # noqa: E731
        return step(pos, cell, species, neighbors.current_pairs(probe, a.pbc, lambda: (up(pos), up(cell), species)))

    run(stretched)
    small = step.layout
    flat = run(atoms)
    assert neighbors.num_builds == 1 and step.num_captures == 2
    e_ref, f_ref, _, num_edges = _uncaptured_padded(potential, species, step.layout, torch.float64, atoms)
    n = len(atoms)
    assert num_edges > small.edge_capacity and flat[-1] == num_edges
    assert float(flat[:n].sum()) == e_ref and np.array_equal(flat[n: 4 * n].reshape(n, 3), f_ref)


def test_graph_follows_atom_count_changes(model):
    """One graphed Calculator on 108 atoms, then 32, then 108 again: each call equals the
    unpadded step (a new layout and capture per atom count, nothing stale replayed)."""
    from md_accel.calculator import Calculator

    graphed = Calculator(copy.deepcopy(model), device="cuda")
    plain = Calculator(copy.deepcopy(model), device="cuda", cuda_graph=False)
    big = _hot_copper()
    small = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    small.rattle(0.05, seed=1)
    for a in (big, small, big, small):
        graphed.reset()
        e, f = graphed.get_potential_energy(a), graphed.get_forces(a)
        assert abs(e - plain.get_potential_energy(a)) <= 1e-12 * abs(e)
        assert np.abs(f - plain.get_forces(a)).max() <= 1e-12
        assert graphed.step.layout.num_nodes == len(a) and graphed.stats == plain.stats
    assert graphed.step.mode == "graph" and graphed.step.num_captures == 4


def test_measured_choice_above_the_limit(model, monkeypatch):
    """The default Calculator past AUTO_MAX_EDGES (lowered below the lattice's edge count), one call per
    configuration: its first calls time the captured step and the plain one (the graph released before the plain
    trials, captured again if it wins); every call within rounding of cuda_graph=False, the choice made once for
    the size, and afterwards the graph held exactly when it was chosen."""
    from md_accel import calculator as calculator_module
    from md_accel.calculator import Calculator

    plain = Calculator(copy.deepcopy(model), device="cuda", skin=0.3, cuda_graph=False)
    auto = Calculator(copy.deepcopy(model), device="cuda", skin=0.3)
    base = _hot_copper()
    plain.get_potential_energy(base)
    monkeypatch.setattr(calculator_module, "AUTO_MAX_EDGES", plain.stats["edges"] // 2)
    rng = np.random.default_rng(1)
    held = []
    for _ in range(12):
        atoms = base.copy()
        atoms.positions += rng.normal(scale=0.01, size=atoms.positions.shape)
        auto.reset()
        e, f = auto.get_potential_energy(atoms), auto.get_forces(atoms)
        assert abs(e - plain.get_potential_energy(atoms)) <= 1e-12 * abs(e)
        assert np.abs(f - plain.get_forces(atoms)).max() <= 1e-12
        held.append(auto.step.layout is not None)
    (key, chosen), = auto.step_choice.chosen.items()
    assert key[0] == len(base) and {w: len(t) for w, t in auto.step_choice.times[key].items()} == \
        {"graph": 3, "plain": 3}
    # call 0 sized by no earlier call (the graph, outside the trials), 1-4 the graph's trials, 5-8 plain's
    assert held[:9] == [True] * 5 + [False] * 4 and held[9:] == [chosen == "graph"] * 3
    assert auto.step.num_captures == (2 if chosen == "graph" else 1)
