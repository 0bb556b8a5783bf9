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


def _uncaptured_padded(calc, atoms):
    """The graphed calculator's step on its current layout, run without the graph, from a fresh
    neighbour list (identical to the Verlet list's edges, by its contract)."""
    from md_accel.neighbors import neighbor_list
    from md_accel.step import padded_step

    pos = torch.tensor(atoms.positions, dtype=torch.float64, device="cuda")
    cell = torch.tensor(np.asarray(atoms.cell), dtype=torch.float64, device="cuda")
    edges = neighbor_list(pos, cell, atoms.pbc, calc.model.cutoff)
    species = calc._species(atoms)
    out = padded_step(calc.model, species, edges.vec, edges.src, edges.dst, calc.step.layout, dtype=calc.dtype,
                      edge_partner=edges.partner)  # the Calculator's default: radial weights per pair
    node_e = out["node_energies"].to(torch.float64).cpu().numpy()  # summed on the host, as the Calculator does
    w = out["virial"].to(torch.float64).cpu().numpy()
    return (float(node_e.sum()), out["forces"].to(torch.float64).cpu().numpy(),
            full_3x3_to_voigt_6_stress(-0.5 * (w + w.T) / atoms.get_volume()))


def _rescale_out_of_layout(calc, atoms):
    """The mildest cell scaling (a compression of up to 8 % or an expansion of up to 14 %) whose
    edge count the step's current layout does not fit: which one depends on the cutoff and on
    how far the hot lattice's own edge count has grown the layout already."""
    from md_accel.neighbors import neighbor_list

    for f in (0.96, 1.04, 0.94, 1.06, 0.92, 1.08, 1.10, 1.12, 1.14):
        trial = atoms.copy()
        trial.set_cell(atoms.cell * f, scale_atoms=True)
        pos, cell = torch.tensor(trial.positions), torch.tensor(np.asarray(trial.cell))
        if not calc.step.layout.fits(len(trial), neighbor_list(pos, cell, trial.pbc, calc.model.cutoff).src.numel()):
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
    capacities = []
    for i in range(30):
        if i == 15:  # a new neighbour shell enters or leaves the cutoff: a new layout, a new capture
            atoms.set_cell(atoms.cell * _rescale_out_of_layout(graphed, atoms), scale_atoms=True)
        dyn.run(1)
        e, f, s = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress()
        capacities.append(graphed.step.layout.edge_capacity)
        e_ref, f_ref, s_ref = _uncaptured_padded(graphed, atoms)
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
    assert capacities[-1] != capacities[0] and graphed.step.num_captures >= 2  # the new layout re-captured
    assert graphed.step.num_captures <= 4 and graphed.step.num_replays >= 31  # every call replayed
