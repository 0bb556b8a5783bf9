"""The whole step (energy, forces, virial) of a potential replayed from a CUDA graph.

Small systems are bound by kernel launches and host work, not by the GPU: a step launches
hundreds to thousands of small kernels. ``GraphedStep`` captures the step once per *layout*
(fixed node and edge counts) and replays it with one launch while the counts fit.

Padding. The real graph (``N`` nodes, ``E`` edges) is copied into static buffers of
``node_capacity`` nodes and ``edge_capacity`` edges (capacities on a geometric ladder, so they
change rarely). Padding nodes (species 0) follow the real ones; every padding edge is a
self-loop on a padding node, with the vector ``(cutoff, 0, 0)``; padding slots are assigned to
padding nodes in increasing order, so receiver-sorted real edges stay receiver-sorted padded. No edge joins a padding node
to a real one, so real nodes never see the padding; padding nodes are excluded from the energy
(``num_local``), so the gradient on padding edges is exactly zero and they add nothing to the
forces or the virial. The vector length is the cutoff because the envelopes vanish there
(``r < cutoff`` masks and polynomial/XPLOR envelopes), which keeps the padding nodes' values
small; the padding edges are spread over enough padding nodes that none receives more than a
few times the mean degree. Only finiteness matters for exactness: ``0 * finite = 0``. With edge
partners (pairs sharing radial weights, ``energy_forces_virial``'s ``edge_partner``), padding slot
``s`` is paired with slot ``s ^ 1`` (the real edges are paired among themselves, so their count is
even); all padding edges have the same length, so any two of them may share weights.

Per step. ``build_graph`` (sender sort, CSR offsets; the receiver sort too unless the edges
come receiver-sorted, ``dst_sorted``) runs in ``energy_forces_virial`` and is sync-free, so it
is part of the captured graph: each replay redoes it on the device in a few small kernels
(the cutoff filter of a Verlet list changes the edge set from step to step), and nothing is
rebuilt on the host while the counts fit the layout.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, TypeVar

import torch

from .model.potential import energy_forces_virial

GROWTH = 1.25  # capacity ladder ratio
ALIGN = 32  # capacities are multiples of this
PAD_DEGREE = 4  # a padding node receives at most ~PAD_DEGREE x the mean degree of the real graph
MODES = ("graph", "padded", "plain")
# ~6k atoms at 50 neighbours: larger graphs run uncaptured in GraphedStep(max_edges=...) and LAMMPS' cuda_graph auto;
# the Calculator times both ways there (md_accel.step_choice)
AUTO_MAX_EDGES = 300_000
T = TypeVar("T")


def capacity(n: int, growth: float = GROWTH) -> int:
    """Smallest rung >= ``n`` of the ladder ``32, 64, ..., c_{k+1} = roundup32(ceil(g c_k))``."""
    if growth <= 1:
        raise ValueError(f"growth must be > 1, got {growth}")
    c = ALIGN
    while c < n:
        c = max(c + ALIGN, -(-math.ceil(c * growth) // ALIGN) * ALIGN)
    return c


@dataclass(frozen=True)
class Layout:
    """Sizes of one captured step. It serves graphs of exactly ``num_nodes`` nodes and
    ``min_edges..edge_capacity`` edges; the lower bound keeps the padding nodes uncrowded and
    gives hysteresis (a layout is left only after a growth or a real drop)."""

    num_nodes: int
    node_capacity: int
    edge_capacity: int
    min_edges: int

    @classmethod
    def for_graph(cls, num_nodes: int, num_edges: int, growth: float = GROWTH) -> "Layout":
        e_cap = capacity(num_edges, growth)
        e_min = min(int(e_cap / growth**2), num_edges)
        degree = PAD_DEGREE * max(1, -(-num_edges // max(num_nodes, 1)))
        pad_nodes = max(1, -(-(e_cap - e_min) // degree))
        return cls(num_nodes, capacity(num_nodes + pad_nodes, growth), e_cap, e_min)

    def fits(self, num_nodes: int, num_edges: int) -> bool:
        return num_nodes == self.num_nodes and self.min_edges <= num_edges <= self.edge_capacity


class PaddedGraph:
    """Static input buffers of one layout; ``load`` writes a real graph into them in place
    (device-side copies only, no host synchronisation)."""

    def __init__(self, layout: Layout, pad_length: float, dtype: torch.dtype, device: torch.device):
        n, n_cap, e_cap = layout.num_nodes, layout.node_capacity, layout.edge_capacity
        self.layout = layout
        # edge slot s >= min_edges, when padding, is a self-loop on padding node
        # n + (s - min_edges) * (n_cap - n) // (e_cap - min_edges): non-decreasing in s, even spread
        slots = (torch.arange(e_cap, dtype=torch.int64, device=device) - layout.min_edges).clamp(min=0)
        self._pad_node = n + slots * (n_cap - n) // max(e_cap - layout.min_edges, 1)
        self._pad_vec = torch.zeros((e_cap, 3), dtype=dtype, device=device)
        self._pad_vec[:, 0] = pad_length
        self.species = torch.zeros(n_cap, dtype=torch.int64, device=device)
        self.src = self._pad_node.clone()
        self.dst = self._pad_node.clone()
        self.vec = self._pad_vec.clone()
        self._pad_partner = torch.arange(e_cap, dtype=torch.int64, device=device) ^ 1
        self._ranks = torch.arange(1, e_cap + 1, dtype=torch.int64, device=device)  # load_kept's slot ranks
        self.partner: Optional[torch.Tensor] = None  # loaded with partners: [e_cap]
        self._loaded = 0  # real edges currently in the buffers

    @torch.no_grad()
    def load(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
             edge_dst: torch.Tensor, edge_partner: Optional[torch.Tensor] = None) -> None:
        e = int(edge_src.shape[0])
        if not self.layout.fits(int(species.shape[0]), e):
            raise ValueError(f"graph of {species.shape[0]} nodes, {e} edges does not fit {self.layout}")
        if edge_partner is not None:
            if e % 2:
                raise ValueError(f"edge partners need paired edges, got {e} edges")
            if self.partner is None:
                self.partner = self._pad_partner.clone()
            self.partner[:e].copy_(edge_partner)
            self.partner[e:].copy_(self._pad_partner[e:])
        else:
            self.partner = None
        self.species[: self.layout.num_nodes].copy_(species)
        self.src[:e].copy_(edge_src)
        self.dst[:e].copy_(edge_dst)
        self.vec[:e].copy_(edge_vec)  # casts like edge_vec.to(dtype)
        if e < self._loaded:  # slots that held real edges last time become padding again
            self.src[e:self._loaded].copy_(self._pad_node[e:self._loaded])
            self.dst[e:self._loaded].copy_(self._pad_node[e:self._loaded])
            self.vec[e:self._loaded].copy_(self._pad_vec[e:self._loaded])
        self._loaded = e

    @torch.no_grad()
    def load_kept(self, keep: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, vec: torch.Tensor,
                  partner: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``load`` of the pairs where ``keep`` [P] is true, in order (species are loaded apart),
        without a host synchronisation: slot ``t`` takes the pair at which the running count of kept
        pairs reaches ``t + 1`` (a search in the prefix sum); slots past the count become padding.
        Returns the count ([1], on the device), which the caller checks: past the edge capacity,
        every slot is padding (a kept edge's reverse could lie past it, leaving a partner index out
        of range). ``partner`` [P]: each pair's reverse (kept exactly when it is)."""
        if keep.shape[0] == 0:
            raise ValueError("load_kept needs at least one (possibly unkept) pair")
        cs = torch.cumsum(keep.to(torch.int64), 0)
        k = torch.searchsorted(cs, self._ranks)
        real = (k < keep.shape[0]) & (cs[-1:] <= self.layout.edge_capacity)
        k = k.clamp_(max=keep.shape[0] - 1)
        self.src.copy_(torch.where(real, src[k], self._pad_node))
        self.dst.copy_(torch.where(real, dst[k], self._pad_node))
        self.vec.copy_(torch.where(real[:, None], vec[k].to(self.vec.dtype), self._pad_vec))
        if partner is None:
            self.partner = None
        else:
            if self.partner is None:
                self.partner = self._pad_partner.clone()
            self.partner.copy_(torch.where(real, cs[partner[k]] - 1, self._pad_partner))
        self._loaded = self.layout.edge_capacity  # any slot may hold a real edge now
        return cs[-1:]

    def step(self, potential: torch.nn.Module, dst_sorted: bool = False) -> Dict[str, torch.Tensor]:
        """Energy, node energies and forces of the real nodes, and the virial (detached).
        ``dst_sorted``: the loaded edges are sorted by receiver."""
        n = self.layout.num_nodes
        with torch.enable_grad():
            out = energy_forces_virial(potential, self.species, self.vec, self.src, self.dst, num_local=n,
                                       dst_sorted=dst_sorted, edge_partner=self.partner)
        return {"energy": out["energy"].detach(), "node_energies": out["node_energies"].detach(),
                "forces": out["forces"][:n].detach(), "virial": out["virial"].detach()}


