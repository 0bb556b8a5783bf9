"""Plain-torch potentials following the md_accel model contract, for testing the LAMMPS plugin
without the converters, plus a Python reference evaluation and a LAMMPS data-file writer.

* ``PairLJ``: Lennard-Jones per species pair, optionally switched to zero between ``r_on`` and
  ``cutoff`` (``r_on = cutoff`` is plain truncation, i.e. LAMMPS ``lj/cut``).
* ``MessagePassingToy``: smooth LJ plus node features passed along edges ``num_layers`` times
  through a nonlinearity, so an owned atom's energy depends on atoms ``num_layers x cutoff``
  away: a too-shallow ghost shell changes the result. It exports the layered interface.
"""

import json
import math
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
from ase import Atoms
from ase.build import bulk
from ase.neighborlist import neighbor_list

from md_accel.ops import Graph


class PairLJ(torch.nn.Module):
    elements: List[str]
    cutoff: float
    num_layers: int
    r_on: float

    def __init__(self, elements, epsilon, sigma, cutoff, r_on=None):
        """``epsilon``, ``sigma``: [S, S] symmetric per species pair (eV, Angstrom)."""
        super().__init__()
        self.elements = list(elements)
        self.cutoff = float(cutoff)
        self.r_on = float(cutoff if r_on is None else r_on)
        self.num_layers = 1
        self.register_buffer("epsilon", torch.as_tensor(epsilon, dtype=torch.float64))
        self.register_buffer("sigma", torch.as_tensor(sigma, dtype=torch.float64))

    @torch.jit.export
    def pair_energies(self, species: torch.Tensor, r: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor) -> torch.Tensor:
        si, sj = species[edge_dst], species[edge_src]
        sr6 = (self.sigma[si, sj] / r) ** 6
        phi = 4.0 * self.epsilon[si, sj] * (sr6 * sr6 - sr6)
        t = ((r - self.r_on) / max(self.cutoff - self.r_on, 1e-12)).clamp(0.0, 1.0)
        switch = 1.0 - t ** 3 * (10.0 - 15.0 * t + 6.0 * t * t)
        out = torch.zeros(species.shape[0], dtype=r.dtype, device=r.device)
        return out.index_add(0, edge_dst, 0.5 * phi * switch * (r < self.cutoff).to(r.dtype))

    @torch.jit.export
    def node_energies(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor, graph: Optional[Graph] = None) -> torch.Tensor:
        return self.pair_energies(species, torch.linalg.norm(edge_vec, dim=1), edge_src, edge_dst)

    def forward(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                edge_dst: torch.Tensor) -> torch.Tensor:
        return self.node_energies(species, edge_vec, edge_src, edge_dst, None)


