"""md_accel.Calculator and md_accel.neighbors with the test Lennard-Jones potential, against ASE's
own LJ calculator and neighbour list, finite differences and NVE energy conservation."""
import numpy as np
import pytest
import torch
from ase import Atoms, units
from ase.build import bulk, fcc111
from ase.calculators.calculator import PropertyNotImplementedError
from ase.calculators.fd import calculate_numerical_forces, calculate_numerical_stress
from ase.md.verlet import VelocityVerlet
from ase.neighborlist import neighbor_list as ase_neighbor_list

from lj_potential import LJ
from nve_testing import nve_energy_excursion
from md_accel.calculator import Calculator
from md_accel.io import ModelFileError
from md_accel.neighbors import VerletNeighborList, neighbor_list


def _cu(n=3, rattle=0.1, seed=0):
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat(n)
    atoms.rattle(rattle, seed=seed)
    return atoms


def _geometries():
    """Periodic, open, mixed (slab), and a small triclinic cell (cutoff + skin > cell widths)."""
    periodic = _cu()
    cluster = _cu(2, seed=1)
    cluster.pbc = False
    slab = fcc111("Cu", size=(3, 3, 3), a=3.61, vacuum=5.0)
    slab.pbc = (True, True, False)
    slab.rattle(0.1, seed=2)
    tri = bulk("Cu", "fcc", a=3.61) * (2, 1, 1)  # primitive cell: 2.55 A vectors at 60 degrees
    tri.rattle(0.1, seed=3)
    return {"periodic": periodic, "cluster": cluster, "slab": slab, "triclinic": tri}


def _random_rotation(rng):
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def _two_species(atoms, seed=0):
    atoms = atoms.copy()
    symbols = np.array(atoms.get_chemical_symbols(), dtype=object)
    symbols[np.random.default_rng(seed).random(len(atoms)) < 0.4] = "Ag"
    atoms.set_chemical_symbols(list(symbols))
    return atoms


def _two_species_potential():
    from lj_potential import LennardJones

    return LennardJones(["Cu", "Ag"], [0.409, 0.345], LJ["sigma"], LJ["cutoff"], LJ["onset"])


# -- neighbour list ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["periodic", "cluster", "slab", "triclinic"])
def test_neighbor_list_matches_ase(name):
    atoms = _geometries()[name]
    pos = torch.tensor(atoms.positions)
    cell = torch.tensor(np.asarray(atoms.cell))
    edges = neighbor_list(pos, cell, atoms.pbc, 5.0)
    i, j, s = ase_neighbor_list("ijS", atoms, 5.0)  # i = centre (our dst), j = neighbour (our src)

    def key(dst, src, shift):
        return sorted(zip(dst.tolist(), src.tolist(), map(tuple, np.round(shift, 6).tolist())))

    assert key(edges.dst, edges.src, edges.shift.numpy()) == key(i, j, s @ np.asarray(atoms.cell))
    assert len(edges.src) == len(i)
    expected = atoms.positions[edges.src] - atoms.positions[edges.dst] + edges.shift.numpy()
    np.testing.assert_allclose(edges.vec.numpy(), expected, atol=1e-12)
    assert np.all(np.linalg.norm(expected, axis=1) < 5.0)
    assert torch.all(edges.dst[1:] >= edges.dst[:-1]), "edges must be sorted by receiver"


