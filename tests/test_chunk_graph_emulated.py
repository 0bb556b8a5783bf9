"""The chunked backward's per-chunk by-sender order (csrc/chunk_graph_kernels.cu), compiled for the
host with tests/cuda_emu, against a direct definition: for the edge range [e0, e1) of a graph built
by build_graph, the positions of the global by-sender order whose edge lies in the range, in
that order, as chunk-local edge indices, with per-sender offsets, and the receiver offsets of the
chunk's edges. No GPU needed."""
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
                                int64_t e0, int64_t e1, int64_t* lo, int64_t* count, int64_t* dst_c, int64_t* ptr_c) {
  return md_accel::chunk_sender_runs(src_perm, src_ptr, dst_ptr, n, e0, e1, lo, count, dst_c, ptr_c, nullptr);
}
extern "C" const char* emu_perm(const int64_t* src_perm, const int64_t* lo, const int64_t* ptr_c, int64_t n,
                                int64_t e0, int64_t num_c, int64_t* perm_c) {
  return md_accel::chunk_sender_perm(src_perm, lo, ptr_c, n, e0, num_c, perm_c, nullptr);
}
"""


@pytest.fixture(scope="module")
def lib():
    src = '#include "cuda_emu.h"\n' + (ROOT / "csrc" / "chunk_graph_kernels.cu").read_text() + _WRAPPER
    so = ctypes.CDLL(emulate.build(src))
    for fn in (so.emu_runs, so.emu_perm):
        fn.restype = ctypes.c_char_p
    so.emu_runs.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    so.emu_perm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_int64, ctypes.c_void_p]
    return so


def _chunk_order(lib, graph, e0, e1):
    """(sender offsets, by-sender order, receiver offsets) of the chunk, as make_chunk builds them."""
    n = graph.src_ptr.numel() - 1
    lo, count = (torch.full((n,), -7, dtype=torch.int64) for _ in range(2))
    dst_c, ptr_c = (torch.full((n + 1,), -7, dtype=torch.int64) for _ in range(2))
    assert lib.emu_runs(graph.src_perm.data_ptr(), graph.src_ptr.data_ptr(), graph.dst_ptr.data_ptr(), n, e0, e1,
                        lo.data_ptr(), count.data_ptr(), dst_c.data_ptr(), ptr_c.data_ptr()) is None
    assert ptr_c[0] == 0 and (ptr_c[1:] == -7).all()  # the kernel writes only the first offset
    ptr_c[1:] = count.cumsum(0)
    perm_c = torch.full((int(ptr_c[-1]),), -7, dtype=torch.int64)
    assert lib.emu_perm(graph.src_perm.data_ptr(), lo.data_ptr(), ptr_c.data_ptr(), n, e0, perm_c.numel(),
                        perm_c.data_ptr()) is None
    return ptr_c, perm_c, dst_c


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
    chunking = [(a, min(edges, a + 97)) for a in range(0, edges, 97)]
    ranges = [(0, edges), (0, 1), (edges - 1, edges), (137, 400), (400, 401), (500, edges)] + chunking
    covered = torch.zeros(edges, dtype=torch.int64)
    for e0, e1 in ranges:
        ptr_c, perm_c, dst_c = _chunk_order(lib, graph, e0, e1)
        want_ptr, want_perm = _expected(graph, e0, e1)
        assert torch.equal(ptr_c, want_ptr), (e0, e1)
        assert torch.equal(perm_c, want_perm), (e0, e1)
        # the chunk's receiver offsets: the chunk's edges of receiver r are dst_c[r] .. dst_c[r + 1]
        want_dst = torch.searchsorted(graph.dst[e0:e1], torch.arange(n + 1), right=False)
        assert torch.equal(dst_c, want_dst), (e0, e1)
        assert perm_c.numel() == e1 - e0
        if (e0, e1) in chunking:
            covered[perm_c + e0] += 1
    assert torch.equal(covered, torch.ones_like(covered))  # the chunking covers every edge once
