"""The wheel's `lmp` under `mpirun -np 1/2/4`: the comm modes of pair_style md_accel (none, the
default on one rank: ghosts replaced by their owned atoms in the graph; layer: one-cutoff ghosts and
per-layer feature exchange, with and without recomputed layers; shell: a num_layers x cutoff ghost
shell) give the Python reference's energy, forces and virial for a 3-layer message-passing model, on
an orthogonal box, a triclinic box and a slab cut so that ranks own no atom. MD in comm layer on 4
ranks (reneighbouring, atoms changing ranks) and in comm none on one rank follow the single-rank
comm layer trajectory. A model file claiming one layer too few shows that the comparisons catch a
too-shallow ghost shell."""
import re

import numpy as np
import pytest

from lammps_cases import Case, nve, run_cases, thermo
from lammps_toy_potentials import (SYMBOLS, TYPE_TO_SPECIES, MessagePassingToy, cu_ni, reference,
                                   save_mdx, slab, write_data)

STRUCTURES = {"orthogonal": lambda: cu_ni(False, seed=2), "triclinic": lambda: cu_ni(True, seed=2),
              "slab": lambda: slab(seed=2)}
CUTOFF, LAYERS, SKIN = 4.5, 3, 2.0


def toy(tmp_path, **header):
    return save_mdx(MessagePassingToy(["Cu", "Ni"], cutoff=CUTOFF, num_layers=LAYERS),
                    tmp_path / "model.mdx", **header)