# -- agreement with ASE's Lennard-Jones -----------------------------------------------------------
@pytest.mark.parametrize("name", ["periodic", "cluster", "slab", "triclinic"])
def test_matches_ase_lennard_jones(name, lj_potential, ase_lj):
    atoms = _geometries()[name]
    atoms.calc = Calculator(lj_potential, device="cpu")
    ref = atoms.copy()
    ref.calc = ase_lj
    scale = np.abs(ref.get_potential_energies()).max()
    assert abs(atoms.get_potential_energy() - ref.get_potential_energy()) < 1e-10 * scale * len(atoms)
    np.testing.assert_allclose(atoms.get_potential_energies(), ref.get_potential_energies(), atol=1e-10 * scale)
    np.testing.assert_allclose(atoms.get_forces(), ref.get_forces(), atol=1e-10 * np.abs(ref.get_forces()).max())
    if atoms.cell.rank == 3:
        np.testing.assert_allclose(atoms.get_stress(), ref.get_stress(), atol=1e-10 * np.abs(ref.get_stress()).max())
    else:
        with pytest.raises(PropertyNotImplementedError):
            atoms.get_stress()


def test_two_species_energy_matches_pairwise_reference():
    """Per-species epsilon (eps_ij = sqrt(eps_i eps_j)) against a direct numpy pair sum."""
    atoms = _two_species(_cu())
    atoms.calc = Calculator(_two_species_potential(), device="cpu")
    eps = np.where(np.array(atoms.get_chemical_symbols()) == "Cu", 0.409, 0.345)
    i, j, d = ase_neighbor_list("ijd", atoms, LJ["cutoff"])
    r2, rc2, ro2 = d**2, LJ["cutoff"] ** 2, LJ["onset"] ** 2
    fc = np.where(r2 < ro2, 1.0, (rc2 - r2) ** 2 * (rc2 + 2 * r2 - 3 * ro2) / (rc2 - ro2) ** 3)
    c6 = (LJ["sigma"] ** 2 / r2) ** 3
    pair = 4 * np.sqrt(eps[i] * eps[j]) * (c6**2 - c6) * fc
    energies = 0.5 * np.bincount(i, weights=pair, minlength=len(atoms))
    np.testing.assert_allclose(atoms.get_potential_energies(), energies, rtol=1e-12, atol=1e-12)


# -- derivatives ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["periodic", "triclinic"])
def test_forces_and_stress_are_derivatives_of_energy(name):
    atoms = _two_species(_cu(2) if name == "periodic" else _geometries()[name], seed=4)
    calc = Calculator(_two_species_potential(), device="cpu")
    atoms.calc = calc
    forces, stress = atoms.get_forces(), atoms.get_stress()
    # central differences, error O(d^2 E''') ~ 1e-8 relative for these steps
    np.testing.assert_allclose(forces, calculate_numerical_forces(atoms, eps=1e-4), atol=1e-6 * np.abs(forces).max())
    np.testing.assert_allclose(stress, calculate_numerical_stress(atoms, eps=1e-5), atol=1e-6 * np.abs(stress).max())


def test_hessian_matches_finite_differences_of_forces():
    atoms = _two_species(_cu(1, rattle=0.1), seed=5) * (2, 1, 1)  # 8 atoms, periodic
    atoms.rattle(0.05, seed=6)
    calc = Calculator(_two_species_potential(), device="cpu")
    hess = calc.get_hessian(atoms)
    assert hess.shape == (3 * len(atoms),) * 2
    np.testing.assert_allclose(hess, hess.T, atol=1e-10 * np.abs(hess).max())
    d = 1e-4
    fd = np.zeros_like(hess)
    for k in range(3 * len(atoms)):
        plus, minus = atoms.copy(), atoms.copy()
        plus.positions.reshape(-1)[k] += d
        minus.positions.reshape(-1)[k] -= d
        f_plus = calc.get_forces(plus).reshape(-1)
        f_minus = calc.get_forces(minus).reshape(-1)
        fd[:, k] = -(f_plus - f_minus) / (2 * d)
    np.testing.assert_allclose(hess, fd, atol=1e-6 * np.abs(hess).max())


