"""Molecular dynamics with pair_style md_accel: NVE conserves energy with the 2-layer model in a
triclinic box (forces are the exact gradient of the energy, also across neighbor-list rebuilds)."""
from pathlib import Path

import numpy as np
import pytest

from lammps_toy_potentials import SYMBOLS, MessagePassingToy, cu_ni, save_mdx, write_data



def test_nve_conserves_energy(lammps_in_process, tmp_path):
    atoms, types = cu_ni(triclinic=True, seed=4)
    model = save_mdx(MessagePassingToy(["Cu", "Ni"], cutoff=4.5, num_layers=2), tmp_path / "m.mdx")
    data = write_data(tmp_path / "data.lmp", atoms, types)
    log = tmp_path / "nve.txt"
    lmp = lammps_in_process()
    lmp.commands_string(f"""
        units metal
        atom_style atomic
        read_data {data}
        mass 1 58.693
        mass 2 63.546
        pair_style md_accel
        pair_coeff * * {model} {SYMBOLS}
        neighbor 0.5 bin
        neigh_modify every 1 delay 0 check yes
        velocity all create 600.0 12345 mom yes rot yes dist gaussian
        timestep 0.0005
        fix nve all nve
        fix out all print 5 "$(step) $(pe:%.15g) $(etotal:%.15g)" file {log} screen no
        run 300
    """)
    assert lmp.get_thermo("step") == 300
    step, pe, etotal = np.loadtxt(log, comments="#").T
    n = len(atoms)
    drift = np.abs(etotal - etotal[0]).max() / n
    swing = (pe.max() - pe.min()) / n
    assert swing > 5e-3                 # the atoms really moved (eV/atom)
    assert drift < 1e-4, (drift, swing)   # eV/atom over 150 fs (measured 5.1e-5)


def test_copper_example_runs(lammps_in_process, tmp_path):
    """examples/lammps/in.copper (NVT then NPT) on a small box: the box relaxes under NPT."""
    model = save_mdx(MessagePassingToy(["Cu", "Ni"], cutoff=4.5, num_layers=2), tmp_path / "m.mdx")
    example = Path(__file__).resolve().parents[2] / "examples" / "lammps" / "in.copper"
    lmp = lammps_in_process()
    for name, value in (("model", model), ("n", 3), ("steps", 20), ("T", 300.0)):
        lmp.command(f"variable {name} index {value}")  # index variables are not redefined
    lmp.file(str(example))
    assert lmp.get_thermo("step") == 40
    assert lmp.get_thermo("vol") != pytest.approx((3 * 3.61) ** 3, rel=1e-6)


def test_lammps_step_benchmark(lammps_setup, tmp_path):
    """benchmarks/lammps_step.py on the CPU: a row per style with a time, written to its JSON."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    model = save_mdx(MessagePassingToy(["Cu", "Ni"], cutoff=4.5, num_layers=2), tmp_path / "m.mdx")
    styles = "device cpu comm none;device cpu comm layer"
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "lammps_step.py"), "--model", str(model),
                           "--sizes", "108", "--styles", styles, "--warmup", "2", "--steps", "5",
                           "--out", str(tmp_path), "--tag", "t"],
                          env=lammps_setup.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert [r["style"] for r in rows] == styles.split(";")
    for r in rows:
        assert r["atoms"] == 108 and r["ms_per_step"] > 0 and r["captures"] == 0, r
