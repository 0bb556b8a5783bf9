"""The Calculator's step, from positions to packed results, in one CUDA graph.

``GraphedStep`` replays the model on a padded edge list, but forming that list each step (the
Verlet pairs' cutoff filter, whose ``nonzero`` waits for the device; the copies into the padded
buffers; the uploads and the packing of the results) took ~45 launches and 4 host waits: at 864
atoms the GPU sat idle a third of a MACE-medium-shape step (session 18, H200).

``VerletGraphStep`` captures all of it: the stored pairs' vectors from the positions and cell
(``neighbors.pair_vectors``, the arithmetic of the eager filter), the cutoff test, the compaction
of the kept pairs into the padded edge slots (``PaddedGraph.load_kept``: a prefix sum and a search,
no host wait), the model, the shortest edge and the results packed into one float64 vector. Per
step the host writes positions and cell into a pinned buffer, copies it up asynchronously,
replays, copies the results down: three launches, one wait.

The edge count is known only after the replay, so the results carry it: a count the layout does
not fit (past the edge capacity, where the replay ran on padding only, or below its floor) re-lays
out, re-captures and reruns the step, so the layout always fits the last call's edges. The stored
pairs sit in buffers of a pair capacity (the padding pairs never kept), so Verlet-list rebuilds
reload them without a re-capture while they fit (and while the partners stay present or absent).
The edges equal those of ``VerletNeighborList.update`` (same pairs, order and
arithmetic), so a replay equals ``step.padded_step`` on them bitwise.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .neighbors import Pairs, pair_vectors, within_cutoff_mask
from .step import GROWTH, Layout, PaddedGraph, capacity, capture_or_warn

MODES = ("graph", "padded")


class VerletGraphStep:
    """``step(positions, cell, species, pairs)`` -> float64 host array ``[node energies (N),
    forces (3N), virial (9), shortest edge length (inf without edges), edge count]``.

    positions [N, 3], cell [3, 3]: float64 numpy arrays; species: [N] int64 on the device (loaded
    when a different tensor is passed); pairs: ``VerletNeighborList.pairs``; ``pair_weights``: pass
    their partners to the model (radial weights per pair). mode ``"graph"``: captured and replayed
    (CUDA); ``"padded"``: the same work run eagerly (other devices; also the fallback when a
    capture fails, with a warning).
    ``max_edges``: a new layout (first call, new atom count, an edge count the layout does not fit)
    for more edges than this returns ``None`` and releases the graph and buffers: large steps are
    GPU-bound and the padding costs; the caller runs its plain step.
    """

    def __init__(self, potential: torch.nn.Module, device: torch.device, dtype: Optional[torch.dtype] = None,
                 mode: str = "graph", max_edges: Optional[int] = None, pair_weights: bool = True,
                 growth: float = GROWTH, warmup: int = 2):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.potential = potential
        self.device = torch.device(device)
        self.mode = mode if self.device.type == "cuda" else "padded"
        self.max_edges = max_edges
        self.pair_weights = bool(pair_weights)
        self.growth = float(growth)
        self.warmup = int(warmup)
        self.cutoff = float(potential.cutoff)
        self.dtype = dtype or next((t.dtype for t in potential.state_dict().values() if t.is_floating_point()),
                                   torch.float64)
        self.layout: Optional[Layout] = None
        self.num_edges = 0  # of the last call
        self.num_captures = 0
        self.num_replays = 0
        self._padded: Optional[PaddedGraph] = None
        self._species: Optional[torch.Tensor] = None  # the tensor loaded into the padded buffers
        self._pairs: Optional[Pairs] = None  # the pairs loaded into the pair buffers
        self._pair_buffers: Optional[Pairs] = None  # (src, dst, S, partner) of pair_capacity rows
        self._pair_valid: Optional[torch.Tensor] = None
        self._x: Optional[torch.Tensor] = None  # [3N + 9] positions and cell on the device
        self._x_host: Optional[torch.Tensor] = None  # its staging buffer (pinned on CUDA)
        self._out_host: Optional[torch.Tensor] = None
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self._outputs: Optional[torch.Tensor] = None

    def __call__(self, positions: np.ndarray, cell: np.ndarray, species: torch.Tensor,
                 pairs: Pairs) -> Optional[np.ndarray]:
        n = positions.shape[0]
        self._upload(positions, cell)
        if pairs is not self._pairs:
            self._load_pairs(pairs)
        if self.layout is None or self.layout.num_nodes != n or self._padded is None:
            count = int(self._keep()[0].sum())  # waits for the device: first call, new layout
            if not self._lay_out(n, count):
                return None
            self._load_species(species)
        flat = self._run()
        count = int(flat[-1])
        # a count the layout does not fit: past the capacity the replay ran on padding only; far
        # below it the padding nodes were crowded (exact, but the layout must fit the last call's
        # edges, which the uncaptured reference, step.padded_step, needs): rerun on a new layout
        if not self.layout.fits(n, count):
            if not self._lay_out(n, count):
                return None
            self._load_species(species)
            flat = self._run()
        self.num_edges = count
        return flat

    def release(self) -> None:
        """Drop the graph (and its memory pool), the padded buffers and the pair buffers."""
        self._release()
        self.layout, self._padded, self._species = None, None, None
        self._pairs, self._pair_buffers, self._pair_valid = None, None, None

    # -- buffers ----------------------------------------------------------------------------------
    def _upload(self, positions: np.ndarray, cell: np.ndarray) -> None:
        """Positions and cell into the device buffer the graph reads (one asynchronous copy)."""
        size = positions.size + 9
        if self._x is None or self._x.numel() != size:
            self._x = torch.empty(size, dtype=torch.float64, device=self.device)
            self._x_host = torch.empty(size, dtype=torch.float64, pin_memory=self.device.type == "cuda")
            self._release()
        host = self._x_host.numpy()
        host[:-9] = positions.reshape(-1)
        host[-9:] = cell.reshape(-1)
        self._x.copy_(self._x_host, non_blocking=True)

    def _load_pairs(self, pairs: Pairs) -> None:
        src, dst, s, partner = pairs
        partner = partner if self.pair_weights else None
        p = int(src.shape[0])
        held = self._pair_buffers
        if held is None or held[0].shape[0] < p or (held[3] is None) != (partner is None):
            cap = capacity(max(p, 1), self.growth)
            rows = torch.arange(cap, dtype=torch.int64, device=self.device)
            self._pair_buffers = (torch.zeros_like(rows), torch.zeros_like(rows),
                                  torch.zeros((cap, 3), dtype=torch.int64, device=self.device),
                                  None if partner is None else rows.clone())
            self._pair_valid = torch.zeros(cap, dtype=torch.bool, device=self.device)
            self._release()
        b_src, b_dst, b_s, b_partner = self._pair_buffers
        b_src[:p].copy_(src)
        b_src[p:].zero_()
        b_dst[:p].copy_(dst)
        b_dst[p:].zero_()
        b_s[:p].copy_(s)
        b_s[p:].zero_()
        self._pair_valid[:p].fill_(True)
        self._pair_valid[p:].fill_(False)
        if b_partner is not None:  # padding pairs are their own partners
            b_partner[:p].copy_(partner)
            b_partner[p:].copy_(torch.arange(p, b_partner.shape[0], dtype=torch.int64, device=self.device))
        self._pairs = pairs

    def _load_species(self, species: torch.Tensor) -> None:
        if species is not self._species:
            self._padded.species[: species.shape[0]].copy_(species)
            self._species = species

    def _lay_out(self, n: int, num_edges: int) -> bool:
        """A new layout for ``num_edges`` (False, everything released: more than ``max_edges``)."""
        self.num_edges = num_edges
        if self.max_edges is not None and num_edges > self.max_edges:
            self.release()
            return False
        self._release()
        self.layout = Layout.for_graph(n, num_edges, self.growth)
        self._padded = PaddedGraph(self.layout, self.cutoff, self.dtype, self.device)
        self._species = None
        return True

    def _release(self) -> None:
        self._graph, self._outputs = None, None

    # -- the step ---------------------------------------------------------------------------------
    def _keep(self):
        """(keep [P], squared lengths [P], vectors [P, 3]) of the stored pairs now: within the
        cutoff, valid, and (with partners) both directions kept."""
        n = (self._x.numel() - 9) // 3
        pos, cell = self._x[:-9].view(n, 3), self._x[-9:].view(3, 3)
        src, dst, s, partner = self._pair_buffers
        vec = pair_vectors(pos, cell, src, dst, s)[1]
        keep, d2 = within_cutoff_mask(vec, self.cutoff, partner, self._pair_valid)
        return keep, d2, vec

    def _body(self) -> torch.Tensor:
        padded = self._padded
        with torch.no_grad():
            keep, d2, vec = self._keep()
            src, dst, _, partner = self._pair_buffers
            count = padded.load_kept(keep, src, dst, vec, partner)
            shortest = torch.where(keep, d2, torch.full_like(d2, float("inf"))).min().sqrt().reshape(1)
        out = padded.step(self.potential, dst_sorted=True)
        parts = [out["node_energies"], out["forces"], out["virial"]]
        with torch.no_grad():
            return torch.cat([p.reshape(-1).to(torch.float64) for p in parts] + [shortest, count.to(torch.float64)])

    def _run(self) -> np.ndarray:
        if self.mode == "graph" and self._graph is None:
            captured = capture_or_warn(self._body, self.device, self.warmup, self._release)
            if captured is None:
                self.mode = "padded"
            else:
                self._graph, self._outputs = captured
                self.num_captures += 1
        if self.mode == "graph":
            with torch.cuda.device(self.device):  # the graph's device, whichever is current
                self._graph.replay()
            self.num_replays += 1
            flat = self._outputs
        else:
            flat = self._body()
        if self._out_host is None or self._out_host.numel() != flat.numel():
            self._out_host = torch.empty(flat.numel(), dtype=torch.float64, pin_memory=self.device.type == "cuda")
        self._out_host.copy_(flat, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return self._out_host.numpy().copy()


__all__ = ["VerletGraphStep"]
