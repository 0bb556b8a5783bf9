"""Shared fixtures: the test Lennard-Jones potential (tests/lj_potential.py), as a module and as
a model file, and ASE's own Lennard-Jones calculator with the same parameters."""
import pytest
from lj_potential import LJ


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
