"""pair_style md_accel on CUDA, one rank (skipped without a GPU; tools/gpu_lammps.sh --check runs it
with md_accel's op library preloaded): comm none replayed from a CUDA graph gives md_accel's CPU
calculator's energy, forces and virial (float64, the trained MACE copper model of models/mace_cu),
as does the uncaptured evaluation; in MD (neighbor-list rebuilds, then an expanded box whose edges
fall below the layout's range) the graphed trajectory follows the uncaptured one, re-capturing only then.
comm layer on several ranks sharing the GPU, its rows exchanged through CUDA IPC (exchange device) and
through the host: both give the calculator's results."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from lammps_cases import Case, ase_reference, max_diffs, nve, run_cases, thermo
from lammps_toy_potentials import (SYMBOLS, TYPE_TO_SPECIES, MessagePassingToy, cu_ni, reference, save_mdx,
                                   slab, write_data)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "mace_cu" / "mace_cu.mdx"   # float64
TOL = {"energy": 1e-8, "forces": 1e-9, "virial": 1e-8}
CAPTURE = re.compile(r"md_accel: CUDA graph capture (\d+): (\d+) atoms, (\d+) edges \(layout: (\d+) to (\d+) edges")


def copper(tmp_path, seed, n=3):
    """A rattled triclinic copper cell's data file, and md_accel's CPU calculator's results on it."""
    atoms, types = cu_ni(True, seed=seed, n=n)
    atoms.set_chemical_symbols(["Cu"] * len(atoms))
    return write_data(tmp_path / "data.lmp", atoms, types), ase_reference(MODEL, atoms)


def assert_match(got, cases, want):
    for case in cases:
        d = max_diffs(got[case.tag], want)
        for key, value in d.items():
            assert value < TOL[key], (case.tag, d)


def test_graph_matches_calculator(run_lmp, tmp_path):
    data, want = copper(tmp_path, seed=6, n=2)
    cases = [Case("graph", data, MODEL, "Cu Cu", "device cuda cuda_graph yes"),
             Case("eager", data, MODEL, "Cu Cu", "device cuda cuda_graph no"),
             Case("layer", data, MODEL, "Cu Cu", "device cuda comm layer")]
    got = run_cases(run_lmp, tmp_path, cases, 1)
    assert_match(got, cases, want)
    assert got["graph"]["mode"] == got["eager"]["mode"] == "none"
    assert got["graph"]["captures"] == 1 and not got["graph"]["warnings"], got["graph"]["warnings"]
    assert got["eager"]["captures"] == got["layer"]["captures"] == 0
    np.testing.assert_allclose(got["graph"]["forces"], got["eager"]["forces"], rtol=0, atol=1e-10)
    assert np.abs(want["forces"]).max() > 0.1


MD = """
units metal
atom_style atomic
lattice fcc 3.61
region box block 0 4 0 4 0 4
create_box 1 box
create_atoms 1 box
mass 1 63.546
pair_style md_accel device cuda cuda_graph {graph}
pair_coeff * * {model} Cu
""" + nve(0.3, 2400.0, 4928459) + """run 100
change_box all x scale 1.1 y scale 1.1 z scale 1.1 remap
run 100
"""


def test_md_graph_follows_uncaptured(run_lmp):
    graphed = run_lmp(MD.format(graph="yes", model=MODEL)).stdout
    eager = run_lmp(MD.format(graph="no", model=MODEL)).stdout
    a, b = thermo(graphed), thermo(eager)
    assert a.shape == b.shape == (22, 3)
    captures = CAPTURE.findall(graphed)
    builds = int(re.search(r"Neighbor list builds = (\d+)", graphed).group(1))
    warnings = [line for line in graphed.splitlines() if "WARNING" in line]
    # one capture, and one more where the expanded box's edges (about 4,600 of 10,700) left its layout
    assert len(captures) == 2 and builds >= 5, (captures, builds, warnings)
    (_, _, e1, lo, hi), (_, _, e2, _, _) = captures
    assert int(lo) <= int(e1) <= int(hi) and int(e2) < int(lo), captures
    assert not CAPTURE.findall(eager)
    assert np.ptp(a[:11, 1]) > 1.0                # eV: the atoms really moved
    np.testing.assert_allclose(a[:, 1:], b[:, 1:], rtol=0, atol=1e-8)
    drift = np.abs(a[:11, 2] - a[0, 2]).max() / 256
    assert drift < 2e-3, a[:11, 2]                 # eV/atom over 100 fs at 2400 K


@pytest.mark.parametrize("nprocs", [2, 3])
def test_layer_exchange_between_gpu_ranks(run_lmp, tmp_path, nprocs):
    """The ranks (here sharing one GPU) read each other's rows from device memory: the calculator's
    energy, forces and virial, as with the exchange through the host; the owners' sums of the ghosts'
    gradients run in a fixed order, so two runs give bitwise the same forces."""
    data, want = copper(tmp_path, seed=7)
    cases = [Case("device", data, MODEL, "Cu Cu", "device cuda comm layer exchange device"),
             Case("again", data, MODEL, "Cu Cu", "device cuda comm layer exchange device"),
             Case("host", data, MODEL, "Cu Cu", "device cuda comm layer exchange host")]
    got = run_cases(run_lmp, tmp_path, cases, nprocs)
    assert all(got[case.tag]["mode"] == "layer" for case in cases)
    assert_match(got, cases, want)
    np.testing.assert_array_equal(got["device"]["forces"], got["again"]["forces"])
    assert got["device"]["min_owned"] > 0


@pytest.mark.parametrize("structure", ["triclinic", "slab"])
def test_layer_exchange_three_layers(run_lmp, tmp_path, structure):
    """Four ranks on the GPU, a 3-layer toy model (two exchanges each way per step, so both halves of
    each rank's shared memory), the slab leaving a rank without atoms: the CPU reference's results."""
    model = save_mdx(MessagePassingToy(["Cu", "Ni"], cutoff=4.5, num_layers=3), tmp_path / "toy.mdx")
    atoms, types = cu_ni(True, seed=8) if structure == "triclinic" else slab(seed=8)
    data = write_data(tmp_path / "data.lmp", atoms, types)
    want = reference(model, atoms, TYPE_TO_SPECIES[types - 1])
    grid = "* 1 1" if structure == "slab" else "* * *"
    got = run_cases(run_lmp, tmp_path, [Case("d", data, model, SYMBOLS, "device cuda comm layer exchange device",
                                             grid)], 4)["d"]
    assert abs(got["energy"] - want["energy"]) < 1e-9
    np.testing.assert_allclose(got["forces"], want["forces"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(got["virial"], want["virial"], rtol=1e-9, atol=1e-9)
    if structure == "slab":
        assert got["min_owned"] == 0
