"""Molecular dynamics of fcc copper with an md_accel model through ASE.

    python examples/ase_md_copper.py MODEL [--cells 6] [--steps 2000] [--device cuda]

MODEL is an md_accel model file (.mdx), or a MACE / SevenNet / NequIP checkpoint, which is
first converted (and verified) into MODEL.mdx next to it. The script equilibrates at 300 K
with Langevin dynamics, then runs NVE, printing the speed and the energy drift.
"""
import argparse
import os
import time

import numpy as np
from ase import units
from ase.build import bulk
from ase.md.langevin import Langevin
from ase.md.verlet import VelocityVerlet

import md_accel.io
from md_accel.calculator import Calculator


def model_file(path: str) -> str:
    """``path`` if it is a model file, else convert the checkpoint once into ``<path>.mdx``."""
    try:
        md_accel.io.info(path)
        return path
    except md_accel.io.ModelFileError:
        pass
    target = os.path.splitext(path)[0] + ".mdx"
    if not os.path.exists(target):
        from md_accel.convert import convert  # reads the checkpoint with its own library

        print(f"converting {path} -> {target}")
        convert(path, target)
    return target


def run(dyn, atoms, steps: int, label: str) -> None:
    atoms.get_forces()  # first call: model on the device, neighbour list
    t0 = time.perf_counter()
    dyn.run(steps)
    wall = time.perf_counter() - t0
    ns_per_day = steps * dyn.dt / (1000 * units.fs) * 1e-3 / wall * 86400
    print(f"{label}: {steps} steps in {wall:.2f} s = {ns_per_day:.3g} ns/day, "
          f"{steps * len(atoms) / wall:.3g} atom-steps/s, T = {atoms.get_temperature():.0f} K")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--cells", type=int, default=6, help="N: box of N^3 cubic fcc cells, 4 N^3 atoms")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--timestep", type=float, default=2.0, help="fs")
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None, choices=["float32", "float64"])
    args = ap.parse_args()

    path = model_file(args.model)
    meta = md_accel.io.info(path)
    print(f"model {path}: {meta['spec']['type']}, elements {meta['elements']}, cutoff {meta['cutoff']} A")
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat(args.cells)
    atoms.rattle(0.01, seed=0)
    atoms.calc = Calculator(path, device=args.device, dtype=args.dtype)
    print(f"{len(atoms)} Cu atoms on {atoms.calc.device} ({atoms.calc.dtype})")

    dt = args.timestep * units.fs
    rng = np.random.default_rng(0)
    run(Langevin(atoms, dt, temperature_K=300, friction=0.02 / units.fs, fixcm=False, rng=rng), atoms,
        args.steps // 2, "Langevin 300 K")

    energies = []
    nve = VelocityVerlet(atoms, dt)
    nve.attach(lambda: energies.append(atoms.get_total_energy() / len(atoms)), interval=10)
    run(nve, atoms, args.steps // 2, "NVE")
    print(f"NVE total energy: max excursion {np.ptp(energies) * 1e3:.3f} meV/atom, "
          f"{atoms.calc.neighbors.num_builds} neighbour-list builds")


if __name__ == "__main__":
    main()