def padded_step(potential: torch.nn.Module, species: torch.Tensor, edge_vec: torch.Tensor,
                edge_src: torch.Tensor, edge_dst: torch.Tensor, layout: Optional[Layout] = None,
                dtype: Optional[torch.dtype] = None, pad_length: Optional[float] = None,
                dst_sorted: bool = False, edge_partner: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
    """The step on padded inputs, uncaptured (the reference a graph replay must equal bitwise).
    ``layout`` defaults to ``Layout.for_graph``, ``dtype`` to ``edge_vec``'s, ``pad_length``
    (of the padding edge vectors) to the cutoff."""
    if layout is None:
        layout = Layout.for_graph(int(species.shape[0]), int(edge_src.shape[0]))
    length = float(potential.cutoff) if pad_length is None else float(pad_length)
    padded = PaddedGraph(layout, length, dtype or edge_vec.dtype, edge_vec.device)
    padded.load(species, edge_vec, edge_src, edge_dst, edge_partner)
    return padded.step(potential, dst_sorted)


_CAPTURE_STREAMS: Dict[int, torch.cuda.Stream] = {}


def capture_stream(device: torch.device) -> torch.cuda.Stream:
    """One stream per device for every warm-up and capture: torch keeps a cuBLAS workspace (32 MiB
    on Hopper) per (handle, stream) for the life of the process, so a new stream per capture would
    leave more behind each time, and a capture on another stream than its warm-up would double
    them (seen with benchmarks/memory_breakdown.py)."""
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    if index not in _CAPTURE_STREAMS:
        _CAPTURE_STREAMS[index] = torch.cuda.Stream(device=index)
    return _CAPTURE_STREAMS[index]


def capture(step: Callable[[], T], device: torch.device, warmup: int = 2) -> Tuple[torch.cuda.CUDAGraph, T]:
    """(graph, outputs) of ``step`` captured on ``device``: warm-up calls on the capture stream first
    (the first calls of the custom ops read their plans on the host, cuBLAS sets up its
    workspaces), then one captured call on the same stream. ``outputs`` are the graph's static
    output tensors, rewritten by each replay."""
    with torch.cuda.device(device):
        side = capture_stream(device)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):  # the warm-up's stream: its cuBLAS workspaces serve
            outputs = step()
    return graph, outputs


