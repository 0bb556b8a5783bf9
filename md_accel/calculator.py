"""ASE calculator for md_accel model files.

Energy, per-atom energies, forces and stress come from one evaluation: the gradient of the
energy with respect to the edge vectors (``md_accel.model.energy_forces_virial``).
Stress is ASE's: ``sigma = (1/V) dE/d(strain)`` in eV/A^3, Voigt order xx yy zz yz xz xy.
"""
from __future__ import annotations

import os
import time
from typing import Dict, Hashable, List, NoReturn, Optional, Tuple, Union

import numpy as np
import torch
from ase.data import atomic_numbers, chemical_symbols
from ase.calculators.calculator import Calculator as _AseCalculator
from ase.calculators.calculator import all_changes
from ase.stress import full_3x3_to_voigt_6_stress

from md_accel import io as _io
from md_accel.model import Potential, energy_forces_virial
from md_accel.neighbors import Edges, VerletNeighborList
from md_accel.ops.prebuild import prebuild_for
from md_accel.step import AUTO_MAX_EDGES, capacity
from md_accel.step_choice import StepChoice
from md_accel.verlet_step import VerletGraphStep


HostProbe = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # positions, cell, atomic numbers (CPU)


def _close(a, b, tol: float) -> bool:
    """ASE's test of an unchanged property (``np.allclose(a, b, rtol=0, atol=tol)``), after an exact comparison
    that answers most calls at a fraction of its cost, and a plain |a - b| <= tol where every value is finite."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if np.array_equal(a, b):
        return True
    diff = np.abs(np.subtract(a, b, dtype=np.float64))
    if np.isfinite(diff).all():
        return bool((diff <= tol).all())
    return bool(np.allclose(a, b, rtol=0, atol=tol))  # infinities: as ASE decides


def changed_properties(old, new, tol: float, excluded=()) -> List[str]:
    """The properties of ``all_changes`` that differ between the atoms of the last calculation ``old`` (None:
    all) and ``new``, by ASE's rule (``ase.calculators.calculator.compare_atoms``: an array present in one only
    has changed; values within ``tol``, absolute, have not), tested faster: ASE's ``np.allclose`` on the
    positions of every force request took 2.9 ms of a velocity-Verlet step at 32,000 atoms on one machine,
    ``_close`` 0.7-1.0 ms on two others (cProfile, session 48)."""
    if old is None:
        return list(all_changes)
    changes = []
    for prop in all_changes:
        if prop in excluded:
            continue
        if prop in ("cell", "pbc"):
            a, b = getattr(old, prop), getattr(new, prop)
        elif (prop in old.arrays) != (prop in new.arrays):
            changes.append(prop)
            continue
        elif prop in old.arrays:
            a, b = old.arrays[prop], new.arrays[prop]
        else:
            continue
        if not _close(a, b, tol):
            changes.append(prop)
    return changes


class Calculator(_AseCalculator):
    """ASE calculator running an md_accel potential.

    model:        path of an ``.mdx`` file, or a ``Potential`` (moved to ``device`` / ``dtype``
                  in place and frozen).
    device:       torch device; default ``cuda`` when available, else ``cpu``.
    dtype:        compute dtype (default: the model's). Positions and cell stay float64; edge
                  vectors are formed in float64 and cast, so large boxes keep full precision.
    skin:         Verlet skin in A: the neighbour list is rebuilt only once an atom has moved
                  more than skin/2 (or the cell changed). 0 rebuilds every call.
    min_distance: raise when two atoms are closer than this (A). The shortest bond in nature
                  (H2) is 0.74 A; below 0.5 A a potential fitted to DFT data is pure
                  extrapolation and such contacts almost always mean a broken structure
                  (duplicated atoms, wrong units). 0 disables the check.
    cuda_graph:   on CUDA, capture the step (the Verlet list's cutoff filter, energy, forces,
                  virial, the results' packing) in a CUDA graph and replay it while the atom count
                  and padded edge and pair capacities are unchanged: one host wait per step
                  (``md_accel.verlet_step.VerletGraphStep``; ``self.step`` holds its counters). ``None``
                  (default): up to ``md_accel.step.AUTO_MAX_EDGES`` edges, where the step is
                  launch-bound; above that the graph's padding (up to 25 % more edges) may cost
                  more than the launches it saves, or less (``md_accel.step_choice``), so the first
                  steps of each system size run both ways, timed, and the rest the faster
                  (``self.step_choice.chosen``). True: always; False: never. Ignored off CUDA.
    pair_weights: on CUDA, compute the radial weights once per pair of edges (the two
                  directions of a bond have the same length, and md_accel's radial MLPs see
                  only the length; ``energy_forces_virial``'s ``edge_partner``): half the
                  radial-MLP work, the same energies and forces up to rounding. False: per edge.
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]
    nolabel = True

    def __init__(
        self,
        model: Union[str, os.PathLike, Potential],
        device: Optional[Union[str, torch.device]] = None,
        dtype: Optional[Union[str, torch.dtype]] = None,
        skin: float = 1.0,
        min_distance: float = 0.5,
        cuda_graph: Optional[bool] = None,
        pair_weights: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if isinstance(model, (str, os.PathLike)):
            model = _io.load(model)
        elif not isinstance(model, Potential):
            raise TypeError(f"model must be a path to an .mdx file or an md_accel Potential, got {type(model)}")
        if dtype is not None:
            model = model.to(_io.as_dtype(dtype))
        prebuild_for([model], self.device)
        self.model = model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.dtype = next((t.dtype for t in self.model.state_dict().values() if t.is_floating_point()), torch.float64)
        self.min_distance = float(min_distance)
        self.pair_weights = bool(pair_weights)
        self.neighbors = VerletNeighborList(self.model.cutoff, skin)
        self._species_of_z = np.full(len(chemical_symbols), -1, dtype=np.int64)  # Z -> species index
        for k, symbol in enumerate(self.model.elements):
            self._species_of_z[atomic_numbers[symbol]] = k
        self._species_cache: Optional[Tuple[np.ndarray, torch.Tensor]] = None
        self.stats: Dict[str, int] = {"atoms": 0, "edges": 0}
        use_graph = self.device.type == "cuda" and (cuda_graph is None or bool(cuda_graph))
        auto = use_graph and cuda_graph is None
        # auto: a call on a size not yet known (no earlier call on this atom count) counts its edges and declines the
        # graph above AUTO_MAX_EDGES (as before there was a choice); step_choice then decides for that size
        self.step: Optional[VerletGraphStep] = VerletGraphStep(
            self.model, self.device, dtype=self.dtype, pair_weights=self.pair_weights,
            max_edges=AUTO_MAX_EDGES if auto else None) if use_graph else None
        self.step_choice: Optional[StepChoice] = StepChoice() if auto else None

    # -- input checks and conversion -------------------------------------------------------
    def _species(self, atoms) -> torch.Tensor:
        numbers = atoms.get_atomic_numbers()
        if self._species_cache is not None and np.array_equal(self._species_cache[0], numbers):
            return self._species_cache[1]
        index = self._species_of_z[numbers]
        if (index < 0).any():
            unknown = sorted({chemical_symbols[z] for z in numbers[index < 0]})
            raise ValueError(f"elements {unknown} are not in the model, which knows {list(self.model.elements)}")
        species = torch.as_tensor(index, device=self.device)
        self._species_cache = (numbers.copy(), species)
        return species

    @staticmethod
    def _check_geometry(pos: np.ndarray, cell: np.ndarray, pbc: np.ndarray) -> None:
        if not np.all(np.isfinite(pos)):
            bad = np.nonzero(~np.all(np.isfinite(pos), axis=1))[0]
            raise ValueError(f"non-finite positions (NaN or inf) for atoms {bad[:10].tolist()}")
        pbc = np.asarray(pbc, dtype=bool)
        if not np.all(np.isfinite(cell)):
            raise ValueError("non-finite cell")
        if pbc.any() and np.linalg.matrix_rank(cell[pbc], tol=1e-6) < pbc.sum():
            raise ValueError(
                f"pbc={pbc.tolist()} but the periodic cell vectors {cell[pbc].tolist()} span zero volume; "
                "set a cell (atoms.set_cell) or switch off pbc in those directions"
            )

    def _host_inputs(self, atoms) -> Tuple[np.ndarray, np.ndarray, torch.Tensor, HostProbe]:
        """(positions, cell) as float64 arrays, checked; species on the device; the same as CPU
        tensors for the Verlet list's reuse check, which then runs on the host (no wait on the device)."""
        positions_np, cell_np = atoms.get_positions(), np.array(atoms.get_cell(), dtype=np.float64)
        self._check_geometry(positions_np, cell_np, atoms.get_pbc())
        species = self._species(atoms)
        host = (torch.from_numpy(positions_np), torch.from_numpy(cell_np), torch.from_numpy(atoms.get_atomic_numbers()))
        return positions_np, cell_np, species, host

    def _edges(self, atoms, positions: torch.Tensor, cell_np: np.ndarray, species: torch.Tensor,
               host: HostProbe) -> Edges:
        cell = torch.tensor(cell_np, device=self.device)
        return self.neighbors.update(positions, cell, atoms.get_pbc(), species, check_on=host)

    @staticmethod
    def _shortest(edges: Edges) -> torch.Tensor:
        """The shortest edge length ([1], on the device; inf without edges): read with the
        results, so the distance check costs no synchronisation of its own."""
        if edges.vec.shape[0] == 0:
            return torch.full((1,), float("inf"), dtype=edges.vec.dtype, device=edges.vec.device)
        return torch.linalg.vector_norm(edges.vec.detach(), dim=-1).min().reshape(1)

    def _check_min_distance(self, atoms, d_min: float, edges: Optional[Edges] = None) -> None:
        if d_min >= self.min_distance:
            return
        if edges is None:  # the graphed step keeps no edges on the host side: form them once, eagerly
            positions_np, cell_np, species, host = self._host_inputs(atoms)
            positions = torch.tensor(positions_np, dtype=torch.float64, device=self.device)
            edges = self._edges(atoms, positions, cell_np, species, host)
        k = int(torch.argmin(torch.linalg.vector_norm(edges.vec.detach(), dim=-1)))
        i, j = int(edges.dst[k]), int(edges.src[k])
        raise ValueError(
            f"atoms {i} and {j} are {d_min:.4f} A apart, closer than "
            f"min_distance={self.min_distance} A; check the structure (duplicate atoms? units?) "
            "or pass min_distance=0 to the Calculator"
        )

    def _evaluate(self, atoms, create_graph: bool = False):
        """(positions, outputs, edges) without the CUDA graph; the caller checks the distance
        (``_check_min_distance``) before using the outputs."""
        positions_np, cell_np, species, host = self._host_inputs(atoms)
        positions = torch.tensor(positions_np, dtype=torch.float64, device=self.device)
        if create_graph:
            positions.requires_grad_(True)
        edges = self._edges(atoms, positions, cell_np, species, host)
        partner = edges.partner if self.pair_weights and self.device.type == "cuda" else None
        try:
            out = energy_forces_virial(
                self.model, species, edges.vec.to(self.dtype), edges.src, edges.dst, create_graph=create_graph,
                dst_sorted=True, edge_partner=partner)
        except torch.OutOfMemoryError as e:
            self._out_of_memory(atoms, e, edges.src.numel())
        return positions, out, edges

    def _way(self, n: int) -> Tuple[str, Optional[Hashable]]:
        """("graph" or "plain", the ``step_choice`` key where it decides) for a call on ``n`` atoms,
        sized by the last call's edges where it had as many atoms (else unknown: the graphed step counts them)."""
        if self.step is None:
            return "plain", None
        edges = self.stats["edges"] if self.stats["atoms"] == n else 0
        if self.step_choice is not None and edges > AUTO_MAX_EDGES:
            key = (n, capacity(edges))
            return self.step_choice.next(key), key
        if self.step.max_edges is not None and edges > self.step.max_edges:
            return "plain", None
        return "graph", None

    def _graphed(self, atoms, unlimited: bool = False) -> Optional[np.ndarray]:
        """The packed results of the graphed step (``VerletGraphStep``), or None where it declines
        (more edges than its ``max_edges``, unless ``unlimited``: a ``step_choice`` trial or decision)."""
        assert self.step is not None
        positions_np, cell_np, species, host = self._host_inputs(atoms)
        up = lambda a: torch.from_numpy(a).to(self.device)  # noqa: E731
        limit = self.step.max_edges
        if unlimited:
            self.step.max_edges = None
        try:
            pairs = self.neighbors.current_pairs(host, atoms.get_pbc(),
                                                 lambda: (up(positions_np), up(cell_np), species))
            return self.step(positions_np, cell_np, species, pairs)
        except torch.OutOfMemoryError as e:
            self._out_of_memory(atoms, e, self.step.num_edges)
        finally:
            self.step.max_edges = limit

    def _out_of_memory(self, atoms, error: Exception, num_edges: int) -> NoReturn:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        raise torch.OutOfMemoryError(
            f"out of memory on {self.device} evaluating {len(atoms)} atoms ({num_edges} edges, "
            f"{self.dtype}). Try a smaller system, float32 (dtype='float32'), a smaller skin (fewer "
            "stored pairs), or LAMMPS on several GPUs for systems this size. Original error: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
        ) from error

    # -- ASE interface ------------------------------------------------------------------------
    def check_state(self, atoms, tol: float = 1e-15) -> List[str]:
        """ASE's (``changed_properties``): which properties changed since the last calculation."""
        return changed_properties(self.atoms, atoms, tol, set(self.ignored_changes))

    def calculate(self, atoms=None, properties=None, system_changes=all_changes) -> None:
        super().calculate(atoms, properties or ["energy"], system_changes)
        atoms = self.atoms
        n = len(atoms)
        # [node energies, forces, virial, shortest edge, edge count] in float64 on the host: from the
        # graphed step, or one concatenation, cast and copy here; the energy is their float64 sum
        way, key = self._way(n)
        start = time.perf_counter()
        flat = None
        if way == "graph":
            try:
                flat = self._graphed(atoms, unlimited=key is not None)
            except torch.OutOfMemoryError:
                if key is None:
                    raise
                self.step_choice.decline(key, "graph")  # the plain step may still fit
            way = "graph" if flat is not None else "plain"
        if way == "plain" and self.step is not None and self.step.layout is not None:
            self.step.release()  # its graph's memory pool and padded buffers: never held beside a plain step
            torch.cuda.empty_cache()
        edges = None
        if flat is None:
            _, out, edges = self._evaluate(atoms)
            parts = [out[k].detach().reshape(-1).to(torch.float64) for k in ("node_energies", "forces", "virial")]
            tail = [self._shortest(edges).to(torch.float64), torch.zeros(1, dtype=torch.float64, device=self.device)]
            flat = torch.cat(parts + tail).cpu().numpy()
            flat[-1] = edges.src.numel()
        self.stats = {"atoms": n, "edges": int(flat[-1])}
        if key is not None:
            self.step_choice.record(key, way, time.perf_counter() - start)
        if self.min_distance > 0:
            self._check_min_distance(atoms, float(flat[4 * n + 9]), edges)  # before any result is kept
        energy = float(flat[:n].sum())
        self.results = {
            "energy": energy,
            "free_energy": energy,
            "energies": flat[:n],
            "forces": flat[n : 4 * n].reshape(n, 3),
        }
        if atoms.cell.rank == 3:
            w = flat[4 * n : 4 * n + 9].reshape(3, 3)
            sigma = -0.5 * (w + w.T) / atoms.get_volume()
            self.results["stress"] = full_3x3_to_voigt_6_stress(sigma)  # ASE: no cell, no stress

    def get_hessian(self, atoms=None) -> np.ndarray:
        """Analytic second derivatives ``d2E / dx_a dx_b`` ([3N, 3N], eV/A^2, float64), by
        double backward through the force computation."""
        atoms = self.atoms if atoms is None else atoms
        positions, out, edges = self._evaluate(atoms, create_graph=True)
        if self.min_distance > 0:
            self._check_min_distance(atoms, float(self._shortest(edges)), edges)
        forces = out["forces"].reshape(-1)
        n3 = forces.numel()
        if not forces.requires_grad:  # no edges: nothing depends on the positions
            return np.zeros((n3, n3))
        rows: List[torch.Tensor] = []
        for k in range(n3):
            (g,) = torch.autograd.grad(forces[k], positions, retain_graph=k + 1 < n3, materialize_grads=True)
            rows.append(-g.reshape(-1))
        return torch.stack(rows).to(torch.float64).cpu().numpy()


__all__ = ["Calculator"]
