"""Neighbour lists in md_accel's graph convention, with a Verlet-skin cache.

``edge_src`` = sender j, ``edge_dst`` = receiver i,
``edge_vec = pos[src] - pos[dst] + shift`` with ``shift = S @ cell`` (S the integer image).
Edges come sorted by receiver (ties by sender, then image) so the order is deterministic and
the same whatever list they were filtered from. vesin computes the lists: ``vesin_torch`` for
CUDA tensors, ``vesin`` (numpy) on the CPU; periodic, open and mixed boundaries, any cell.

Each edge ``(j -> i, S)`` has its reverse ``(i -> j, -S)`` in the list (``Edges.partner``): its
vector is exactly the negated one (``a - b = -(b - a)`` and ``-S @ cell = -(S @ cell)`` in floating
point), so both have the same length and are kept or dropped together.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch


class Edges(NamedTuple):
    src: torch.Tensor  # [E] int64, sender j
    dst: torch.Tensor  # [E] int64, receiver i (sorted)
    shift: torch.Tensor  # [E, 3] cartesian image shift, dtype of the positions
    vec: torch.Tensor  # [E, 3] pos[src] - pos[dst] + shift (differentiable in the positions)
    partner: Optional[torch.Tensor] = None  # [E] int64, the index of each edge's reverse (None: not all paired)


def _vesin_pairs(
    positions: torch.Tensor, cell: torch.Tensor, pbc: Tuple[bool, bool, bool], cutoff: float
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, dst, S) of all ordered pairs closer than ``cutoff``; S int64 on the positions' device."""
    pos = positions.detach().to(torch.float64)
    box = cell.detach().to(torch.float64)
    if pos.device.type == "cuda":
        from vesin_torch import NeighborList as TorchNeighborList

        nl = TorchNeighborList(cutoff=cutoff, full_list=True)
        i, j, s = nl.compute(pos, box, torch.tensor(pbc, device=pos.device), "ijS")
        return j.long(), i.long(), s.long()
    from vesin import NeighborList

    nl = NeighborList(cutoff=cutoff, full_list=True)
    i, j, s = nl.compute(pos.cpu().numpy(), box.cpu().numpy(), list(pbc), "ijS")
    dev = positions.device
    as_t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)  # noqa: E731
    return as_t(j), as_t(i), as_t(s)


