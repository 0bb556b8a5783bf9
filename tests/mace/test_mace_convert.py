"""mace-torch 0.3.16 models converted to md_accel and compared with mace's own MACECalculator
(float64): the trained models/mace_cu model and random small H/O/Cu models of every supported
variant, built here with models/build_mace_mp0_medium_shape.py. Also: forces against finite
differences, rotation equivariance, refusals, and loading the file without mace / e3nn."""
import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

mace_modules = pytest.importorskip("mace.modules")
from ase import Atoms  # noqa: E402

import md_accel  # noqa: E402
from md_accel import io  # noqa: E402
from md_accel.convert import ConversionMismatch  # noqa: E402
from md_accel.convert.mace import UnsupportedMACEModel, convert_mace, mace_calculator  # noqa: E402
from md_accel.convert.structures import bulk_fcc, cluster, rocksalt  # noqa: E402
from md_accel.convert.verify import evaluate_calculator, evaluate_potential  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MACE_CU = ROOT / "models" / "mace_cu" / "mace_cu.model"
MAIN_PYTHON = ROOT / ".venv" / "bin" / "python"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _builder():
    spec = importlib.util.spec_from_file_location("build_mace", ROOT / "models" / "build_mace_mp0_medium_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _small(path, plain_mace=False, **overrides):
    """A random small (H, O, Cu) float64 model saved to ``path`` as mace does (torch.save)."""
    builder = _builder()
    if plain_mace:  # MACE without scale/shift: same constructor minus the two arguments
        builder.ScaleShiftMACE = lambda atomic_inter_scale, atomic_inter_shift, **kw: mace_modules.MACE(**kw)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = builder.build("small", seed=3, **overrides)
    finally:
        torch.set_default_dtype(old)
    torch.save(model, path)
    return model


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1.0))


def _mixed_cell():
    atoms = rocksalt(["Cu", "O", "H"], np.random.default_rng(5)).repeat((2, 1, 1))
    atoms.rattle(0.05, seed=7)
    return atoms


VARIANTS = {  # MACE-MP-0-like (residual, max_ell 3); mace_run_train's default first layer;
    # MP-0b2-like density + Agnesi; apply_cutoff=False; plain MACE with ZBL; odd-parity hidden
    # irreps (conv paths with odd l1+l2+l3, where e3nn 0.4.4's 3j sign differs from md_accel's)
    "residual": dict(),
    "plain_first": dict(plain_first=True, max_ell=2),
    "density_agnesi": dict(interaction_cls_first=mace_modules.RealAgnosticDensityInteractionBlock,
                           interaction_cls=mace_modules.RealAgnosticDensityResidualInteractionBlock,
                           distance_transform="Agnesi", max_ell=1),
    "no_apply_cutoff": dict(apply_cutoff=False, max_ell=2,
                            interaction_cls_first=mace_modules.RealAgnosticDensityInteractionBlock),
    "mace_zbl": dict(plain_mace=True, pair_repulsion=True, max_ell=2),
    "odd_parity": dict(hidden_irreps="8x0e+8x0o+8x1o+8x1e", max_ell=2, correlation=2),
}


def test_mace_cu_converts_and_matches(tmp_path):
    out = tmp_path / "cu.mdx"
    meta = md_accel.convert(MACE_CU, out)
    assert meta["provenance"]["library"] == "mace-torch"
    assert max(meta["provenance"]["verification"]["max_rel_err"].values()) <= 1e-9
    pot = io.load(out)
    assert pot.elements == ["Cu"] and pot.cutoff == 4.5 and pot.num_layers == 2
    # an independent structure (32 atoms, strained), file round trip included
    atoms = bulk_fcc("Cu", np.random.default_rng(1), rattle=0.1).repeat((2, 2, 2))
    atoms.set_cell(atoms.cell * 0.98, scale_atoms=True)
    ours = evaluate_potential(pot, atoms)
    ref = evaluate_calculator(mace_calculator(torch.load(MACE_CU, weights_only=False)), atoms)
    for q in ("energy", "forces", "stress"):
        assert _rel(ours[q], ref[q]) <= 1e-9, q
    # the conversion shipped beside it (md-accel convert, float64; the GPU tests load it where the
    # installed e3nn cannot read the .model) is this model too
    shipped = evaluate_potential(io.load(MACE_CU.with_suffix(".mdx")), atoms)
    for q in ("energy", "forces", "stress"):
        assert _rel(shipped[q], ref[q]) <= 1e-9, q


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_small_models_match_mace(tmp_path, variant):
    src = tmp_path / "small.model"
    model = _small(src, **VARIANTS[variant])
    meta = md_accel.convert(src, tmp_path / "small.mdx", elements=["Cu", "O", "H"])
    assert max(meta["provenance"]["verification"]["max_rel_err"].values()) <= 1e-9
    pot = io.load(tmp_path / "small.mdx")
    assert pot.elements == ["H", "O", "Cu"]
    atoms = _mixed_cell()
    if variant == "mace_zbl":  # compressed, so that the pair term matters
        from md_accel.convert.verify import neighbor_graph

        atoms.set_cell(atoms.cell * 0.75, scale_atoms=True)
        species, vec, s, d = neighbor_graph(atoms, pot.cutoff, pot.elements)
        assert pot.zbl[0](species, vec.norm(dim=1), s, d).abs().max() > 0.1
    ours, ref = evaluate_potential(pot, atoms), evaluate_calculator(mace_calculator(model), atoms)
    for q in ("energy", "forces", "stress"):
        assert _rel(ours[q], ref[q]) <= 1e-9, q


