"""Generate EMT-labelled fcc copper configurations for the small NequIP test model.

Writes train.xyz / val.xyz / test.xyz (extxyz with energy, forces, stress) into the
output directory. Deterministic for a given seed; runs in a few seconds.

Every frame is fully periodic (slab and cluster sit in a vacuum-padded box) so that all
frames carry a stress and nequip can batch them together.
"""

import argparse
from pathlib import Path

import numpy as np
from ase import units
from ase.build import bulk, fcc111
from ase.calculators.emt import EMT
from ase.calculators.singlepoint import SinglePointCalculator
from ase.cluster import Octahedron
from ase.io import write
from ase.md.langevin import Langevin
from ase.md.velocitydistribution import thermalize_momenta

A_CU = 3.61


def labelled(atoms):
    """Copy of `atoms` carrying EMT energy/forces/stress as a single-point result."""
    atoms = atoms.copy()
    atoms.calc = EMT()
    res = dict(
        energy=atoms.get_potential_energy(),
        forces=atoms.get_forces(),
        stress=atoms.get_stress(voigt=True),
    )
    out = atoms.copy()
    out.calc = SinglePointCalculator(out, **res)
    return out


def md_frames(atoms, temperature_k, n_frames, rng, equil=60, every=15, dt_fs=4.0):
    """Langevin MD with EMT; sample `n_frames` snapshots after equilibration."""
    atoms = atoms.copy()
    atoms.calc = EMT()
    thermalize_momenta(atoms, temperature_k, rng=rng)
    dyn = Langevin(
        atoms,
        dt_fs * units.fs,
        temperature_K=temperature_k,
        friction=0.05,
        fixcm=False,
        rng=rng,
    )
    dyn.run(equil)
    frames = []
    for _ in range(n_frames):
        dyn.run(every)
        frames.append(labelled(atoms))
    return frames


def strained(atoms, rng, max_normal, max_shear):
    """Random homogeneous strain (atoms scaled with the cell)."""
    eps = rng.uniform(-max_shear, max_shear, (3, 3))
    eps = 0.5 * (eps + eps.T)
    eps[np.diag_indices(3)] = rng.uniform(-max_normal, max_normal, 3)
    atoms = atoms.copy()
    atoms.set_cell(atoms.cell[:] @ (np.eye(3) + eps), scale_atoms=True)
    return atoms


def generate(seed=0):
    rng = np.random.default_rng(seed)
    bulk32 = bulk("Cu", "fcc", a=A_CU, cubic=True).repeat((2, 2, 2))
    frames = []
    # thermal bulk at several temperatures
    for t in (300, 700, 1200, 1800):
        frames += md_frames(bulk32, t, 10, rng)
    # strained + rattled bulk (compression reaches short distances)
    for _ in range(24):
        a = strained(bulk32, rng, max_normal=0.05, max_shear=0.03)
        a.rattle(stdev=rng.uniform(0.02, 0.12), rng=rng)
        frames.append(labelled(a))
    # vacancy
    vac = bulk32.copy()
    del vac[0]
    for t in (600, 1200):
        frames += md_frames(vac, t, 8, rng)
    # (111) slab with vacuum along z
    slab = fcc111("Cu", size=(2, 2, 4), a=A_CU, vacuum=6.0, periodic=True)
    slab.info.clear()
    frames += md_frames(slab, 500, 14, rng)
    # octahedral cluster (19 atoms) in a vacuum box
    cluster = Octahedron("Cu", 3, cutoff=1, latticeconstant=A_CU)
    cluster.center(vacuum=6.0)
    cluster.pbc = True
    frames += md_frames(cluster, 400, 14, rng)
    return frames


def split(frames, rng, n_val, n_test):
    idx = rng.permutation(len(frames))
    val = [frames[i] for i in idx[:n_val]]
    test = [frames[i] for i in idx[n_val : n_val + n_test]]
    train = [frames[i] for i in idx[n_val + n_test :]]
    return train, val, test


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(Path(__file__).parent / "data"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frames = generate(args.seed)
    train, val, test = split(frames, np.random.default_rng(args.seed + 1), 16, 16)
    for name, fr in (("train", train), ("val", val), ("test", test)):
        write(out / f"{name}.xyz", fr, format="extxyz")
    print(f"wrote {len(train)}/{len(val)}/{len(test)} frames to {out}")


if __name__ == "__main__":
    main()
