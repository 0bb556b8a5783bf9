"""NequIP 0.19.1 models (models/nequip_cu: l2 trained; l1 with parity, resnet, readout hidden
layer, trainable scale/shift and ZBL; l3), converted and compared with nequip's own ASE
calculator (float64 models, so float64 throughout)."""
import zipfile

import numpy as np
import pytest
import torch

pytest.importorskip("nequip")
from ase import Atoms  # noqa: E402

from md_accel import io  # noqa: E402
from md_accel.convert import ConversionMismatch, compare_to_reference, convert  # noqa: E402
from md_accel.convert.nequip import (  # noqa: E402
    UnsupportedNequIPModel, convert_nequip, nequip_calculator, source_from_calculator)
from md_accel.convert.structures import bulk_fcc, cluster, slab, triclinic  # noqa: E402
from md_accel.convert.verify import evaluate_potential, neighbor_graph  # noqa: E402
from md_accel.model import build, energy_forces_virial  # noqa: E402

MODELS = "models/nequip_cu/nequip_cu_{}{}"
FILES = [(v, ext) for v in ("l2", "l1", "l3") for ext in (".ckpt", ".nequip.zip")]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def loaded():
    """path -> (nequip calculator, converted potential); each file loaded once."""
    cache = {}

    def get(variant, ext=".ckpt"):
        path = MODELS.format(variant, ext)
        if path not in cache:
            calc = nequip_calculator(path)
            cache[path] = (calc, convert_nequip(source_from_calculator(calc, path)))
        return cache[path]

    return get


def structures():
    rng = np.random.default_rng(5)
    big = bulk_fcc("Cu", rng, rattle=0.1).repeat((2, 2, 1))
    return {"bulk_Cu": big, "slab_Cu": slab("Cu", rng), "cluster_Cu": cluster(["Cu"], rng, n=7),
            "triclinic_Cu": triclinic(["Cu"], rng)}


@pytest.mark.parametrize("variant, ext", FILES)
def test_float64_matches_nequip(loaded, variant, ext):
    calc, pot = loaded(variant, ext)
    rows = compare_to_reference(calc, pot, structures(), verbose=False)
    assert all(r["rel_err"] <= 1e-9 for r in rows)
    compared = {(r["structure"], r["quantity"]) for r in rows}
    assert ("triclinic_Cu", "stress") in compared and ("cluster_Cu", "forces") in compared
    assert ("slab_Cu", "stress") not in compared
    assert max(r["ref_max"] for r in rows if r["quantity"] == "forces") > 0.05
    assert max(r["ref_max"] for r in rows if r["quantity"] == "stress") > 1e-3


def test_variants_exercise_the_nequip_options(loaded):
    l1 = loaded("l1")[1].spec()
    assert [p["name"] for p in l1["pair"]] == ["zbl"]
    assert any("1e" in layer["irreps_in"] for layer in l1["layers"])  # parity: both 1o and 1e
    assert len(l1["readout"]["hs"]) == 3 and l1["irreps_embed"] == "12x0e"
    assert [layer["self_connection"]["kind"] for layer in l1["layers"]] == ["none"] + ["species_linear"] * 2
    assert loaded("l3")[1].spec()["sh"]["lmax"] == 3
    assert not loaded("l3")[1].spec()["radial_basis"]["trainable"]


def test_zbl_term_is_the_screened_coulomb_repulsion(loaded):
    # two Cu atoms at 1 A: the ZBL term alone, against the closed form
    pot = loaded("l1")[1]
    species = torch.zeros(2, dtype=torch.long)
    r = torch.tensor([1.0, 1.0], dtype=torch.float64)
    e = pot.pair[0](species, r, torch.tensor([1, 0]), torch.tensor([0, 1])).sum().item()
    x = 2 * 29 ** 0.23 * 1.0 / 0.46850
    psi = sum(c * np.exp(d * x) for c, d in [(0.02817, -0.20162), (0.28022, -0.40290), (0.50986, -0.94229),
                                             (0.18175, -3.19980)])
    p, u = 6.0, 1.0 / 4.5
    env = 1 - (p + 1) * (p + 2) / 2 * u ** p + p * (p + 2) * u ** (p + 1) - p * (p + 1) / 2 * u ** (p + 2)
    assert e == pytest.approx(14.399645 * 29 * 29 * psi * env, rel=1e-12)


@pytest.mark.parametrize("variant", ["l2", "l1"])
def test_forces_are_minus_the_energy_gradient(loaded, variant):
    pot = loaded(variant)[1]
    atoms = cluster(["Cu"], np.random.default_rng(3), n=5)
    forces = evaluate_potential(pot, atoms)["forces"]
    h = 1e-5
    for i, k in [(0, 0), (2, 1), (4, 2)]:
        e = []
        for s in (h, -h):
            a = atoms.copy()
            a.positions[i, k] += s
            e.append(float(evaluate_potential(pot, a)["energy"]))
        assert forces[i, k] == pytest.approx(-(e[0] - e[1]) / (2 * h), abs=1e-7)