def test_multi_head(tmp_path):
    src = tmp_path / "heads.model"
    model = _small(src, heads=["pbe", "r2scan"], atomic_inter_scale=[0.8, 1.3],
                   atomic_inter_shift=[0.1, -0.2], max_ell=1)
    model.atomic_energies_fn.atomic_energies = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.5, -6.0]],
                                                           dtype=torch.float64)
    torch.save(model, src)
    with pytest.raises(ValueError, match=r"2 heads.*\['pbe', 'r2scan'\]"):
        md_accel.convert(src, tmp_path / "x.mdx")
    with pytest.raises(ValueError, match=r"'dft' is not in this mace model; its heads: \['pbe', 'r2scan'\]"):
        md_accel.convert(src, tmp_path / "x.mdx", head="dft")
    assert not (tmp_path / "x.mdx").exists()
    atoms = _mixed_cell()
    energies = []
    for head in model.heads:
        meta = md_accel.convert(src, tmp_path / f"{head}.mdx", head=head, elements=["Cu", "O", "H"])
        assert meta["provenance"]["head"] == head
        ours = evaluate_potential(io.load(tmp_path / f"{head}.mdx"), atoms)
        ref = evaluate_calculator(mace_calculator(model, head=head), atoms)
        assert _rel(ours["energy"], ref["energy"]) <= 1e-9 and _rel(ours["forces"], ref["forces"]) <= 1e-9
        energies.append(float(ours["energy"]))
    assert abs(energies[0] - energies[1]) > 1.0  # the heads really differ


def test_odd_paths_messages(tmp_path):
    """Messages of the second layer of an odd-parity model (paths (1, 2, 2), where e3nn 0.4.4's
    3j sign differs from md_accel's) equal mace's for random node features; energies alone
    hardly see these paths in a randomly initialised model."""
    model = _small(tmp_path / "odd.model", **VARIANTS["odd_parity"])
    pot = convert_mace(model)
    atoms = _mixed_cell()
    from md_accel.convert.verify import neighbor_graph

    species, edge_vec, src, dst = neighbor_graph(atoms, pot.cutoff, pot.elements)
    n = len(species)
    inter, layer = model.interactions[1], pot.layers[1]
    h = torch.randn(n, layer.linear_up.dim_in, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    onehot = torch.nn.functional.one_hot(species, 3).double()
    r = edge_vec.norm(dim=1)
    radial, _ = model.radial_embedding(r.unsqueeze(-1), onehot, torch.stack([src, dst]), model.atomic_numbers)
    ref = inter(node_attrs=onehot, node_feats=h, edge_attrs=model.spherical_harmonics(-edge_vec),
                edge_feats=radial, edge_index=torch.stack([src, dst]))[0]  # [n, C, sum of dims]
    ref = torch.cat([ref[:, :, o: o + ir.dim].reshape(n, -1)
                     for o, (_, ir) in zip(np.cumsum([0] + [ir.dim for _, ir in inter.target_irreps]),
                                           inter.target_irreps)], dim=1)
    ours_radial, env = pot.radial(r, species, src, dst)
    w = layer.radial_mlp(ours_radial * env.unsqueeze(-1))
    ours = layer.linear(layer.conv(layer.linear_up(h), pot.sh(-edge_vec), w, src, dst, n)) / layer.avg_num_neighbors
    flipped = [p for p, e in enumerate(inter.conv_tp.instructions)
               if (inter.conv_tp.irreps_in1[e.i_in1].ir.l + inter.conv_tp.irreps_in2[e.i_in2].ir.l
                   + inter.conv_tp.irreps_out[e.i_out].ir.l) == 5]
    assert flipped  # the model really has (1, 2, 2) paths
    assert (ours - ref).abs().max() <= 1e-12 * ref.abs().max()


@pytest.fixture(scope="module")
def small_potential(tmp_path_factory):
    src = tmp_path_factory.mktemp("small") / "small.model"
    return convert_mace(_small(src, max_ell=2))


def test_forces_are_minus_gradient(small_potential):
    atoms = cluster(["Cu", "O", "H"], np.random.default_rng(2), n=5)
    forces = evaluate_potential(small_potential, atoms)["forces"]
    h, fd = 1e-5, np.zeros_like(forces)
    for i in range(len(atoms)):
        for k in range(3):
            e = []
            for sign in (1, -1):
                a = atoms.copy()
                a.positions[i, k] += sign * h
                e.append(float(evaluate_potential(small_potential, a)["energy"]))
            fd[i, k] = -(e[0] - e[1]) / (2 * h)
    assert np.max(np.abs(fd - forces)) <= 1e-7 * max(np.max(np.abs(forces)), 1.0)


def test_rotation_equivariance(small_potential):
    atoms = cluster(["Cu", "O", "H"], np.random.default_rng(4), n=6)
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))
    rot = q * np.sign(np.linalg.det(q))  # proper rotation
    turned = Atoms(atoms.get_chemical_symbols(), positions=atoms.positions @ rot.T)
    a, b = evaluate_potential(small_potential, atoms), evaluate_potential(small_potential, turned)
    assert abs(float(a["energy"]) - float(b["energy"])) <= 1e-12 * abs(float(a["energy"]))
    assert np.max(np.abs(a["forces"] @ rot.T - b["forces"])) <= 1e-11 * np.max(np.abs(a["forces"]))
    assert np.max(np.abs(a["forces"])) > 1e-3


