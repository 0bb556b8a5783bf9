"""EMT-labelled fcc copper configurations for training a small MACE model.

Writes extxyz files with the keys mace-torch reads by default: ``REF_energy`` (info),
``REF_forces`` (arrays), ``REF_stress`` (info, Voigt, eV/A^3; only for fully periodic cells)
and ``config_type``. The isolated atom is tagged ``IsolatedAtom`` so mace takes its energy as E0.

    python make_data.py --out DIR [--seed 0]
"""

import argparse
from pathlib import Path

import numpy as np
from ase import Atoms
from ase.build import bulk, fcc100, fcc111
from ase.calculators.emt import EMT
from ase.cluster import Icosahedron, Octahedron
from ase.io import write

A_CU = 3.61


def _label(atoms, config_type, with_stress):
    atoms.calc = EMT()
    atoms.info["REF_energy"] = atoms.get_potential_energy()
    atoms.arrays["REF_forces"] = atoms.get_forces()
    if with_stress:
        atoms.info["REF_stress"] = atoms.get_stress()
    atoms.info["config_type"] = config_type
    atoms.calc = None
    return atoms


def _strained(rng, scale, shear):
    """32-atom cubic cell, isotropic scale plus a random symmetric shear strain."""
    atoms = bulk("Cu", "fcc", a=A_CU, cubic=True).repeat((2, 2, 2))
    eps = rng.uniform(-shear, shear, (3, 3))
    strain = np.eye(3) * scale + 0.5 * (eps + eps.T)
    atoms.set_cell(atoms.cell.array @ strain, scale_atoms=True)
    return atoms


def bulk_configs(rng):
    """Rattled bulk at increasing amplitude ('temperatures') and strains, plus a vacancy."""
    out = []
    for sigma in (0.02, 0.05, 0.10, 0.15):
        for scale in (0.97, 0.99, 1.0, 1.01, 1.03):
            for _ in range(2):
                atoms = _strained(rng, scale, 0.01)
                atoms.rattle(stdev=sigma, seed=int(rng.integers(1 << 30)))
                out.append(_label(atoms, "bulk", True))
    for sigma in (0.02, 0.08):
        for _ in range(3):
            atoms = _strained(rng, 1.0, 0.005)
            del atoms[int(rng.integers(len(atoms)))]
            atoms.rattle(stdev=sigma, seed=int(rng.integers(1 << 30)))
            out.append(_label(atoms, "vacancy", True))
    return out


def surface_configs(rng):
    """(111) and (100) slabs with 8 A of vacuum (periodic in-plane), and small clusters."""
    out = []
    for builder in (fcc111, fcc100):
        for _ in range(3):
            atoms = builder("Cu", size=(2, 2, 4), a=A_CU, vacuum=4.0, periodic=True)
            atoms.pbc = (True, True, False)
            atoms.info.pop("adsorbate_info", None)
            atoms.rattle(stdev=0.05, seed=int(rng.integers(1 << 30)))
            out.append(_label(atoms, "slab", False))
    for make in (lambda: Icosahedron("Cu", 2), lambda: Octahedron("Cu", 3, 1)):
        for _ in range(2):
            atoms = make()
            atoms.set_cell(np.zeros((3, 3)))
            atoms.pbc = False
            atoms.rattle(stdev=0.05, seed=int(rng.integers(1 << 30)))
            out.append(_label(atoms, "cluster", False))
    return out


def isolated_atom():
    return _label(Atoms("Cu", positions=[[0.0, 0.0, 0.0]], pbc=False), "IsolatedAtom", False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "data")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    configs = bulk_configs(rng) + surface_configs(rng)
    order = rng.permutation(len(configs))
    n_valid = len(configs) // 6
    valid = [configs[i] for i in order[:n_valid]]
    train = [isolated_atom()] + [configs[i] for i in order[n_valid:]]
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "train.xyz", train, format="extxyz")
    write(args.out / "valid.xyz", valid, format="extxyz")
    print(f"wrote {len(train)} train / {len(valid)} valid configurations to {args.out}")


if __name__ == "__main__":
    main()
