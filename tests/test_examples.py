"""The user-facing path end to end on the CPU, as a user runs it from a checkout: convert the
SevenNet-0 checkpoint shipped with sevenn (`md-accel convert`, verified against sevenn before it
writes), then `examples/ase_md_copper.py` and `md-accel md` on the converted file. Each runs as a
separate process, as from a shell."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("sevenn")
from ase.io import read  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run(*args, cwd):
    r = subprocess.run([sys.executable, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (args, r.stdout[-3000:], r.stderr[-3000:])
    return r.stdout


@pytest.fixture(scope="module")
def sevennet0(tmp_path_factory):
    d = tmp_path_factory.mktemp("sevennet0")
    out = _run("-m", "md_accel", "convert", "sevennet-0", "-o", "sevennet-0.mdx", cwd=d)
    assert "wrote sevennet-0.mdx" in out
    return d / "sevennet-0.mdx"


def test_example_ase_md_copper(sevennet0, tmp_path):
    out = _run(os.path.join(REPO, "examples", "ase_md_copper.py"), str(sevennet0), "--cells", "1", "--steps", "20",
               "--device", "cpu", cwd=tmp_path)
    assert "4 Cu atoms on cpu (torch.float64)" in out
    assert "Langevin 300 K: 10 steps" in out and "NVE: 10 steps" in out
    excursion = float(out.split("max excursion ")[1].split()[0])  # meV/atom
    assert excursion < 1.0, out  # 2 fs steps: 0.026 meV/atom measured (4 atoms, energy sampled every 10 steps)


def test_md_accel_md(sevennet0, tmp_path):
    out = _run("-m", "md_accel", "md", str(sevennet0), "--cu", "1", "--steps", "20", "--device", "cpu",
               "--ensemble", "nve", "--log", "md.log", "--log-every", "5", "--output", "md.extxyz",
               "--output-every", "10", "--quiet", cwd=tmp_path)
    assert "done: 20 steps" in out
    frames = read(tmp_path / "md.extxyz", index=":")
    assert len(frames) == 3 and all(len(f) == 4 for f in frames)  # steps 0, 10, 20
    rows = [line.split() for line in (tmp_path / "md.log").read_text().splitlines()[1:]]
    assert len(rows) == 5  # steps 0, 5, ..., 20
    total = [float(r[1]) for r in rows]  # Etot/N, eV
    assert max(total) - min(total) < 1e-3  # NVE