# -- dynamics -------------------------------------------------------------------------------------
def test_nve_conserves_energy(lj_potential):
    """Velocity Verlet conserves a shadow Hamiltonian: with exact conservative forces the total
    energy only fluctuates, by an amount ~ dt^2 (measured 3.3e-4 eV/atom at 2 fs, 1.3e-3 at
    4 fs), with no drift. Forces that are not the gradient of the energy (the failure seen in
    a peer library) heat the system at a rate that does not shrink as dt^2. So we require the
    excursion to stay below 1e-3 eV/atom at 2 fs (about 8 K of kinetic energy), to grow ~4x when
    dt doubles, and the fitted drift to be below 2e-4 eV/atom/ps."""
    exc2, slope2 = nve_energy_excursion(lj_potential, 2.0, 150)
    exc4, slope4 = nve_energy_excursion(lj_potential, 4.0, 75)
    assert exc2 < 1e-3
    assert 3.0 < exc4 / exc2 < 5.5
    assert abs(slope2) < 2e-4 and abs(slope4) < 8e-4


def test_skin_reuse_gives_identical_results(lj_potential):
    """The Verlet cache must return exactly what a fresh list gives: same edges, same order,
    bit-identical energies and forces, through atom moves and cell deformations."""
    atoms = _cu(3, rattle=0.0)
    atoms.set_momenta(np.random.default_rng(8).normal(size=(len(atoms), 3)) * np.sqrt(
        atoms.get_masses()[:, None] * units.kB * 2000))
    cached = Calculator(lj_potential, device="cpu", skin=0.3)
    fresh = Calculator(lj_potential, device="cpu", skin=0.0)
    atoms.calc = cached
    dyn = VelocityVerlet(atoms, 4.0 * units.fs)
    rng = np.random.default_rng(9)
    for step in range(60):
        dyn.run(1)
        if step >= 30:  # then a slowly deforming cell, positions following (as a barostat does)
            strain = np.eye(3) + rng.normal(scale=1e-3, size=(3, 3))
            atoms.set_cell(atoms.cell @ strain, scale_atoms=True)
        e, f, s = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress()
        probe = atoms.copy()
        probe.calc = fresh
        assert e == probe.get_potential_energy()
        assert np.array_equal(f, probe.get_forces())
        assert np.array_equal(s, probe.get_stress())
    assert fresh.neighbors.num_builds == 60
    assert 2 <= cached.neighbors.num_builds <= 30, cached.neighbors.num_builds


@pytest.mark.parametrize("host_check", [False, True], ids=["on_device", "check_on_host"])
def test_verlet_list_rebuilds_when_needed(host_check):
    """Rebuilds exactly when a pair could have come within the cutoff unseen; the same decisions
    when the check runs on host copies (``check_on``, as the Calculator passes them), and the
    edges equal a fresh list's."""
    pos = torch.tensor(_cu(2).positions)
    cell = torch.tensor(np.asarray(_cu(2).cell))
    species = torch.zeros(len(pos), dtype=torch.int64)
    nl = VerletNeighborList(5.0, skin=1.0)

    def update(p, c, pbc, s):
        host = (p.clone(), c.clone(), s.clone()) if host_check else None
        edges = nl.update(p, c, pbc, s, check_on=host)
        fresh = neighbor_list(p, c, pbc, 5.0)
        assert torch.equal(edges.src, fresh.src) and torch.equal(edges.dst, fresh.dst)
        assert torch.equal(edges.vec, fresh.vec)

    update(pos, cell, (True,) * 3, species)
    moved = pos.clone()
    moved[3, 0] += 0.49
    update(moved, cell, (True,) * 3, species)
    assert nl.num_builds == 1
    moved[3, 0] += 0.02  # now 0.51 > skin / 2
    update(moved, cell, (True,) * 3, species)
    assert nl.num_builds == 2
    update(moved, cell, (True, True, False), species)
    assert nl.num_builds == 3
    update(moved, cell, (True, True, False), species + 1)
    assert nl.num_builds == 4
    # an affine expansion (positions follow the cell) cannot bring pairs closer: reuse
    update(moved * 1.05, cell * 1.05, (True, True, False), species + 1)
    assert nl.num_builds == 4
    # compressing the cell under fixed positions moves images by up to 10% of 7 A: rebuild
    update(moved * 1.05, cell * 0.9, (True, True, False), species + 1)
    assert nl.num_builds == 5