def test_host_threads_give_the_same_bits(run_lmp, tmp_path):
    """OMP_NUM_THREADS=2: the graph is built from LAMMPS' list on two host threads (each a range of receivers,
    lammps_plugin/edge_collector.h), the same edges in the same order, so every comm mode gives the same bits
    as on one thread; the log names the threads used. 5,324 atoms: two ranges of at least 2,048 receivers."""
    model = toy(tmp_path)
    atoms, types = cu_ni(False, seed=3, n=11)
    data = write_data(tmp_path / "big.lmp", atoms, types)
    cases = [Case(tag, data, model, SYMBOLS, style) for tag, style in
             (("none", ""), ("layer", "comm layer"), ("shell", "comm shell"))]
    got = {n: run_cases(run_lmp, tmp_path, cases, 1, env={"OMP_NUM_THREADS": str(n)}) for n in (1, 2)}
    for case in cases:
        one, two = got[1][case.tag], got[2][case.tag]
        assert (one["host_threads"], two["host_threads"]) == (1, 2)
        assert one["energy"] == two["energy"], case.tag
        assert np.array_equal(one["forces"], two["forces"]), case.tag
        assert np.array_equal(one["virial"], two["virial"]), case.tag
    assert np.abs(got[1]["none"]["forces"]).max() > 0.1


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_comm_modes_match_reference(run_lmp, tmp_path, nprocs):
    model = toy(tmp_path)
    cases, want = [], {}
    for name, make in STRUCTURES.items():
        atoms, types = make()
        data = write_data(tmp_path / f"{name}.lmp", atoms, types)
        want[name] = reference(model, atoms, TYPE_TO_SPECIES[types - 1])
        grid = "* 1 1" if name == "slab" else "* * *"
        # no keyword: comm none on one rank, else comm layer (the model exports the layered interface)
        cases += [Case(f"{name}-default", data, model, SYMBOLS, "", grid),
                  Case(f"{name}-recompute", data, model, SYMBOLS, "comm layer recompute yes", grid),
                  Case(f"{name}-shell", data, model, SYMBOLS, "comm shell", grid)]
        if nprocs == 1:
            cases.append(Case(f"{name}-layer", data, model, SYMBOLS, "comm layer", grid))
    got = run_cases(run_lmp, tmp_path, cases, nprocs)
    for case in cases:
        r, w = got[case.tag], want[case.tag.split("-")[0]]
        mode = "shell" if "shell" in case.style else "layer" if "layer" in case.style or nprocs > 1 else "none"
        assert r["mode"] == mode
        assert r["ghost_cutoff"] == pytest.approx(LAYERS * CUTOFF + SKIN if mode == "shell" else CUTOFF + SKIN)
        assert abs(r["energy"] - w["energy"]) < 1e-10
        np.testing.assert_allclose(r["forces"], w["forces"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(r["virial"], w["virial"], rtol=1e-9, atol=1e-9)
    assert max(np.abs(w["forces"]).max() for w in want.values()) > 0.1
    if nprocs == 4:
        assert got["slab-default"]["min_owned"] == 0   # a rank without atoms takes part


def test_exchange_device_needs_cuda(run_lmp, tmp_path):
    """exchange device asked for where the rows cannot stay on GPUs (the model on the CPU): an error
    that says why, on every rank (tests/lammps/test_lammps_cuda.py runs it on a GPU). It is LAMMPS'
    collective error, reported once by rank 0, not re-raised per rank as a failed evaluation (an
    MPI_Abort that could end the job before rank 0's message was written)."""
    atoms, types = cu_ni(False, seed=5)
    data = write_data(tmp_path / "data.lmp", atoms, types)
    case = Case("cpu", data, toy(tmp_path), SYMBOLS, "device cpu comm layer exchange device")
    with pytest.raises(AssertionError, match="exchange device: (the model is not on CUDA|this plugin was built against)") as err:
        run_cases(run_lmp, tmp_path, [case], 2)
    log = str(err.value)
    assert log.count("ERROR") == 1 and "MPI_Abort" not in log, log


def test_float32_rows(run_lmp, tmp_path):
    """float32 features travel as raw bytes, two per double: an odd width (7) leaves a half-used
    double per row. 4 ranks, comm layer, against the float64 reference."""
    module = MessagePassingToy(["Cu", "Ni"], cutoff=CUTOFF, num_layers=LAYERS, features=7)
    want_model = save_mdx(module, tmp_path / "m64.mdx")
    model = save_mdx(module, tmp_path / "m32.mdx", dtype="float32")
    atoms, types = cu_ni(True, seed=3)
    data = write_data(tmp_path / "data.lmp", atoms, types)
    want = reference(want_model, atoms, TYPE_TO_SPECIES[types - 1])
    got = run_cases(run_lmp, tmp_path, [Case("f32", data, model, SYMBOLS, "comm layer")], 4)["f32"]
    scale = np.abs(want["forces"]).max()
    assert abs(got["energy"] - want["energy"]) < 2e-5 * abs(want["energy"])
    np.testing.assert_allclose(got["forces"], want["forces"], rtol=0, atol=2e-5 * scale)


MD = """
units metal
atom_style atomic
read_data data.lmp
mass 1 58.693
mass 2 63.546
pair_style md_accel {style}
pair_coeff * * model.mdx {symbols}
""" + nve(0.5, 1200.0, 12345) + "run 100\n"


def test_md_modes_follow_single_rank(run_lmp, tmp_path):
    atoms, types = cu_ni(triclinic=True, seed=4)
    toy(tmp_path)
    write_data(tmp_path / "data.lmp", atoms, types)
    one = run_lmp(MD.format(style="comm layer", symbols=SYMBOLS), nprocs=1).stdout
    four = run_lmp(MD.format(style="comm layer", symbols=SYMBOLS), nprocs=4).stdout
    none = run_lmp(MD.format(style="comm none", symbols=SYMBOLS), nprocs=1).stdout
    a, b, c = thermo(one), thermo(four), thermo(none)
    assert a.shape == b.shape == c.shape == (11, 3)
    for log in (four, none):
        builds = int(re.search(r"Neighbor list builds = (\d+)", log).group(1))
        assert builds >= 3, builds         # border atoms / owners re-found after every rebuild
    assert np.ptp(a[:, 1]) > 0.5            # eV: the atoms really moved
    np.testing.assert_allclose(b[:, 1:], a[:, 1:], rtol=0, atol=1e-8)
    np.testing.assert_allclose(c[:, 1:], a[:, 1:], rtol=0, atol=1e-8)


def test_comm_none_needs_one_rank(run_lmp, tmp_path):
    atoms, types = cu_ni(triclinic=False, seed=4)
    toy(tmp_path)
    write_data(tmp_path / "data.lmp", atoms, types)
    proc = run_lmp(MD.format(style="comm none", symbols=SYMBOLS), nprocs=2, check=False)
    assert proc.returncode != 0
    assert "comm none needs one MPI rank" in proc.stdout


def test_too_shallow_ghost_shell_is_caught(run_lmp, tmp_path):
    """Control: the 3-layer model with a header claiming 2 layers gets a 2-layer shell and
    visibly wrong forces, so the comparisons above do test the shell depth."""
    atoms, types = cu_ni(False, seed=2)
    model = toy(tmp_path, num_layers=LAYERS - 1)
    data = write_data(tmp_path / "data.lmp", atoms, types)
    want = reference(model, atoms, TYPE_TO_SPECIES[types - 1])
    got = run_cases(run_lmp, tmp_path, [Case("shallow", data, model, SYMBOLS, "comm shell")], 2)
    assert np.abs(got["shallow"]["forces"] - want["forces"]).max() > 1e-5


def test_needs_plugin_path(run_lmp, tmp_path):
    proc = run_lmp("units metal\npair_style md_accel\n", autoload=False, check=False)
    assert proc.returncode != 0
    assert "Unrecognized pair style 'md_accel'" in proc.stdout