def test_torchscript_and_rebuild_from_spec(loaded):
    pot = loaded("l1")[1]
    graph = neighbor_graph(structures()["bulk_Cu"], pot.cutoff, pot.elements)
    ref = energy_forces_virial(pot, *graph)
    rebuilt_pot = build(pot.spec()).double()
    rebuilt_pot.load_state_dict(pot.state_dict())
    for model in (torch.jit.script(pot), rebuilt_pot):
        out = energy_forces_virial(model, *graph)
        torch.testing.assert_close(out["energy"], ref["energy"], rtol=1e-12, atol=0)
        torch.testing.assert_close(out["forces"], ref["forces"], rtol=0, atol=1e-12)


def test_verify_detects_a_wrong_potential(loaded):
    calc, pot = loaded("l2")
    wrong = build(pot.spec()).double()
    wrong.load_state_dict(pot.state_dict())
    with torch.no_grad():
        wrong.layers[1].sender_scale.mul_(1 + 1e-6)  # avg_num_neighbors off by 2 ppm
    with pytest.raises(ConversionMismatch) as err:
        compare_to_reference(calc, wrong, {"bulk_Cu": structures()["bulk_Cu"]}, verbose=False)
    assert any(not r["ok"] for r in err.value.rows)


def test_convert_writes_a_verified_file(tmp_path):
    out = tmp_path / "cu_l3.mdx"
    dtype = torch.get_default_dtype()
    meta = convert(MODELS.format("l3", ".nequip.zip"), out)
    assert torch.get_default_dtype() == dtype  # nequip's global float64 default does not leak
    prov = meta["provenance"]
    assert prov["library"] == "nequip" and prov["verification"]["max_rel_err"]["forces"] <= 1e-9
    pot = io.load(out)
    atoms = Atoms("Cu2", positions=[[0, 0, 0], [0.3, 1.9, 1.2]])
    e_ref = nequip_calculator(MODELS.format("l3", ".nequip.zip"))
    atoms.calc = e_ref
    assert float(evaluate_potential(pot, atoms)["energy"]) == pytest.approx(atoms.get_potential_energy(), abs=1e-10)


def test_not_a_nequip_file(tmp_path):
    bogus = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}}, bogus)
    with pytest.raises(ValueError, match="not a nequip training checkpoint"):
        convert(bogus, tmp_path / "x.mdx")
    fake_zip = tmp_path / "model.nequip.zip"
    fake_zip.write_text("not a zip")
    with pytest.raises(ValueError, match="not a nequip package"):
        convert(fake_zip, tmp_path / "x.mdx")
    other = tmp_path / "model.xyz"
    other.write_text("")
    with pytest.raises(ValueError, match=r"\.nequip\.zip"):
        convert(other, tmp_path / "x.mdx")
    assert not (tmp_path / "x.mdx").exists()


def test_allegro_is_refused_by_name(tmp_path):
    ckpt = torch.load(MODELS.format("l3", ".ckpt"), map_location="cpu", weights_only=False)
    ckpt["hyper_parameters"]["info_dict"]["training_module"]["model"]["_target_"] = "allegro.model.AllegroModel"
    path = tmp_path / "allegro.ckpt"
    torch.save(ckpt, path)
    with pytest.raises(UnsupportedNequIPModel, match="Allegro models .* not supported yet"):
        convert(path, tmp_path / "x.mdx")
    # the same for a package: its model/config.yaml names the model
    src, dst = zipfile.ZipFile(MODELS.format("l3", ".nequip.zip")), tmp_path / "allegro.nequip.zip"
    with zipfile.ZipFile(dst, "w") as z:
        for name in src.namelist():
            data = src.read(name)
            if name.endswith("/model/config.yaml"):
                data = data.replace(b"nequip.model.NequIPGNNModel", b"allegro.model.AllegroModel")
            z.writestr(name, data)
    with pytest.raises(UnsupportedNequIPModel, match="Allegro"):
        convert(dst, tmp_path / "x.mdx")
    assert not (tmp_path / "x.mdx").exists()


def test_benchmark_shape_builds_and_converts(tmp_path):
    """models/build_nequip_shape.py (the benchmarks' NequIP model): nequip loads what it writes,
    with the requested shape, and the conversion's check passes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_nequip_shape", "models/build_nequip_shape.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    ckpt = tmp_path / "bench.ckpt"
    cfg = builder.build(str(ckpt), "benchmark", seed=3)
    assert {k: cfg[k] for k in builder.SHAPES["benchmark"]} == builder.SHAPES["benchmark"]
    calc = nequip_calculator(str(ckpt))
    pot = convert_nequip(source_from_calculator(calc, str(ckpt)))
    rows = compare_to_reference(calc, pot, {"bulk_Cu": structures()["bulk_Cu"]}, verbose=False)
    assert all(r["rel_err"] <= 1e-9 for r in rows)
    assert pot.cutoff == pytest.approx(5.0)
