"""SevenNet checkpoints shipped with sevenn, converted and compared with sevenn's own ASE
calculator. The reference runs in float64: sevenn's model is built, cast to float64 and its
e3nn Clebsch-Gordan buffers recomputed in float64 (``load_sevenn``), and the calculator feeds it a
float64 graph (``sevenn_calculator``); see md_accel/convert/sevenn.py."""
import numpy as np
import pytest
import torch

pytest.importorskip("sevenn")
from ase.build import molecule  # noqa: E402

from md_accel.convert import ConversionMismatch, compare_to_reference  # noqa: E402
from md_accel.convert.sevenn import (  # noqa: E402
    KNOWN_MODELS, UnsupportedSevenNetModel, convert_sevenn, load_sevenn, resolve_checkpoint, sevenn_calculator)
from md_accel.convert.structures import (  # noqa: E402
    bulk_fcc, isolated_atom, rocksalt, slab, standard_structures, triclinic)
from md_accel.convert.verify import evaluate_potential, neighbor_graph  # noqa: E402
from md_accel.model import build, energy_forces_virial  # noqa: E402
from nve_testing import nve_energy_excursion  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # tiny graphs: thread start-up dominates, and oversubscribed cores make it much worse
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def structures():
    rng = np.random.default_rng(1)
    mol = molecule("CH3CH2OH")
    mol.positions += rng.normal(scale=0.05, size=mol.positions.shape)
    return {
        "bulk_Cu": bulk_fcc("Cu", rng),
        "oxide_MgTiO": rocksalt(["Mg", "O", "Ti"], rng),
        "ethanol": mol,
        "triclinic_SiC": triclinic(["Si", "C"], rng),
        "isolated_O": isolated_atom("O"),
    }


@pytest.fixture(scope="module")
def sources():
    return {}


def _source(sources, name, dtype=torch.float64):
    key = (name, dtype)
    if key not in sources:
        sources[key] = load_sevenn(name, dtype)
    return sources[key]


@pytest.mark.parametrize("name", ["sevennet-0", "sevennet-l3i5"])
def test_float64_matches_sevenn(sources, name):
    src = _source(sources, name)
    pot = convert_sevenn(src)
    assert pot.cutoff == 5.0 and pot.num_layers == 5 and len(pot.elements) == 89
    rows = compare_to_reference(sevenn_calculator(src), pot, structures())
    assert all(r["rel_err"] <= 1e-9 for r in rows)
    compared = {(r["structure"], r["quantity"]) for r in rows}
    assert ("oxide_MgTiO", "stress") in compared and ("triclinic_SiC", "stress") in compared
    assert ("ethanol", "forces") in compared and ("ethanol", "stress") not in compared
    # non-trivial references: forces and stress really are compared, not zeros
    assert max(r["ref_max"] for r in rows if r["quantity"] == "forces") > 0.1
    assert max(r["ref_max"] for r in rows if r["quantity"] == "stress") > 1e-3


def test_unnormalized_sh_checkpoint_matches_sevenn(sources):
    # SevenNet-0 (22 May 2024) feeds unnormalised edge vectors to its spherical harmonics
    src = _source(sources, "sevennet-0-22may2024")
    assert src.config["_normalize_sph"] is False
    pot = convert_sevenn(src)
    assert pot.spec()["sh"]["normalize"] is False
    s = structures()
    compare_to_reference(sevenn_calculator(src), pot, {"oxide_MgTiO": s["oxide_MgTiO"], "ethanol": s["ethanol"]})


def test_multi_fidelity_modal_selection(sources):
    src = _source(sources, "sevennet-mf-0")
    s = structures()
    picked = {"bulk_Cu": s["bulk_Cu"], "isolated_O": s["isolated_O"]}
    energies = {}
    for modal in ("PBE", "R2SCAN"):
        pot = convert_sevenn(src, modal=modal.lower())  # case-insensitive
        compare_to_reference(sevenn_calculator(src, modal=modal), pot, picked)
        energies[modal] = evaluate_potential(pot, s["bulk_Cu"])["energy"]
    assert abs(energies["PBE"] - energies["R2SCAN"]) > 1e-3


def test_float32_matches_sevenn_float32(sources):
    src = _source(sources, "sevennet-0", torch.float32)
    pot = convert_sevenn(src, dtype=torch.float32)
    assert next(pot.parameters()).dtype == torch.float32
    rows = compare_to_reference(sevenn_calculator(src), pot, {"slab_Cu": slab("Cu", np.random.default_rng(2))})
    assert rows and all(r["tol"] >= 1e-5 for r in rows)


