"""Small deterministic test structures for a list of elements, used to check conversions.

Covers what a converted model must get right: periodic images (bulk, triclinic cell), open
boundaries (slab, cluster), several species, and the edge-free limit (isolated atom). Geometries
use covalent radii so interatomic distances are physical for any element; positions are rattled
with a seeded generator so forces and stress are non-trivial.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
from ase import Atoms
from ase.data import atomic_numbers, covalent_radii


def _bond(a: str, b: str) -> float:
    return float(covalent_radii[atomic_numbers[a]] + covalent_radii[atomic_numbers[b]])


def bulk_fcc(element: str, rng: np.random.Generator, rattle: float = 0.05) -> Atoms:
    """Conventional 4-atom fcc cell, nearest neighbours at twice the covalent radius."""
    a = _bond(element, element) * np.sqrt(2.0)
    frac = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    atoms = Atoms(element * 4, scaled_positions=frac, cell=np.eye(3) * a, pbc=True)
    atoms.positions += rng.normal(scale=rattle, size=atoms.positions.shape)
    return atoms


def rocksalt(elements: Sequence[str], rng: np.random.Generator, rattle: float = 0.05) -> Atoms:
    """8-atom rocksalt cell of the first two elements; further elements replace cation sites."""
    a_el, b_el = elements[0], elements[1 % len(elements)]
    a = 2 * _bond(a_el, b_el)
    fcc = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    frac = np.vstack([fcc, fcc + 0.5]) % 1.0
    symbols = [a_el] * 4 + [b_el] * 4
    for k, extra in enumerate(elements[2:]):
        symbols[1 + k % 3] = extra
    atoms = Atoms(symbols, scaled_positions=frac, cell=np.eye(3) * a, pbc=True)
    atoms.positions += rng.normal(scale=rattle, size=atoms.positions.shape)
    return atoms


def slab(element: str, rng: np.random.Generator, vacuum: float = 8.0, rattle: float = 0.05) -> Atoms:
    """Two-layer fcc(100) slab (2x2 per layer), periodic in x and y, open in z."""
    d = _bond(element, element)
    a = d * np.sqrt(2.0)
    pos = []
    for layer in range(2):
        for i in range(2):
            for j in range(2):
                off = 0.5 * (layer % 2)
                pos.append([(i + off) * d, (j + off) * d, layer * a / 2])
    atoms = Atoms(element * 8, positions=pos, cell=[2 * d, 2 * d, a / 2 + vacuum], pbc=[True, True, False])
    atoms.positions += rng.normal(scale=rattle, size=atoms.positions.shape)
    return atoms


def cluster(elements: Sequence[str], rng: np.random.Generator, n: int = 6) -> Atoms:
    """``n`` atoms in vacuum, placed one by one at bonding distance from a random earlier atom
    and not closer than 0.8 bond lengths to any other."""
    symbols = [elements[k % len(elements)] for k in range(n)]
    pos = [np.zeros(3)]
    while len(pos) < n:
        k = len(pos)
        anchor = int(rng.integers(len(pos)))
        u = rng.normal(size=3)
        cand = pos[anchor] + u / np.linalg.norm(u) * _bond(symbols[anchor], symbols[k]) * rng.uniform(0.95, 1.1)
        if all(np.linalg.norm(cand - p) >= 0.8 * _bond(symbols[m], symbols[k]) for m, p in enumerate(pos)):
            pos.append(cand)
    return Atoms(symbols, positions=np.array(pos), pbc=False)


def triclinic(elements: Sequence[str], rng: np.random.Generator, n: int = 4) -> Atoms:
    """``n`` atoms on a distorted lattice in a skewed periodic cell (all angles off 90 deg)."""
    symbols = [elements[k % len(elements)] for k in range(n)]
    d = max(_bond(s, s) for s in symbols)
    cell = np.array([[2.0, 0.0, 0.0], [0.6, 1.9, 0.0], [0.5, 0.4, 2.1]]) * d
    frac = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])[:n]
    atoms = Atoms(symbols, scaled_positions=frac, cell=cell, pbc=True)
    atoms.positions += rng.normal(scale=0.08 * d, size=atoms.positions.shape)
    return atoms


def isolated_atom(element: str) -> Atoms:
    return Atoms(element, positions=[[0.0, 0.0, 0.0]], pbc=False)


def standard_structures(elements: Sequence[str], seed: int = 0) -> Dict[str, Atoms]:
    """The standard set for ``elements`` (first element for one-species structures)."""
    rng = np.random.default_rng(seed)
    els: List[str] = list(elements)
    out = {
        "bulk_fcc": bulk_fcc(els[0], rng),
        "rocksalt": rocksalt(els, rng) if len(els) > 1 else rocksalt(els * 2, rng),
        "slab": slab(els[0], rng),
        "cluster": cluster(els, rng),
        "triclinic": triclinic(els, rng),
        "isolated_atom": isolated_atom(els[0]),
    }
    return out