class MessagePassingToy(torch.nn.Module):
    """Also exports md_accel's layered interface (``md_accel.model.potential.Potential``), so
    LAMMPS runs it in either comm mode."""

    elements: List[str]
    cutoff: float
    num_layers: int
    features: int

    def __init__(self, elements, cutoff, num_layers=2, features=8, scale=0.2, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        s, f = len(elements), features
        self.elements = list(elements)
        self.cutoff = float(cutoff)
        self.num_layers = int(num_layers)
        self.features = f
        eps = torch.full((s, s), 0.4)
        sig = torch.full((s, s), 2.3)
        self.base = PairLJ(elements, eps, sig, cutoff, r_on=cutoff - 1.0)
        rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
        self.embedding = torch.nn.Parameter(rnd(s, f))
        self.alpha = torch.nn.Parameter(0.01 + 0.03 * torch.rand(num_layers, f, generator=g,
                                                                dtype=torch.float64))
        self.w_self = torch.nn.Parameter(rnd(num_layers, f, f) / math.sqrt(f))
        self.w_msg = torch.nn.Parameter(rnd(num_layers, f, f) / (2.0 * math.sqrt(f)))
        self.readout = torch.nn.Parameter(scale * rnd(f))
        self.e0 = torch.nn.Parameter(rnd(s))

    @torch.jit.export
    def node_energies(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor, graph: Optional[Graph] = None) -> torch.Tensor:
        edge_feats = self.edge_features(species, edge_vec, edge_src, edge_dst)
        h = self.embed(species)
        features: List[torch.Tensor] = []
        for k in range(self.num_layers):
            h = self.interaction(k, h, species, edge_feats, edge_src, edge_dst, graph)
            features.append(h)
        return self.readout_energies(species, features, edge_feats, edge_src, edge_dst)

    @torch.jit.export
    def feature_dims(self) -> List[int]:
        return [self.features] * (self.num_layers + 1)

    @torch.jit.export
    def edge_features(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor) -> List[torch.Tensor]:
        r = torch.linalg.norm(edge_vec, dim=1)
        return [r, 0.5 * (torch.cos(math.pi * (r / self.cutoff).clamp(max=1.0)) + 1.0)]

    @torch.jit.export
    def embed(self, species: torch.Tensor) -> torch.Tensor:
        return self.embedding[species]

    @torch.jit.export
    def interaction(self, k: int, h: torch.Tensor, species: torch.Tensor, edge_feats: List[torch.Tensor],
                    edge_src: torch.Tensor, edge_dst: torch.Tensor, graph: Optional[Graph] = None) -> torch.Tensor:
        r, fc = edge_feats[0], edge_feats[1]
        radial = torch.exp(-self.alpha[k] * (r * r).unsqueeze(1)) * fc.unsqueeze(1)
        agg = torch.zeros_like(h).index_add(0, edge_dst, radial * h[edge_src])
        return torch.tanh(h @ self.w_self[k] + agg @ self.w_msg[k])

    @torch.jit.export
    def readout_energies(self, species: torch.Tensor, features: List[torch.Tensor],
                         edge_feats: List[torch.Tensor], edge_src: torch.Tensor,
                         edge_dst: torch.Tensor) -> torch.Tensor:
        mp = features[-1] @ self.readout + self.e0[species]
        return mp + self.base.pair_energies(species, edge_feats[0], edge_src, edge_dst)

    @torch.jit.export
    def receiver_graph(self, edge_src: torch.Tensor, edge_dst: torch.Tensor,
                       num_nodes: int) -> Optional[Graph]:
        return None

    def forward(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                edge_dst: torch.Tensor) -> torch.Tensor:
        return self.node_energies(species, edge_vec, edge_src, edge_dst, None)


def save_mdx(module: torch.nn.Module, path, dtype: str = "float64", **header) -> Path:
    """Write ``module`` as an md_accel model file (TorchScript + md_accel.json); ``header``
    overrides entries of md_accel.json."""
    module = module.to(getattr(torch, dtype))
    meta = {"format": "md_accel", "format_version": 1, "elements": module.elements,
            "cutoff": module.cutoff, "num_layers": module.num_layers, "dtype": dtype, **header}
    torch.jit.save(torch.jit.script(module), str(path),
                   _extra_files={"md_accel.json": json.dumps(meta)})
    return Path(path)


def reference(path, atoms, species) -> dict:
    """Evaluate the model file at ``path`` on ``atoms`` in Python (periodic images as edge
    shifts): energy, forces, virial (Voigt xx yy zz xy xz yz), node energies and the per-atom
    virial (each edge's half to both of its atoms)."""
    model = torch.jit.load(str(path))
    dtype = next(p for p in model.state_dict().values() if p.is_floating_point()).dtype
    i, j, shift = neighbor_list("ijS", atoms, model.cutoff)
    vec = atoms.positions[j] - atoms.positions[i] + shift @ atoms.cell.array
    t_vec = torch.tensor(vec, dtype=dtype, requires_grad=True)
    src, dst = torch.tensor(j), torch.tensor(i)
    node_e = model.node_energies(torch.as_tensor(species, dtype=torch.int64), t_vec, src, dst)
    energy = node_e.sum()
    (g,) = torch.autograd.grad(energy, t_vec)
    g = g.double()
    forces = torch.zeros(len(atoms), 3, dtype=torch.float64)
    forces.index_add_(0, src, -g).index_add_(0, dst, g)
    r = t_vec.detach().double()
    w_edge = -torch.stack([r[:, 0] * g[:, 0], r[:, 1] * g[:, 1], r[:, 2] * g[:, 2],
                           r[:, 0] * g[:, 1], r[:, 0] * g[:, 2], r[:, 1] * g[:, 2]], dim=1)
    w_atom = torch.zeros(len(atoms), 6, dtype=torch.float64)
    w_atom.index_add_(0, src, 0.5 * w_edge).index_add_(0, dst, 0.5 * w_edge)
    return {"energy": float(energy.detach()), "forces": forces.numpy(), "virial": w_edge.sum(0).numpy(),
            "node_energies": node_e.detach().double().numpy(), "atom_virial": w_atom.numpy()}


def write_data(path, atoms, types) -> Path:
    """LAMMPS data file (atom_style atomic) for ``atoms`` whose cell is already in LAMMPS'
    lower-triangular form; ``types`` are 1-based LAMMPS atom types."""
    cell = atoms.cell.array
    assert np.allclose(cell[np.triu_indices(3, 1)], 0.0), "cell must be lower triangular"
    lines = ["md_accel test", "", f"{len(atoms)} atoms", f"{max(types)} atom types", "",
             f"0 {cell[0, 0]:.17g} xlo xhi", f"0 {cell[1, 1]:.17g} ylo yhi",
             f"0 {cell[2, 2]:.17g} zlo zhi"]
    if not np.allclose(cell[np.tril_indices(3, -1)], 0.0):
        lines.append(f"{cell[1, 0]:.17g} {cell[2, 0]:.17g} {cell[2, 1]:.17g} xy xz yz")
    lines += ["", "Atoms # atomic", ""]
    lines += [f"{n + 1} {t} {x:.17g} {y:.17g} {z:.17g}"
              for n, (t, (x, y, z)) in enumerate(zip(types, atoms.positions))]
    Path(path).write_text("\n".join(lines) + "\n")
    return Path(path)


ELEMENTS = ["Cu", "Ni"]
EPS = [[0.40, 0.45], [0.45, 0.52]]
SIGMA = [[2.30, 2.35], [2.35, 2.25]]
# LAMMPS type 1 is Ni, type 2 is Cu: the reverse of the model's order, so the mapping matters.
SYMBOLS = "Ni Cu"
TYPE_TO_SPECIES = np.array([1, 0])


def cu_ni(triclinic: bool, seed: int = 0, n: int = 3):
    """4 n^3-atom (108) rattled fcc Cu/Ni alloy; sheared into a general triclinic cell if asked."""
    atoms = bulk("Cu", "fcc", 3.61, cubic=True).repeat(n)
    if triclinic:
        length = atoms.cell[0, 0]
        cell = length * np.array([[1.0, 0, 0], [0.10, 0.97, 0], [-0.08, 0.15, 1.03]])
        atoms.set_cell(cell, scale_atoms=True)
    atoms.rattle(0.05, seed=seed)
    atoms.wrap()
    types = np.random.default_rng(seed).integers(1, 3, len(atoms))
    return atoms, types


def slab(seed: int = 0, symbols=None):
    """48-atom rattled fcc slab (3 x 2 x 2 cubic cells) in a box twice as long along x: with
    ``processors 4 1 1`` at least one rank owns no atom. ``symbols``: two element names to
    assign to the random types 1 and 2 (default: none set)."""
    atoms = bulk("Cu", "fcc", 3.61, cubic=True).repeat((3, 2, 2))
    cell = atoms.cell.array.copy()
    cell[0, 0] *= 2.0
    atoms.set_cell(cell, scale_atoms=False)
    atoms.rattle(0.05, seed=seed)
    atoms.wrap()
    types = np.random.default_rng(seed).integers(1, 3, len(atoms))
    if symbols is not None:
        atoms.set_chemical_symbols([symbols[t - 1] for t in types])
    return atoms, types


def cluster(seed: int = 0, symbols=("Cu", "Ni"), box: float = 24.0):
    """19-atom rattled fcc cluster (a site and its 18 nearest neighbours) at the centre of a
    ``box``-long cube, not periodic (LAMMPS: boundary f f f)."""
    sites = bulk("Cu", "fcc", 3.61, cubic=True).repeat(3).positions
    centre = sites[np.argmin(np.linalg.norm(sites - sites.mean(0), axis=1))]
    near = sites[np.linalg.norm(sites - centre, axis=1) < 3.7] - centre + box / 2
    atoms = Atoms(["Cu"] * len(near), positions=near, cell=np.eye(3) * box, pbc=False)
    atoms.rattle(0.05, seed=seed)
    types = np.random.default_rng(seed).integers(1, 3, len(atoms))
    atoms.set_chemical_symbols([symbols[t - 1] for t in types])
    return atoms, types