# -- symmetry -------------------------------------------------------------------------------------
def test_translation_and_rotation_invariance():
    atoms = _two_species(_geometries()["triclinic"] * (2, 2, 2), seed=10)
    calc = Calculator(_two_species_potential(), device="cpu")
    atoms.calc = calc
    e, f, s = atoms.get_potential_energy(), atoms.get_forces(), atoms.get_stress(voigt=False)
    rng = np.random.default_rng(11)

    moved = atoms.copy()
    moved.positions += rng.normal(size=3) * 3.0
    moved.calc = calc
    assert abs(moved.get_potential_energy() - e) < 1e-10 * abs(e)
    np.testing.assert_allclose(moved.get_forces(), f, atol=1e-10 * np.abs(f).max())

    rot = _random_rotation(rng)
    turned = atoms.copy()
    turned.set_cell(atoms.cell @ rot.T)
    turned.positions = atoms.positions @ rot.T
    turned.calc = calc
    assert abs(turned.get_potential_energy() - e) < 1e-10 * abs(e)
    np.testing.assert_allclose(turned.get_forces(), f @ rot.T, atol=1e-10 * np.abs(f).max())
    np.testing.assert_allclose(turned.get_stress(voigt=False), rot @ s @ rot.T, atol=1e-10 * np.abs(s).max())


def test_float32_close_to_float64(lj_potential):
    atoms = _cu(3)
    atoms.calc = Calculator(lj_potential, device="cpu")
    e64, f64 = atoms.get_potential_energy(), atoms.get_forces()
    atoms.calc = Calculator(lj_potential, device="cpu", dtype="float32")
    assert abs(atoms.get_potential_energy() - e64) < 1e-5 * abs(e64)
    np.testing.assert_allclose(atoms.get_forces(), f64, atol=1e-4 * np.abs(f64).max())


# -- bad inputs -----------------------------------------------------------------------------------
def test_unknown_element_is_named(lj_potential):
    atoms = _cu(1)
    atoms[0].symbol = "Au"
    atoms.calc = Calculator(lj_potential, device="cpu")
    with pytest.raises(ValueError, match=r"\['Au'\].*\['Cu'\]"):
        atoms.get_potential_energy()


def test_non_finite_positions(lj_potential):
    atoms = _cu(1)
    atoms.positions[2, 1] = np.nan
    atoms.calc = Calculator(lj_potential, device="cpu")
    with pytest.raises(ValueError, match=r"non-finite positions.*\[2\]"):
        atoms.get_forces()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_atoms_too_close(lj_potential, dtype):
    """The shortest distance travels to the host with the results (in the model's dtype): the
    error names the pair and keeps no result; a smaller min_distance lets the step through."""
    atoms = _cu(1)
    atoms.positions[1] = atoms.positions[0] + [0.3, 0.0, 0.0]
    calc = Calculator(lj_potential, device="cpu", dtype=dtype)
    atoms.calc = calc
    with pytest.raises(ValueError, match=r"atoms [01] and [01] are 0.3000 A apart"):
        atoms.get_forces()
    assert "forces" not in calc.results
    with pytest.raises(ValueError, match="0.3000 A apart"):
        calc.get_hessian(atoms)
    atoms.calc = Calculator(lj_potential, device="cpu", dtype=dtype, min_distance=0.2)
    assert np.isfinite(atoms.get_forces()).all()


@pytest.mark.parametrize("pbc", [True, (True, False, False)])
def test_zero_volume_periodic_cell(lj_potential, pbc):
    atoms = Atoms("Cu2", positions=[[0, 0, 0], [2.5, 0, 0]], pbc=pbc)  # no cell set
    atoms.calc = Calculator(lj_potential, device="cpu")
    with pytest.raises(ValueError, match="zero volume"):
        atoms.get_potential_energy()


