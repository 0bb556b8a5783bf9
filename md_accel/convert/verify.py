"""Check that a converted potential reproduces its source: energies, forces and stress of both
on a set of structures, compared within tolerances; a table is printed, and
``ConversionMismatch`` raised when any value is off.

The source is any ASE calculator (sevenn's, mace's, nequip's); the potential is evaluated
directly (own neighbour list, ``energy_forces_virial``), independent of the front ends.

Error measure: ``max |ours - ref| / max(max |ref|, floor)`` per quantity, with floors of 1 eV
(energy), 1 eV/A (forces) and 0.01 eV/A^3 (stress, ~1.6 GPa) so that near-zero references (forces
in a perfect crystal) are not divided by ~0. Stress is compared for fully periodic cells only.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import numpy as np
import torch

from ..model.potential import energy_forces_virial

TOLERANCES = {
    torch.float64: {"energy": 1e-9, "forces": 1e-9, "stress": 1e-9},
    torch.float32: {"energy": 1e-5, "forces": 1e-4, "stress": 1e-4},
}
FLOORS = {"energy": 1.0, "forces": 1.0, "stress": 1e-2}


class ConversionMismatch(AssertionError):
    """The converted potential differs from its source beyond tolerance; ``rows`` holds the table."""

    def __init__(self, message: str, rows: List[Dict]):
        super().__init__(message)
        self.rows = rows


def neighbor_graph(atoms, cutoff: float, elements: List[str], dtype=torch.float64, device="cpu"):
    """``(species, edge_vec, edge_src, edge_dst)`` in md_accel's conventions (sender j -> receiver
    i, ``edge_vec = pos[j] - pos[i] + shift``), every pair with distance < cutoff, images included."""
    from ase.neighborlist import primitive_neighbor_list

    index = {s: k for k, s in enumerate(elements)}
    missing = sorted(set(atoms.get_chemical_symbols()) - set(index))
    if missing:
        raise ValueError(f"elements {missing} are not known to the potential")
    pos = atoms.get_positions()
    cell = np.array(atoms.get_cell())
    i, j, s = primitive_neighbor_list("ijS", atoms.get_pbc(), cell, pos, cutoff, self_interaction=False)
    vec = pos[j] - pos[i] + s @ cell
    species = torch.tensor([index[x] for x in atoms.get_chemical_symbols()], dtype=torch.int64, device=device)
    return (species, torch.tensor(vec, dtype=dtype, device=device),
            torch.tensor(j, dtype=torch.int64, device=device), torch.tensor(i, dtype=torch.int64, device=device))


def evaluate_potential(potential: torch.nn.Module, atoms) -> Dict[str, Optional[np.ndarray]]:
    """Energy (eV), forces (eV/A) and, for periodic cells, ASE-convention Voigt stress (eV/A^3)."""
    param = next(iter(potential.parameters()))
    species, vec, src, dst = neighbor_graph(atoms, potential.cutoff, list(potential.elements), param.dtype,
                                            param.device)
    out = energy_forces_virial(potential, species, vec, src, dst)
    stress = None
    if atoms.get_pbc().all():
        s = (-out["virial"] / atoms.get_volume()).detach().cpu().double().numpy()
        stress = np.array([s[0, 0], s[1, 1], s[2, 2], s[1, 2], s[0, 2], s[0, 1]])
    return {
        "energy": np.array(out["energy"].item()),
        "forces": out["forces"].detach().cpu().double().numpy(),
        "stress": stress,
    }


def evaluate_calculator(calc, atoms) -> Dict[str, Optional[np.ndarray]]:
    a = atoms.copy()
    a.calc = calc
    return {
        "energy": np.array(a.get_potential_energy()),
        "forces": np.asarray(a.get_forces()),
        "stress": np.asarray(a.get_stress()) if atoms.get_pbc().all() else None,
    }


def compare_to_reference(
    reference_calc,
    potential: torch.nn.Module,
    structures: Mapping[str, object],
    tolerances: Optional[Dict[str, float]] = None,
    verbose: bool = True,
) -> List[Dict]:
    """Compare on every structure; returns the rows of the table, raises ``ConversionMismatch``
    if any quantity exceeds its tolerance (defaults: ``TOLERANCES`` for the potential's dtype)."""
    dtype = next(iter(potential.parameters())).dtype
    tol = dict(TOLERANCES.get(dtype, TOLERANCES[torch.float32]))
    tol.update(tolerances or {})
    rows: List[Dict] = []
    for name, atoms in structures.items():
        ref = evaluate_calculator(reference_calc, atoms)
        ours = evaluate_potential(potential, atoms)
        for q in ("energy", "forces", "stress"):
            if ref[q] is None or ours[q] is None:
                continue
            a, b = np.asarray(ours[q], dtype=np.float64), np.asarray(ref[q], dtype=np.float64)
            if a.shape != b.shape:
                raise ConversionMismatch(f"{name}: {q} has shape {a.shape}, reference {b.shape}", rows)
            abs_err = float(np.max(np.abs(a - b))) if a.size else 0.0
            ref_max = float(np.max(np.abs(b))) if b.size else 0.0
            rel = abs_err / max(ref_max, FLOORS[q])
            rows.append({"structure": name, "atoms": len(atoms), "quantity": q, "ref_max": ref_max,
                         "abs_err": abs_err, "rel_err": rel, "tol": tol[q], "ok": bool(rel <= tol[q])})
    if verbose:
        print(format_table(rows))
    bad = [r for r in rows if not r["ok"]]
    if bad:
        raise ConversionMismatch("converted potential differs from its source:\n" + format_table(bad), rows)
    return rows


def format_table(rows: List[Dict]) -> str:
    head = f"{'structure':<18}{'atoms':>6}  {'quantity':<8}{'max|ref|':>12}{'max|diff|':>12}{'rel':>11}{'tol':>9}  ok"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['structure']:<18}{r['atoms']:>6}  {r['quantity']:<8}{r['ref_max']:>12.4e}"
                     f"{r['abs_err']:>12.3e}{r['rel_err']:>11.2e}{r['tol']:>9.0e}  {'yes' if r['ok'] else 'NO'}")
    return "\n".join(lines)