def _lex_order(src: torch.Tensor, dst: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The order of (dst, src, S) lexicographically (stable sorts, last key first)."""
    order = torch.arange(src.numel(), device=src.device)
    for key in (s[:, 2], s[:, 1], s[:, 0], src, dst):
        order = order[torch.sort(key[order], stable=True).indices]
    return order


def edge_partners(src: torch.Tensor, dst: torch.Tensor, s: torch.Tensor) -> Optional[torch.Tensor]:
    """The index of each edge's reverse ``(dst, src, -S)`` (S: integer images [E, 3]), or None when
    some edge has none. Sorted the same way, the reverses are the edges themselves, position by
    position, exactly when every edge has its reverse."""
    fwd, rev = _lex_order(src, dst, s), _lex_order(dst, src, -s)
    if not (torch.equal(dst[rev], src[fwd]) and torch.equal(src[rev], dst[fwd]) and torch.equal(-s[rev], s[fwd])):
        return None
    partner = torch.empty_like(fwd)
    partner[rev] = fwd
    return partner


Pairs = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]]


def _sorted_pairs(positions: torch.Tensor, cell: torch.Tensor, pbc: Tuple[bool, ...], cutoff: float) -> Pairs:
    """(src, dst, S, partner) ordered by (dst, src, S) lexicographically; partner: ``edge_partners``."""
    src, dst, s = _vesin_pairs(positions, cell, pbc, cutoff)
    order = _lex_order(src, dst, s)
    src, dst, s = src[order], dst[order], s[order]
    return src, dst, s, edge_partners(src, dst, s)


def pair_vectors(positions: torch.Tensor, cell: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                 s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(shift, vec) of pairs ``(src, dst, S)``: ``S @ cell`` and ``pos[src] - pos[dst] + shift``.
    Elementwise ops only, so every edge's vector is computed with the same arithmetic whatever
    list (or CUDA graph, ``verlet_step``) it comes from."""
    sf = s.to(positions.dtype)
    shift = sf[:, 0:1] * cell[0] + sf[:, 1:2] * cell[1] + sf[:, 2:3] * cell[2]
    return shift, positions[src] - positions[dst] + shift


def within_cutoff_mask(vec: torch.Tensor, cutoff: float, partner: Optional[torch.Tensor] = None,
                       valid: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """(keep, squared lengths) of pair vectors: closer than ``cutoff``, ``valid`` where given, and
    with partners, both directions kept (the same already: equal lengths; explicit for the indices)."""
    d2 = vec.detach().pow(2).sum(-1)
    keep = d2 < cutoff * cutoff
    if valid is not None:
        keep = keep & valid
    if partner is not None:
        keep = keep & keep[partner]
    return keep, d2


def _within_cutoff(positions: torch.Tensor, cell: torch.Tensor, pairs: Pairs, cutoff: float) -> Edges:
    """The pairs closer than ``cutoff`` now."""
    src, dst, s, partner = pairs
    shift, vec = pair_vectors(positions, cell, src, dst, s)
    mask = within_cutoff_mask(vec, cutoff, partner)[0]
    if partner is None:
        keep = mask.nonzero().squeeze(-1)
        return Edges(src[keep], dst[keep], shift[keep], vec[keep])
    keep = mask.nonzero().squeeze(-1)
    new_index = torch.cumsum(mask.to(torch.int64), 0) - 1  # kept pair -> its index among the kept
    return Edges(src[keep], dst[keep], shift[keep], vec[keep], new_index[partner[keep]])


def neighbor_list(positions: torch.Tensor, cell: torch.Tensor, pbc: Sequence[bool], cutoff: float) -> Edges:
    """All directed edges with ``|edge_vec| < cutoff``, sorted by receiver."""
    cell = cell.to(positions.dtype)
    pairs = _sorted_pairs(positions, cell, tuple(bool(p) for p in pbc), float(cutoff))
    return _within_cutoff(positions, cell, pairs, float(cutoff))


def _max_squared_displacement(pos: torch.Tensor, ref: torch.Tensor) -> float:
    """max_i |pos_i - ref_i|^2 (0 without atoms). On the host through numpy: with torch's CPU ops the whole reuse
    check took 0.5-2.2 ms of a velocity-Verlet step at 32,000 atoms on two machines' hosts, this function 0.57 ms on
    a third (cProfile, session 48)."""
    if pos.shape[0] == 0:
        return 0.0
    if pos.device.type == "cpu":
        d = pos.numpy() - ref.numpy()
        return float(np.einsum("ij,ij->i", d, d).max())
    return float((pos - ref).pow(2).sum(-1).max())


class VerletNeighborList:
    """Neighbour list built with ``cutoff + skin`` and reused while no pair can have come
    within the cutoff unseen; every call filters the stored pairs to the true cutoff,
    recomputing the vectors from the current positions, cell and stored integer images. The
    result is identical to a fresh list (same edges, same order, same arithmetic).

    Reuse criterion (rows of ``h`` are the cell vectors, ``M = h_ref^-1 h`` the deformation since
    the build, ``u = x - x_ref M`` each atom's displacement beyond the affine one): a pair at
    ``d_ref`` is now at ``d_ref M + u_j - u_i``, so pairs beyond ``cutoff + skin`` at the build
    stay beyond the cutoff while ``(cutoff + skin) * sigma_min(M) - 2 max|u| > cutoff``. With a
    fixed cell this is the usual ``max|x - x_ref| < skin / 2``. A cell change with a
    non-periodic (rank-deficient) cell, a change of boundaries, atom count or species rebuilds.
    """

    def __init__(self, cutoff: float, skin: float = 1.0) -> None:
        if skin < 0:
            raise ValueError(f"skin must be >= 0, got {skin}")
        self.cutoff = float(cutoff)
        self.skin = float(skin)
        self.num_builds = 0
        self._ref: Optional[Tuple[torch.Tensor, torch.Tensor, Tuple[bool, ...], torch.Tensor]] = None
        self._pairs: Optional[Pairs] = None

    @property
    def pairs(self) -> Optional[Pairs]:
        """The stored pairs (within ``cutoff + skin`` at the last build), sorted by receiver."""
        return self._pairs

    def needs_rebuild(
        self, positions: torch.Tensor, cell: torch.Tensor, pbc: Sequence[bool], species: torch.Tensor
    ) -> bool:
        """Whether the stored pairs may miss a pair within the cutoff at these positions (the
        criterion in the class docstring; tensors of the kind given at the last ``rebuild``)."""
        pbc = tuple(bool(p) for p in pbc)
        if self._ref is None or self.skin == 0:
            return True
        ref_pos, ref_cell, ref_pbc, ref_species = self._ref
        if (
            ref_pos.shape != positions.shape
            or ref_pos.device != positions.device
            or ref_pbc != pbc
            or not torch.equal(ref_species, species)
        ):
            return True
        pos = positions.detach().to(torch.float64)
        if torch.equal(ref_cell, cell):
            return not _max_squared_displacement(pos, ref_pos) < (0.5 * self.skin) ** 2
        h_ref, h = ref_cell.to(torch.float64), cell.to(torch.float64)
        if torch.linalg.matrix_rank(h_ref) < 3 or torch.linalg.matrix_rank(h) < 3:
            return True
        m = torch.linalg.solve(h_ref, h)
        u_max = (pos - ref_pos @ m).pow(2).sum(-1).max().sqrt()
        margin = (self.cutoff + self.skin) * torch.linalg.svdvals(m).min() - 2 * u_max - self.cutoff
        return not bool(margin > 0)

    def rebuild(
        self, positions: torch.Tensor, cell: torch.Tensor, pbc: Sequence[bool], species: torch.Tensor,
        reference: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
    ) -> Pairs:
        """Build the pairs within ``cutoff + skin`` on the positions' device. ``reference``: the
        (positions, cell, species) that later ``needs_rebuild`` calls compare against (default: these)."""
        pbc = tuple(bool(p) for p in pbc)
        ref = reference if reference is not None else (positions, cell.to(positions.dtype), species)
        self._pairs = _sorted_pairs(positions, cell.to(positions.dtype), pbc, self.cutoff + self.skin)
        self._ref = (ref[0].detach().to(torch.float64).clone(), ref[1].clone(), pbc, ref[2].clone())
        self.num_builds += 1
        return self._pairs

    def update(
        self, positions: torch.Tensor, cell: torch.Tensor, pbc: Sequence[bool], species: torch.Tensor,
        check_on: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
    ) -> Edges:
        """Edges within the cutoff for the current positions, sorted by receiver.

        ``check_on``: the same (positions, cell, species) as CPU tensors (e.g. ``torch.from_numpy``
        of the arrays they were copied from; species may be any per-atom labels that change
        exactly when the species do, such as atomic numbers): the reuse check then runs on the
        host, so a GPU caller does not wait on the device for it (three synchronisations per step
        fewer). Callers keep to one way: the reference of the last build is kept as given."""
        cell = cell.to(positions.dtype)
        probe = check_on if check_on is not None else (positions, cell, species)
        pairs = self.current_pairs(probe, pbc, lambda: (positions, cell, species))
        return _within_cutoff(positions, cell, pairs, self.cutoff)

    def current_pairs(
        self, probe: Tuple[torch.Tensor, torch.Tensor, torch.Tensor], pbc: Sequence[bool],
        inputs: Callable[[], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    ) -> Pairs:
        """The stored pairs, rebuilt first from ``inputs()`` (positions, cell, species on the device
        to build on) when ``needs_rebuild(*probe)``; ``probe`` becomes the rebuild's reference."""
        if self._pairs is None or self.needs_rebuild(probe[0], probe[1], pbc, probe[2]):
            positions, cell, species = inputs()
            return self.rebuild(positions, cell, pbc, species, reference=probe)
        return self._pairs
