"""NVE energy conservation through md_accel's ASE calculator, shared by the tests of the
calculator (Lennard-Jones) and of converted models."""
import numpy as np
from ase import units
from ase.build import bulk
from ase.md.verlet import VelocityVerlet

from md_accel.calculator import Calculator


def nve_energy_excursion(potential, timestep_fs: float, steps: int, cells: int = 3):
    """Velocity-Verlet NVE of an fcc Cu box of ``cells``^3 cubic cells started at ~600 K
    (thermalises to ~300 K) on the CPU: (largest |E_total - E_total(0)| per atom, fitted drift
    in eV/atom/ps)."""
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat(cells)
    atoms.set_momenta(np.random.default_rng(7).normal(size=(len(atoms), 3)) * np.sqrt(
        atoms.get_masses()[:, None] * units.kB * 600))
    atoms.set_momenta(atoms.get_momenta() - atoms.get_momenta().mean(0))
    atoms.calc = Calculator(potential, device="cpu", skin=0.5)
    dyn = VelocityVerlet(atoms, timestep_fs * units.fs)
    energy = []
    dyn.attach(lambda: energy.append(atoms.get_total_energy() / len(atoms)))
    dyn.run(steps)
    energy = np.array(energy)
    slope = np.polyfit(np.arange(len(energy)) * timestep_fs * 1e-3, energy, 1)[0]
    return np.abs(energy - energy[0]).max(), slope
