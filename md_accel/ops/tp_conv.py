"""``TensorProductConv``: 'uvu' Clebsch-Gordan tensor product with per-edge weights, fused with
the sum over neighbours; e3nn semantics (see docs/architecture.md)."""

import os
import warnings
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch

from .tp_problem import TPProblem
from .tp_reference import tp_conv_fused_fwd_ref, tp_conv_fwd_ref


class Graph(NamedTuple):
    """Edges sorted by receiver with CSR offsets, and the transposed (by-sender) order.

    Built once per neighbour list (``build_graph``) and reused by every layer and step.
    ``perm`` maps sorted position -> original edge index.

    Weight rows (``w_row`` [E], ``row_edge`` [P], or both ``None``): edges whose radial weights
    are equal share one row, computed once. Built from each edge's reverse (``partner``): the two
    directions of a pair have the same length, and the radial MLPs see only the length, so
    ``P = E / 2`` rows (``weight_rows``, ``per_edge``). Row ``p`` is that of edge ``row_edge[p]``.
    """

    src: torch.Tensor
    dst: torch.Tensor
    dst_ptr: torch.Tensor
    src_perm: torch.Tensor
    src_ptr: torch.Tensor
    perm: torch.Tensor
    w_row: Optional[torch.Tensor]
    row_edge: Optional[torch.Tensor]