def test_not_a_model(tmp_path):
    text = tmp_path / "model.mdx"
    text.write_text("not a model")
    with pytest.raises(ModelFileError, match="not an md_accel model file"):
        Calculator(text, device="cpu")
    with pytest.raises(TypeError, match="path to an .mdx file or an md_accel Potential"):
        Calculator(torch.nn.Linear(3, 1), device="cpu")


def test_out_of_memory_is_explained(lj_potential, monkeypatch):
    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    calc = Calculator(lj_potential, device="cpu")
    monkeypatch.setattr(calc.model, "node_energies", oom)
    atoms = _cu(2)
    atoms.calc = calc
    with pytest.raises(torch.OutOfMemoryError, match=r"32 atoms .*float32"):
        atoms.get_forces()


def test_system_changes_follow_ase():
    """md_accel's check_state (``changed_properties``) names exactly the properties ASE's ``compare_atoms`` names:
    unchanged copies, changes below, at and above the tolerance (positions, cell), another element, pbc, an
    array present on one side only, non-finite positions, and the excluded properties."""
    from ase.calculators.calculator import compare_atoms

    from md_accel.calculator import changed_properties

    base = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    base.rattle(0.05, seed=1)
    variants = {"same": base.copy()}
    for name, dx in (("tiny", 4e-16), ("small", 1e-12), ("move", 1e-3)):
        a = base.copy()
        a.positions[3, 1] += dx
        variants[name] = a
    a = base.copy()
    a.cell[0, 0] += 1e-9
    variants["cell"] = a
    a = base.copy()
    a.numbers[5] = 47
    variants["element"] = a
    a = base.copy()
    a.pbc = (True, False, True)
    variants["pbc"] = a
    a = base.copy()
    a.set_initial_charges(np.zeros(len(a)))
    variants["charges"] = a
    for value in (np.nan, np.inf):
        a = base.copy()
        a.positions[0, 0] = value
        variants[f"pos_{value}"] = a
    old_inf = base.copy()
    old_inf.positions[0, 0] = np.inf
    at_zero, at_tol = base.copy(), base.copy()  # a difference of exactly 1e-15: unchanged at tol 1e-15 (<=)
    at_zero.positions[3, 1] = 0.0
    at_tol.positions[3, 1] = 1e-15
    cases = [(base, v, name) for name, v in variants.items()] + [(old_inf, variants["pos_inf"], "inf_both"),
                                                                    (at_zero, at_tol, "at_tol"), (None, base, "first")]
    seen = set()
    for old, new, name in cases:
        for tol in (1e-15, 1e-10):
            for excluded in ((), ("positions", "initial_charges")):
                ours = changed_properties(old, new, tol, set(excluded))
                theirs = compare_atoms(old, new, tol=tol, excluded_properties=set(excluded))
                assert sorted(ours) == sorted(theirs), (name, tol, excluded, ours, theirs)
                seen.update(ours)
    assert seen == {"positions", "numbers", "cell", "pbc", "initial_charges", "initial_magmoms"}


def test_check_state_skips_unchanged_atoms(lj_potential):
    """ASE returns the stored results for unchanged atoms (no second evaluation) and recomputes after a move."""
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 2, 2))
    calc = Calculator(lj_potential, device="cpu")
    atoms.calc = calc
    calls = []
    original = calc.calculate
    calc.calculate = lambda *a, **k: (calls.append(1), original(*a, **k))[1]
    atoms.get_potential_energy()
    atoms.get_forces()
    assert calc.check_state(atoms) == [] and len(calls) == 1
    atoms.positions[0, 0] += 1e-3
    assert calc.check_state(atoms) == ["positions"]
    atoms.get_forces()
    assert len(calls) == 2