def test_refusals(tmp_path, monkeypatch):
    out = tmp_path / "out.mdx"
    corrupt = tmp_path / "corrupt.model"
    corrupt.write_bytes(MACE_CU.read_bytes()[:5000])
    with pytest.raises(ValueError, match="not a readable mace model file"):
        md_accel.convert(corrupt, out)
    other = tmp_path / "other.model"
    torch.save(torch.nn.Linear(2, 2), other)
    with pytest.raises(UnsupportedMACEModel, match="holds a Linear, not a mace model"):
        md_accel.convert(other, out)
    soft = tmp_path / "soft.model"
    _small(soft, distance_transform="Soft", max_ell=1)
    with pytest.raises(UnsupportedMACEModel, match="distance transform SoftTransform"):
        md_accel.convert(soft, out)
    with pytest.raises(ValueError, match="head= applies to multi-head MACE models only"):
        md_accel.convert(ROOT / "models" / "nequip_cu" / "nequip_cu_l1.ckpt", out, head="x")

    # a converted model that is off by a little is refused before anything is written
    import md_accel.convert.mace as conv

    def off(*args, **kwargs):
        pot = convert_mace(*args, **kwargs)
        with torch.no_grad():
            pot.layers[1].product_linear.weight[0] += 1e-6
        return pot

    monkeypatch.setattr(conv, "convert_mace", off)
    with pytest.raises(ConversionMismatch):
        md_accel.convert(MACE_CU, out)
    assert not out.exists()


def test_cli_and_load_without_mace(tmp_path):
    """``md-accel convert`` writes a float32 file that the main venv (md_accel, no mace / e3nn
    0.4.4) loads and evaluates to the energy computed here."""
    from md_accel.cli import main

    out = tmp_path / "cu32.mdx"
    assert main(["convert", str(MACE_CU), "-o", str(out), "--dtype", "float32"]) == 0
    meta = io.info(out)
    assert meta["dtype"] == "float32" and meta["spec"]["type"] == "mace"
    atoms = bulk_fcc("Cu", np.random.default_rng(3))
    energy = float(evaluate_potential(io.load(out), atoms)["energy"])
    if not MAIN_PYTHON.exists():
        pytest.skip("no main venv (.venv) to load the file without mace")
    code = ("import sys, json, numpy as np; from ase import Atoms; from md_accel import io; "
            "from md_accel.convert.verify import evaluate_potential; "
            "d = json.loads(sys.argv[2]); "
            "a = Atoms(d['symbols'], positions=d['pos'], cell=d['cell'], pbc=True); "
            "print(json.dumps({'e': float(evaluate_potential(io.load(sys.argv[1]), a)['energy']), "
            "'mace': 'mace' in sys.modules, 'e3nn': 'e3nn' in sys.modules}))")
    payload = json.dumps({"symbols": atoms.get_chemical_symbols(), "pos": atoms.positions.tolist(),
                          "cell": atoms.cell.array.tolist()})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([str(MAIN_PYTHON), "-c", code, str(out), payload], capture_output=True, text=True,
                         cwd=str(ROOT), env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert not got["mace"] and not got["e3nn"]
    assert abs(got["e"] - energy) <= 1e-6 * abs(energy)