def pair_rows(partner: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(w_row, row_edge)`` of edges paired by ``partner`` (the index of each edge's reverse:
    ``partner[partner[e]] == e != partner[e]`` for every edge, so ``E`` is even): the rows are
    numbered in the order of the pairs' first edges. Sync-free (``P = E // 2`` is known)."""
    n = partner.shape[0]
    e = torch.arange(n, dtype=torch.int64, device=partner.device)
    first = (partner > e).to(torch.int64)
    rank = torch.cumsum(first, 0)  # pairs whose first edge is at or before e
    w_row = rank.index_select(0, torch.minimum(e, partner)) - 1
    row_edge = torch.searchsorted(rank, torch.arange(1, n // 2 + 1, dtype=torch.int64, device=partner.device))
    return w_row, row_edge


def check_partners(partner: torch.Tensor, num_edges: int) -> None:
    """ValueError unless ``partner`` pairs every one of ``num_edges`` edges with another edge
    (``partner[partner[e]] == e != partner[e]``). Synchronises with the device (not for capture)."""
    p = partner.to(torch.int64)
    ok = p.shape == (num_edges,) and num_edges % 2 == 0
    if ok and num_edges > 0:  # one synchronisation: range, no fixed point, an involution
        e = torch.arange(num_edges, dtype=torch.int64, device=p.device)
        q = p.clamp(0, num_edges - 1)
        ok = bool(((p == q) & (p != e) & (q.index_select(0, q) == e)).all())
    if not ok:
        raise ValueError(f"edge_partner must pair each of the {num_edges} edges with another one "
                         "(partner[partner[e]] == e != partner[e])")


def weight_rows(t: torch.Tensor, graph: Optional[Graph]) -> torch.Tensor:
    """Per-edge ``t`` -> one row per weight row of ``graph`` (unchanged where edges do not share)."""
    if graph is not None:
        rows = graph.row_edge  # a local: TorchScript refines locals, not attributes
        if rows is not None:
            return t.index_select(0, rows)
    return t


def per_edge(t: torch.Tensor, graph: Optional[Graph]) -> torch.Tensor:
    """One row per weight row of ``graph`` -> per edge (the inverse direction of ``weight_rows``)."""
    if graph is not None:
        w_row = graph.w_row
        if w_row is not None:
            return t.index_select(0, w_row)
    return t


def build_graph(edge_src: torch.Tensor, edge_dst: torch.Tensor, num_nodes: int, dst_sorted: bool = False,
                partner: Optional[torch.Tensor] = None) -> Graph:
    """Sort edges by receiver (stable) and precompute segment offsets for both directions.

    ``dst_sorted``: the caller guarantees ``edge_dst`` is non-decreasing (md_accel's neighbour
    lists and the padded CUDA-graph buffers are), so only the by-sender order is sorted.
    ``partner``: each edge's reverse (see ``pair_rows``; the caller guarantees a complete
    pairing of edges of equal length), giving the graph's weight rows.
    Only sorts and binary searches: no host synchronisation, so it can sit inside a captured
    CUDA graph and costs a few small kernels per neighbour list.
    """
    edge_src = edge_src.to(torch.int64)
    edge_dst = edge_dst.to(torch.int64)
    if dst_sorted:
        perm = torch.arange(edge_dst.shape[0], dtype=torch.int64, device=edge_dst.device)
        src, dst = edge_src, edge_dst
    else:
        perm = torch.argsort(edge_dst, stable=True)
        src = edge_src.index_select(0, perm)
        dst = edge_dst.index_select(0, perm)
    nodes = torch.arange(num_nodes + 1, dtype=torch.int64, device=dst.device)
    dst_ptr = torch.searchsorted(dst, nodes)
    src_perm = torch.argsort(src, stable=True)
    src_ptr = torch.searchsorted(src.index_select(0, src_perm), nodes)
    w_row: Optional[torch.Tensor] = None
    row_edge: Optional[torch.Tensor] = None
    if partner is not None:
        if not dst_sorted:  # partner in the sorted order: position of the reverse of perm[k]
            inv = torch.empty_like(perm).scatter_(0, perm, torch.arange(perm.shape[0], dtype=torch.int64,
                                                                        device=perm.device))
            partner = inv.index_select(0, partner.to(torch.int64).index_select(0, perm))
        w_row, row_edge = pair_rows(partner.to(torch.int64))
    return Graph(src, dst, dst_ptr, src_perm, src_ptr, perm, w_row, row_edge)


def graph_order(edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor, num_nodes: int,
                graph: Optional[Graph]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[Graph]]:
    """``(edge_vec, edge_src, edge_dst, graph)`` in the receiver-sorted order the CUDA kernels
    need: as given when ``graph`` is (the edges are then already in its order), else on CUDA a
    new graph and the edges permuted into it; on the CPU unchanged with no graph."""
    if graph is None and edge_vec.is_cuda:
        graph = build_graph(edge_src, edge_dst, num_nodes)
        return edge_vec.index_select(0, graph.perm), graph.src, graph.dst, graph
    return edge_vec, edge_src, edge_dst, graph


_SPECIALISE_WARNED = []

# ``forward_fused`` (w = hidden @ W_last inside md_accel::tp_conv_fused_*) runs one of two ways on CUDA:
# - fused kernels that compute w per 16-edge tile on the tensor cores and never store it (opt-in,
#   MD_ACCEL_FUSED_RADIAL=1: 4-5x less memory but slower; H200 2026-11-26, SevenNet-l3i5 32k Cu
#   atoms, energy+forces float32 495 ms vs 189 ms materialised, float64 672 vs 328 ms;
#   docs/benchmarks.md, session 13);
# - otherwise materialised one chunk of edges at a time (csrc/tp_conv_chunked.h): w_c = hidden_c @ W
#   on tensor cores, recomputed in the backward, so neither w nor grad_w exists whole.
# ``use_fused`` takes it when the fused kernels are on, or when keeping the whole w for the backward
# would take more than MD_ACCEL_SAVE_WEIGHTS_MIB (default 2048) MiB: above that the memory saved is
# worth the backward's second GEMM. Graphs with weight rows (pairs of edges) take it at every size:
# md_accel::tp_conv_pair_fwd holds the P rows instead of the E per-edge weights, and on small graphs
# none for the backward (csrc/tp_conv_chunked.h); H200 2026-11-26, MACE-MP-0-medium shape float32,
# 864 / 4,000 Cu atoms, 4.7 / 12.5 ms against 5.8 / 16.5 ms with the whole per-edge weights.
FUSED_RADIAL_DTYPES = (torch.float32, torch.float64)  # float64 since the weights run on DMMA
FUSED_RADIAL_ENV = "MD_ACCEL_FUSED_RADIAL"
SAVE_WEIGHTS_ENV = "MD_ACCEL_SAVE_WEIGHTS_MIB"


def _save_weights_bytes() -> int:
    return int(float(os.environ.get(SAVE_WEIGHTS_ENV, "2048")) * 2 ** 20)


def _specialise(conv: "TensorProductConv") -> None:
    """Build/load the CUDA kernels generated for this problem (cached on disk), and the fused-radial
    ones when ``conv.fused_hidden`` is set; the generic kernels (the materialised path for the fused
    op) serve it when that is not possible, with a one-time warning saying why."""
    from . import _cuda

    if not _cuda.available():
        return
    try:
        _cuda.specialise(conv, conv.paths.device)
    except Exception as e:  # no nvcc at run time, unsupported toolchain, ...
        if not _SPECIALISE_WARNED:
            _SPECIALISE_WARNED.append(True)
            warnings.warn(f"md_accel: using the generic CUDA kernels ({type(e).__name__}: {e})")
    built = False
    if conv.fused_hidden > 0 and os.environ.get(FUSED_RADIAL_ENV, "0") == "1":
        try:
            built = _cuda.specialise_fused(conv, conv.fused_hidden, conv.paths.device) is not None
        except Exception as e:
            if not _SPECIALISE_WARNED:
                _SPECIALISE_WARNED.append(True)
                warnings.warn(f"md_accel: no fused radial kernels ({type(e).__name__}: {e})")
    conv.fused_f32 = built and torch.float32 in FUSED_RADIAL_DTYPES
    conv.fused_f64 = built and torch.float64 in FUSED_RADIAL_DTYPES


class TensorProductConv(torch.nn.Module):
    """``forward(x, edge_attr, edge_weights, edge_src, edge_dst, num_nodes)`` equals
    ``scatter_sum(e3nn TensorProduct(x[src], edge_attr, edge_weights), dst, num_nodes)`` with
    ``shared_weights=False, internal_weights=False`` and 'uvu' instructions.

    On CUDA it runs md_accel's fused kernels (``torch.ops.md_accel.tp_conv_fwd``); elsewhere the
    plain-torch reference, which TorchScript can export and autograd differentiates.

    ``forward_fused(x, edge_attr, hidden, w_last, ...)`` is ``forward`` with ``edge_weights = hidden @
    w_last`` (the radial MLP's last, linear layer) computed inside the op, never stored whole. Set
    ``fused_hidden`` to the hidden width before moving the module to CUDA; ``use_fused(x, num_edges)``
    says when to call it.
    """

    def __init__(
        self,
        irreps_in1,
        irreps_in2,
        irreps_out,
        instructions: Sequence,
        irrep_normalization: str = "component",
        path_normalization: str = "element",
    ):
        super().__init__()
        problem = TPProblem.create(irreps_in1, irreps_in2, irreps_out, instructions,
                                   irrep_normalization, path_normalization)
        plan = problem.lower()
        self.problem = problem
        self.irreps_in1, self.irreps_in2, self.irreps_out = problem.irreps_in1, problem.irreps_in2, problem.irreps_out
        self.irreps_text: List[str] = [str(problem.irreps_in1), str(problem.irreps_in2), str(problem.irreps_out)]
        self.dim_in1: int = plan.dim_in1
        self.dim_in2: int = plan.dim_in2
        self.dim_out: int = plan.dim_out
        self.weight_numel: int = plan.weight_numel
        self.path_list: List[List[int]] = plan.paths.tolist()
        self.cg_dense: List[torch.Tensor] = plan.dense
        self.cg_dense64: List[torch.Tensor] = list(plan.dense)  # float64, on the CPU, never changed
        self.register_buffer("paths", plan.paths, persistent=False)
        self.register_buffer("cg_ptr", plan.cg_ptr, persistent=False)
        self.register_buffer("cg_idx", plan.cg_idx, persistent=False)
        self.register_buffer("cg_val", plan.cg_val, persistent=False)
        # the float64 values whatever the module's dtype: compiled into the generated kernels
        self.cg_values: List[float] = plan.cg_val.tolist()
        self.fused_hidden: int = 0  # hidden width of the fused radial layer (0: none)
        self.fused_f32: bool = False  # use_fused, per dtype (set when moved to CUDA)
        self.fused_f64: bool = False
        self.save_weights_bytes: int = _save_weights_bytes()  # above: forward_fused recomputes w per chunk

    def _apply(self, fn, recurse=True):
        # The CG values of both paths (the reference's dense blocks, the CUDA op's cg_val) follow the
        # module's device and dtype, made from the exact float64 ones: a float32 -> float64 round trip
        # would otherwise keep float32-rounded values (and cg_val would miss the generated kernels).
        out = super()._apply(fn, recurse)
        dtype, device = self.cg_val.dtype, self.cg_val.device
        self.cg_dense = [c.to(device=device, dtype=dtype) for c in self.cg_dense64]
        self.cg_val = torch.tensor(self.cg_values, dtype=dtype, device=device)
        if self.paths.is_cuda:
            _specialise(self)
        return out

    def forward(
        self,
        x: torch.Tensor,
        edge_attr: torch.Tensor,
        edge_weights: torch.Tensor,
        edge_src: torch.Tensor,
        edge_dst: torch.Tensor,
        num_nodes: int,
        graph: Optional[Graph] = None,
    ) -> torch.Tensor:
        self._check(x, edge_attr, edge_weights, edge_src, edge_dst, num_nodes)
        if x.is_cuda:
            if graph is None:
                graph = build_graph(edge_src, edge_dst, num_nodes)
                edge_attr = edge_attr.index_select(0, graph.perm)
                edge_weights = edge_weights.index_select(0, graph.perm)
            # cg_val as it is (the op converts it to x's dtype): the op's check of it against the
            # generated libraries then runs once per buffer, also when x's dtype is not the module's
            return torch.ops.md_accel.tp_conv_fwd(
                x.contiguous(), edge_attr.contiguous(), edge_weights.contiguous(),
                graph.src, graph.dst, graph.dst_ptr, graph.src_perm, graph.src_ptr,
                self.paths, self.cg_ptr, self.cg_idx, self.cg_val, self.dim_out,
            )
        return tp_conv_fwd_ref(x, edge_attr, edge_weights, edge_src, edge_dst, num_nodes,
                               self.path_list, self.cg_dense, self.dim_out)

    def _fused_kernels(self, x: torch.Tensor) -> bool:
        """Whether fused-radial kernels (weights never stored) serve features like ``x``."""
        return (x.dtype == torch.float32 and self.fused_f32) or (x.dtype == torch.float64 and self.fused_f64)

    def use_fused(self, x: torch.Tensor, num_edges: int, graph: Optional[Graph] = None) -> bool:
        """Whether to call ``forward_fused`` for features like ``x`` on ``num_edges`` edges: on CUDA,
        with ``fused_hidden`` set, when ``graph`` has weight rows (the pair op, at every size: it
        also holds less than whole per-edge weights), when fused-radial kernels serve the dtype, or
        when the whole per-edge weights would exceed ``save_weights_bytes`` (then they are
        materialised in chunks)."""
        if not x.is_cuda or self.fused_hidden <= 0:
            return False
        if graph is not None:
            w_row = graph.w_row
            if w_row is not None:
                return True
        if self._fused_kernels(x):
            return True
        elem = 8 if x.dtype == torch.float64 else 4
        return num_edges * self.weight_numel * elem > self.save_weights_bytes

    def forward_fused(
        self,
        x: torch.Tensor,
        edge_attr: torch.Tensor,
        hidden: torch.Tensor,
        w_last: torch.Tensor,
        edge_src: torch.Tensor,
        edge_dst: torch.Tensor,
        num_nodes: int,
        graph: Optional[Graph] = None,
    ) -> torch.Tensor:
        """``forward(x, edge_attr, hidden @ w_last, ...)``; on CUDA ``md_accel::tp_conv_fused_fwd``
        (the per-edge weights are never stored), elsewhere the reference. Where ``graph`` has weight
        rows, ``hidden`` has one row per weight row (``weight_rows``) and the op is
        ``md_accel::tp_conv_pair_fwd``."""
        e = edge_src.shape[0]
        rows = e
        if graph is not None:
            row_edge = graph.row_edge
            if row_edge is not None:
                rows = row_edge.shape[0]
        if hidden.dim() != 2 or hidden.shape[0] != rows:
            raise ValueError(f"hidden must be [{rows}, H], got {list(hidden.shape)}")
        if w_last.dim() != 2 or w_last.shape[0] != hidden.shape[1] or w_last.shape[1] != self.weight_numel:
            raise ValueError(f"w_last must be [{hidden.shape[1]}, {self.weight_numel}], got {list(w_last.shape)}")
        if hidden.dtype != x.dtype or w_last.dtype != x.dtype:
            raise TypeError(f"dtype mismatch: x {x.dtype}, hidden {hidden.dtype}, w_last {w_last.dtype}")
        if hidden.device != x.device or w_last.device != x.device:
            raise ValueError("all inputs must be on the same device")
        self._check_common(x, edge_attr, edge_src, edge_dst, num_nodes)
        if graph is not None:
            w_row = graph.w_row
            if w_row is not None:
                if x.is_cuda and not self._fused_kernels(x):
                    return torch.ops.md_accel.tp_conv_pair_fwd(
                        x.contiguous(), edge_attr.contiguous(), hidden.contiguous(), w_last.contiguous(), w_row,
                        graph.src, graph.dst, graph.dst_ptr, graph.src_perm, graph.src_ptr,
                        self.paths, self.cg_ptr, self.cg_idx, self.cg_val, self.dim_out,
                    )
                # the rows expanded per edge: the reference, or the fused-radial kernels (which never
                # store the weights, so there is nothing to share)
                hidden = hidden.index_select(0, w_row)
        if x.is_cuda:
            if graph is None:
                graph = build_graph(edge_src, edge_dst, num_nodes)
                edge_attr = edge_attr.index_select(0, graph.perm)
                hidden = hidden.index_select(0, graph.perm)
            return torch.ops.md_accel.tp_conv_fused_fwd(
                x.contiguous(), edge_attr.contiguous(), hidden.contiguous(), w_last.contiguous(),
                graph.src, graph.dst, graph.dst_ptr, graph.src_perm, graph.src_ptr,
                self.paths, self.cg_ptr, self.cg_idx, self.cg_val, self.dim_out,
            )
        return tp_conv_fused_fwd_ref(x, edge_attr, hidden, w_last, edge_src, edge_dst, num_nodes,
                                     self.path_list, self.cg_dense, self.dim_out)

    def _check(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, src: torch.Tensor,
               dst: torch.Tensor, num_nodes: int) -> None:
        e = src.shape[0]
        if w.dim() != 2 or w.shape[0] != e or w.shape[1] != self.weight_numel:
            raise ValueError(f"edge_weights must be [{e}, {self.weight_numel}], got {list(w.shape)}")
        if w.dtype != x.dtype:
            raise TypeError(f"dtype mismatch: x {x.dtype}, edge_weights {w.dtype}")
        if w.device != x.device:
            raise ValueError("all inputs must be on the same device")
        self._check_common(x, y, src, dst, num_nodes)

    def _check_common(self, x: torch.Tensor, y: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
                      num_nodes: int) -> None:
        if x.dim() != 2 or x.shape[1] != self.dim_in1:
            raise ValueError(f"x must be [num_nodes, {self.dim_in1}] ({self.irreps_text[0]}), got {list(x.shape)}")
        if x.shape[0] != num_nodes:
            raise ValueError(f"x has {x.shape[0]} rows but num_nodes={num_nodes}")
        e = src.shape[0]
        if y.dim() != 2 or y.shape[0] != e or y.shape[1] != self.dim_in2:
            raise ValueError(f"edge_attr must be [{e}, {self.dim_in2}] ({self.irreps_text[1]}), got {list(y.shape)}")
        if dst.shape[0] != e or src.dim() != 1 or dst.dim() != 1:
            raise ValueError("edge_src and edge_dst must be 1-D and of equal length")
        if src.dtype not in (torch.int64, torch.int32) or dst.dtype not in (torch.int64, torch.int32):
            raise TypeError("edge_src / edge_dst must be integer tensors")
        if y.dtype != x.dtype:
            raise TypeError(f"dtype mismatch: x {x.dtype}, edge_attr {y.dtype}")
        if y.device != x.device or src.device != x.device or dst.device != x.device:
            raise ValueError("all inputs must be on the same device")

    def extra_repr(self) -> str:
        return f"{self.irreps_in1} x {self.irreps_in2} -> {self.irreps_out}, {len(self.path_list)} paths"
