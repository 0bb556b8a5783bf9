"""Converted models in LAMMPS under `mpirun -np 1/2/4` against md_accel's ASE calculator
(energy, forces, virial): SevenNet-0 (5 layers, 89 elements) and the trained MACE of
models/mace_cu (2 layers). Cases: a triclinic periodic box (comm layer; SevenNet-0 on 2 ranks
also with recomputed layers; MACE also comm shell), on 4 ranks a slab cut so that some ranks own
no atom, and for SevenNet-0 a cluster in a non-periodic box in both comm modes (comm shell is
affordable there; in a periodic box its 25 A ghost shell would hold thousands of atoms).

The MACE file is converted with the mace-torch environment (.venv-mace, tools/env.sh mace)."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from lammps_cases import Case, ase_reference, max_diffs, run_cases
from lammps_toy_potentials import cluster, cu_ni, slab, write_data

ROOT = Path(__file__).resolve().parents[2]
MACE_PYTHON = ROOT / ".venv-mace" / "bin" / "python"
SYMBOLS = ("Ni", "Cu")   # elements of LAMMPS types 1 and 2
# float64 models: the comm modes and the calculator agree to round-off (measured <= 1.2e-13)
TOL = {"energy": 1e-8, "forces": 1e-9, "virial": 1e-8}


def named(structure, symbols=SYMBOLS):
    atoms, types = structure
    atoms.set_chemical_symbols([symbols[t - 1] for t in types])
    return atoms, types


@pytest.fixture(scope="module")
def sevennet0(tmp_path_factory):
    pytest.importorskip("sevenn")
    from md_accel import io
    from md_accel.convert.sevenn import convert_sevenn, load_sevenn

    path = tmp_path_factory.mktemp("sevennet0") / "sevennet0.mdx"
    io.save(convert_sevenn(load_sevenn("sevennet-0", torch.float64)), path)
    return path


@pytest.fixture(scope="module")
def mace_cu(tmp_path_factory):
    ok = MACE_PYTHON.exists() and subprocess.run([str(MACE_PYTHON), "-c", "import mace"],
                                                 capture_output=True).returncode == 0
    if not ok:
        pytest.skip("mace-torch environment .venv-mace missing (tools/env.sh mace)")
    path = tmp_path_factory.mktemp("mace_cu") / "mace_cu.mdx"
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([str(MACE_PYTHON), "-m", "md_accel", "convert",
                           str(ROOT / "models" / "mace_cu" / "mace_cu.model"), "-o", str(path)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return path


@pytest.mark.parametrize("name", ["sevennet0", "mace_cu"])
def test_layered_interface_composes_node_energies(request, name):
    """What comm layer relies on, on the saved TorchScript: embed, interaction and
    readout_energies give node_energies bit for bit, with the widths feature_dims announces."""
    from ase.neighborlist import neighbor_list

    archive = torch.jit.load(str(request.getfixturevalue(name)))
    atoms, _ = named(cu_ni(True, seed=7, n=2), ("Cu", "Cu") if name == "mace_cu" else SYMBOLS)
    i, j, shift = neighbor_list("ijS", atoms, archive.cutoff)
    vec = torch.tensor(atoms.positions[j] - atoms.positions[i] + shift @ atoms.cell.array)
    species = torch.tensor([archive.elements.index(s) for s in atoms.get_chemical_symbols()])
    src, dst = torch.tensor(j), torch.tensor(i)
    dims = archive.feature_dims()
    edge_feats = archive.edge_features(species, vec, src, dst)
    h = archive.embed(species)
    features = []
    for k in range(archive.num_layers):
        assert h.shape == (len(atoms), dims[k])
        h = archive.interaction(k, h, species, edge_feats, src, dst, archive.receiver_graph(src, dst, len(atoms)))
        features.append(h)
    assert h.shape == (len(atoms), dims[-1])
    layered = archive.readout_energies(species, features, edge_feats, src, dst)
    assert torch.equal(layered, archive.node_energies(species, vec, src, dst))


def prepare(model, structures, workdir):
    """Data files and calculator references: name -> (data path, reference)."""
    out = {}
    for name, (atoms, types) in structures.items():
        out[name] = (write_data(workdir / f"{name}.lmp", atoms, types), ase_reference(model, atoms))
    return out


def check(got, refs, cases):
    """Every case against the calculator; the two modes of a structure against each other."""
    diffs = {}
    for case in cases:
        name = case.tag.split("-")[0]
        r = got[case.tag]
        assert r["mode"] == case.tag.split("-")[1].replace("recompute", "layer")
        diffs[case.tag] = d = max_diffs(r, refs[name][1])
        for key, value in d.items():
            assert value < TOL[key], (case.tag, d)
        shell = got.get(f"{name}-shell")
        if shell is not None and r["mode"] != "shell":
            assert np.abs(r["forces"] - shell["forces"]).max() < TOL["forces"]
    assert max(np.abs(ref["forces"]).max() for _, ref in refs.values()) > 0.1
    return diffs


@pytest.fixture(scope="module")
def sevennet0_refs(sevennet0, tmp_path_factory):
    structures = {"triclinic": named(cu_ni(True, seed=5, n=2)),
                  "cluster": named(cluster(seed=5, symbols=SYMBOLS)),
                  "slab": named(slab(seed=5))}
    return prepare(sevennet0, structures, tmp_path_factory.mktemp("sevennet0_data"))


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_sevennet0(run_lmp, tmp_path, sevennet0, sevennet0_refs, nprocs):
    symbols = " ".join(SYMBOLS)
    data = {name: d for name, (d, _) in sevennet0_refs.items()}
    cases = [Case("triclinic-layer", data["triclinic"], sevennet0, symbols, "comm layer"),
             Case("cluster-layer", data["cluster"], sevennet0, symbols, "comm layer", boundary="f f f"),
             Case("cluster-shell", data["cluster"], sevennet0, symbols, "comm shell", boundary="f f f")]
    if nprocs == 2:
        cases.append(Case("triclinic-recompute", data["triclinic"], sevennet0, symbols,
                          "comm layer recompute yes"))
    if nprocs == 1:
        cases += [Case("triclinic-none", data["triclinic"], sevennet0, symbols, ""),
                  Case("cluster-none", data["cluster"], sevennet0, symbols, "comm none", boundary="f f f")]
    if nprocs == 4:
        cases.append(Case("slab-layer", data["slab"], sevennet0, symbols, "comm layer", "* 1 1"))
    got = run_cases(run_lmp, tmp_path, cases, nprocs)
    check(got, sevennet0_refs, cases)
    if nprocs == 4:
        assert got["slab-layer"]["min_owned"] == 0


@pytest.fixture(scope="module")
def mace_refs(mace_cu, tmp_path_factory):
    structures = {"triclinic": named(cu_ni(True, seed=6, n=2), ("Cu", "Cu")),
                  "slab": named(slab(seed=6), ("Cu", "Cu"))}
    return prepare(mace_cu, structures, tmp_path_factory.mktemp("mace_data"))


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_mace(run_lmp, tmp_path, mace_cu, mace_refs, nprocs):
    data = {name: d for name, (d, _) in mace_refs.items()}
    cases = [Case("triclinic-layer", data["triclinic"], mace_cu, "Cu Cu", "comm layer"),
             Case("triclinic-shell", data["triclinic"], mace_cu, "Cu Cu", "comm shell")]
    if nprocs == 1:
        cases.append(Case("triclinic-none", data["triclinic"], mace_cu, "Cu Cu", ""))
    if nprocs == 4:
        cases.append(Case("slab-layer", data["slab"], mace_cu, "Cu Cu", "comm layer", "* 1 1"))
    got = run_cases(run_lmp, tmp_path, cases, nprocs)
    check(got, mace_refs, cases)
    if nprocs == 4:
        assert got["slab-layer"]["min_owned"] == 0