def test_torchscript_and_rebuild_from_spec(sources):
    pot = convert_sevenn(_source(sources, "sevennet-0"))
    graph = neighbor_graph(structures()["oxide_MgTiO"], pot.cutoff, pot.elements)
    ref = energy_forces_virial(pot, *graph)
    scripted = energy_forces_virial(torch.jit.script(pot), *graph)
    rebuilt_pot = build(pot.spec()).double()
    rebuilt_pot.load_state_dict(pot.state_dict())
    rebuilt = energy_forces_virial(rebuilt_pot, *graph)
    for out in (scripted, rebuilt):
        torch.testing.assert_close(out["energy"], ref["energy"], rtol=1e-12, atol=0)
        torch.testing.assert_close(out["forces"], ref["forces"], rtol=0, atol=1e-12)


def test_verify_detects_a_wrong_potential(sources):
    src = _source(sources, "sevennet-0")
    pot = convert_sevenn(src)
    with torch.no_grad():
        pot.layers[2].denominator.mul_(1 + 1e-6)
    with pytest.raises(ConversionMismatch) as err:
        compare_to_reference(sevenn_calculator(src), pot, {"bulk_Cu": structures()["bulk_Cu"]}, verbose=False)
    assert any(not r["ok"] for r in err.value.rows)


def test_unknown_name_lists_known_models():
    with pytest.raises(ValueError) as err:
        resolve_checkpoint("sevennet-7")
    for name in KNOWN_MODELS:
        assert name in str(err.value)
    assert resolve_checkpoint("7net-l3i5") == resolve_checkpoint("sevennet-l3i5")


def test_modal_errors(sources):
    src = _source(sources, "sevennet-mf-0")
    with pytest.raises(ValueError, match="PBE.*R2SCAN|R2SCAN.*PBE"):
        convert_sevenn(src)
    with pytest.raises(ValueError, match="unknown modal 'HSE'.*R2SCAN"):
        convert_sevenn(src, modal="HSE")
    with pytest.raises(ValueError, match="no modalities"):
        convert_sevenn(_source(sources, "sevennet-0"), modal="PBE")


@pytest.mark.parametrize("option, value", [("self_connection_type", "nequip"), ("interaction_type", "mace")])
def test_unsupported_option_is_named(tmp_path, option, value):
    cp = torch.load(resolve_checkpoint("sevennet-0"), weights_only=False, map_location="cpu")
    cp["config"][option] = value
    path = tmp_path / "modified.pth"
    torch.save(cp, path)
    with pytest.raises(UnsupportedSevenNetModel, match=option):
        convert_sevenn(path)


def test_standard_structures_are_deterministic_and_varied():
    a, b = standard_structures(["Cu", "O"], seed=3), standard_structures(["Cu", "O"], seed=3)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k].positions, b[k].positions)
    assert not a["triclinic"].cell.orthorhombic and a["triclinic"].pbc.all()
    assert not a["cluster"].pbc.any() and list(a["slab"].pbc) == [True, True, False]
    assert len(set(a["rocksalt"].get_chemical_symbols())) == 2
    for atoms in a.values():  # no atoms on top of each other
        if len(atoms) > 1:
            assert min(atoms.get_all_distances(mic=atoms.pbc.any())[np.triu_indices(len(atoms), 1)]) > 1.0


def test_nve_with_converted_sevennet0_conserves_energy():
    """The converted SevenNet-0's forces are the exact gradient of its energy, seen in dynamics:
    velocity Verlet then conserves a shadow Hamiltonian and the total energy only fluctuates, by
    an amount ~ dt^2 (measured over the same 120 fs: 2.6e-5 eV/atom at 2 fs, 1.05e-4 at 4 fs,
    ratio 4.02). Forces that are not the energy's gradient add or remove energy at a rate that does
    not shrink as dt^2. Bounds: 1e-4 eV/atom at 2 fs (4x the measured excursion, about 1 K of
    kinetic energy) and a 4 fs / 2 fs ratio in (3, 5.5)."""
    potential = convert_sevenn("sevennet-0", dtype=torch.float64)
    exc2, _ = nve_energy_excursion(potential, 2.0, 60, cells=1)  # 4 atoms
    exc4, _ = nve_energy_excursion(potential, 4.0, 30, cells=1)
    assert exc2 < 1e-4, exc2
    assert 3.0 < exc4 / exc2 < 5.5, (exc2, exc4)

