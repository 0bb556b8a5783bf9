"""Shared fixtures: the test Lennard-Jones potential (tests/lj_potential.py), as a module and as
a model file, and ASE's own Lennard-Jones calculator with the same parameters."""
import pytest

# Lennard-Jones "copper": fcc a = 3.61 A is the energy minimum for these parameters.
LJ = {"epsilon": 0.409, "sigma": 2.338, "cutoff": 5.0, "onset": 4.0}


@pytest.fixture
def lj_potential():
    from lj_potential import LennardJones

    return LennardJones(["Cu"], [LJ["epsilon"]], LJ["sigma"], LJ["cutoff"], LJ["onset"])


@pytest.fixture
def lj_file(lj_potential, tmp_path):
    from md_accel.io import save

    path = tmp_path / "lj.mdx"
    save(lj_potential, path, {"source": "tests/lj_potential.py", "library": "md_accel-tests"})
    return path


@pytest.fixture
def ase_lj():
    from ase.calculators.lj import LennardJones

    return LennardJones(epsilon=LJ["epsilon"], sigma=LJ["sigma"], rc=LJ["cutoff"], ro=LJ["onset"], smooth=True)
