"""The chunked backward's per-chunk graphs (csrc/chunk_graph_kernels.cu), compiled for the host with
tests/cuda_emu, against a direct definition: for each chunk of `step` edges of a graph built by
build_graph (all chunks in one launch each), the positions of the global by-sender order whose edge
lies in the chunk, in that order, as chunk-local edge indices, with per-sender offsets, and the
receiver offsets of the chunk's edges. No GPU needed."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

from md_accel.ops.tp_conv import build_graph

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent

_WRAPPER = r"""
extern "C" const char* emu_runs(const int64_t* src_perm, const int64_t* src_ptr, const int64_t* dst_ptr, int64_t n,
                                int64_t E, int64_t step, int64_t chunks, int64_t* lo, int64_t* count, int64_t* dst_c) {
  return md_accel::chunk_sender_runs(src_perm, src_ptr, dst_ptr, n, E, step, chunks, lo, count, dst_c, nullptr);
}
extern "C" const char* emu_perm(const int64_t* src_perm, const int64_t* lo, const int64_t* ptr_c, int64_t n,
                                int64_t E, int64_t step, int64_t chunks, int64_t* perm) {
  return md_accel::chunk_sender_perm(src_perm, lo, ptr_c, n, E, step, chunks, perm, nullptr);
}
"""


@pytest.fixture(scope="module")
def lib():
    src = '#include "cuda_emu.h"\n' + (ROOT / "csrc" / "chunk_graph_kernels.cu").read_text() + _WRAPPER
    so = ctypes.CDLL(emulate.build(src))
    for fn in (so.emu_runs, so.emu_perm):
        fn.restype = ctypes.c_char_p
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    so.emu_runs.argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, ptr, ptr, ptr]
    so.emu_perm.argtypes = [ptr, ptr, ptr, i64, i64, i64, i64, ptr]
    return so


def _chunk_orders(lib, graph, step):
    """(sender offsets [C, N+1], by-sender orders [E], receiver offsets [C, N+1]) of the chunks
    [c * step, (c + 1) * step), as BwdChunks (csrc/tp_conv_chunked_cuda.cpp) builds them."""
    n, e = graph.src_ptr.numel() - 1, graph.src.numel()
    c = (e + step - 1) // step
    lo = torch.full((c, n), -7, dtype=torch.int64)
    count, dst_c = (torch.full((c, n + 1), -7, dtype=torch.int64) for _ in range(2))
    assert lib.emu_runs(graph.src_perm.data_ptr(), graph.src_ptr.data_ptr(), graph.dst_ptr.data_ptr(), n, e, step, c,
                        lo.data_ptr(), count.data_ptr(), dst_c.data_ptr()) is None
    assert (count[:, 0] == 0).all()
    ptr_c = count.cumsum(1)
    perm = torch.full((e,), -7, dtype=torch.int64)
    assert lib.emu_perm(graph.src_perm.data_ptr(), lo.data_ptr(), ptr_c.data_ptr(), n, e, step, c,
                        perm.data_ptr()) is None
    return ptr_c, perm, dst_c


def _expected(graph, e0, e1):
    """Direct definition: filter the global by-sender order to the range, count per sender."""
    perm, ptr = graph.src_perm, graph.src_ptr
    inside = (perm >= e0) & (perm < e1)
    sender = torch.repeat_interleave(torch.arange(ptr.numel() - 1), ptr.diff())
    counts = torch.bincount(sender[inside], minlength=ptr.numel() - 1)
    return torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]), perm[inside] - e0


@pytest.mark.parametrize("seed", [0, 1])
def test_chunk_orders_match_definition(lib, seed):
    g = torch.Generator().manual_seed(seed)
    n, e = 60, 900
    src = torch.randint(0, 45, (e,), generator=g)           # senders 45..59 have no edges
    dst = torch.randint(0, 50, (e,), generator=g)
    src = torch.cat([src, torch.full((120,), 7)])           # a hub sender
    dst = torch.cat([dst, torch.randint(0, 50, (120,), generator=g)])
    graph = build_graph(src, dst, n)
    edges = graph.src.numel()
    for step in (1, 97, 400, edges - 1, edges, edges + 5):  # one edge per chunk .. one chunk
        ptr_c, perm, dst_c = _chunk_orders(lib, graph, step)
        for c, e0 in enumerate(range(0, edges, step)):
            e1 = min(edges, e0 + step)
            want_ptr, want_perm = _expected(graph, e0, e1)
            assert torch.equal(ptr_c[c], want_ptr), (step, e0)
            assert torch.equal(perm[e0:e1], want_perm), (step, e0)
            # the chunk's receiver offsets: its edges of receiver r are dst_c[c, r] .. dst_c[c, r + 1]
            want_dst = torch.searchsorted(graph.dst[e0:e1], torch.arange(n + 1))
            assert torch.equal(dst_c[c], want_dst), (step, e0)
        # each chunk's order is a permutation of its own edges, so together they cover every edge once
        assert torch.equal((perm + torch.arange(edges) // step * step).sort().values, torch.arange(edges))