def capture_or_warn(step: Callable[[], T], device: torch.device, warmup: int,
                    release: Callable[[], None]) -> Optional[Tuple[torch.cuda.CUDAGraph, T]]:
    """``capture``, or None with a warning where the capture fails (an op that synchronises with the
    host, an unsupported kernel, ...): the caller then runs the step uncaptured. Out of memory
    propagates. ``release`` (the caller's buffers and graph) runs on either failure."""
    try:
        return capture(step, device, warmup)
    except torch.OutOfMemoryError:
        release()
        raise
    except Exception as exc:  # noqa: BLE001
        release()
        warnings.warn(f"md_accel: CUDA graph capture failed, running the step uncaptured "
                      f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        return None


class GraphedStep:
    """``step(species, edge_vec, edge_src, edge_dst, edge_partner=None)`` -> ``energy``,
    ``node_energies`` [N], ``forces`` [N, 3], ``virial`` [3, 3], all detached. ``edge_partner``:
    see ``energy_forces_virial`` (a change between with and without partners recaptures).

    mode ``"graph"`` (CUDA inputs): padded, captured in a CUDA graph per layout and replayed;
    the results are views of the graph's static outputs, overwritten by the next call (copy them
    to keep them). On other devices, or if capture fails (a warning says why), it runs
    ``"plain"``. ``"padded"``: padded, uncaptured (fresh tensors). ``"plain"``:
    ``energy_forces_virial`` on the inputs as given.

    dtype: compute dtype of the edge vectors (default: the first floating parameter or buffer of
    the potential); inputs are cast while copied into the buffers. The potential's parameters
    should not require grad (a frozen model), else every step also accumulates their gradients.
    dst_sorted: every call's edges come sorted by receiver (md_accel's neighbour lists).
    max_edges: graphs with more edges run ``"plain"`` (large steps are GPU-bound; padding costs).
    """

    AUTO_MAX_EDGES = AUTO_MAX_EDGES

    def __init__(self, potential: torch.nn.Module, mode: str = "graph", growth: float = GROWTH,
                 warmup: int = 2, dtype: Optional[torch.dtype] = None, dst_sorted: bool = False,
                 max_edges: Optional[int] = None):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if growth <= 1:
            raise ValueError(f"growth must be > 1, got {growth}")
        self.potential = potential
        self.mode = mode
        self.growth = float(growth)
        self.warmup = int(warmup)
        self.dst_sorted = bool(dst_sorted)
        self.max_edges = max_edges
        self.dtype = dtype or next((t.dtype for t in potential.state_dict().values() if t.is_floating_point()),
                                   torch.float64)
        self.layout: Optional[Layout] = None
        self.num_captures = 0
        self.num_replays = 0
        self._padded: Optional[PaddedGraph] = None
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self._outputs: Optional[Dict[str, torch.Tensor]] = None

    def __call__(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                 edge_dst: torch.Tensor, edge_partner: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        mode = self.mode if edge_vec.is_cuda or self.mode != "graph" else "plain"
        if self.max_edges is not None and edge_src.shape[0] > self.max_edges:
            mode = "plain"
        if mode == "plain":
            out = energy_forces_virial(self.potential, species, edge_vec.detach().to(self.dtype), edge_src, edge_dst,
                                       dst_sorted=self.dst_sorted, edge_partner=edge_partner)
            return {k: out[k].detach() for k in ("energy", "node_energies", "forces", "virial")}
        n, e = int(species.shape[0]), int(edge_src.shape[0])
        new_layout = self.layout is None or not self.layout.fits(n, e) or self._padded is None \
            or self._padded.vec.device != edge_vec.device \
            or (self._padded.partner is None) != (edge_partner is None)
        if new_layout:
            self._release()
            self.layout = Layout.for_graph(n, e, self.growth)
            self._padded = PaddedGraph(self.layout, float(self.potential.cutoff), self.dtype, edge_vec.device)
        assert self._padded is not None
        self._padded.load(species, edge_vec.detach(), edge_src, edge_dst, edge_partner)
        if mode == "padded":
            return self._padded.step(self.potential, self.dst_sorted)
        if self._graph is None:
            padded = self._padded
            captured = capture_or_warn(lambda: padded.step(self.potential, self.dst_sorted), edge_vec.device,
                                       self.warmup, self._release)
            if captured is None:
                self.mode = "plain"
                return self(species, edge_vec, edge_src, edge_dst, edge_partner)
            self._graph, self._outputs = captured
            self.num_captures += 1
        assert self._graph is not None and self._outputs is not None
        self._graph.replay()
        self.num_replays += 1
        return dict(self._outputs)

    def _release(self) -> None:
        self._graph, self._outputs = None, None
        self._padded, self.layout = None, None


__all__ = ["GraphedStep", "Layout", "PaddedGraph", "padded_step", "capacity", "capture", "capture_or_warn",
           "capture_stream", "AUTO_MAX_EDGES"]
