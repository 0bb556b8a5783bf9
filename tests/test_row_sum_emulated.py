"""The pair op's per-row sum of hidden's per-edge gradient (csrc/row_sum_kernels.cu), compiled for
the host with tests/cuda_emu, against index_add: rows of the pairs md_accel's graphs make (two
edges each, the same values as index_add's sums into zero, whichever edge takes the first slot),
rows of one edge, rows of no edge (zero), rows of more than two edges (float atomics: to rounding),
rows out of range ignored, every output element written. No GPU needed."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

from md_accel.ops.tp_conv import pair_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent

_WRAPPER = r"""
extern "C" const char* emu_rows_sum_f64(const double* in, const int64_t* w_row, int64_t E, int64_t P, int64_t H,
                                        int* count, int64_t* slot, double* out) {
  return md_accel::rows_sum<double>(in, w_row, E, P, H, count, slot, out, nullptr);
}
extern "C" const char* emu_rows_sum_f32(const float* in, const int64_t* w_row, int64_t E, int64_t P, int64_t H,
                                        int* count, int64_t* slot, float* out) {
  return md_accel::rows_sum<float>(in, w_row, E, P, H, count, slot, out, nullptr);
}
"""


@pytest.fixture(scope="module")
def lib():
    src = '#include "cuda_emu.h"\n' + (ROOT / "csrc" / "row_sum_kernels.cu").read_text() + _WRAPPER
    so = ctypes.CDLL(emulate.build(src))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    for fn in (so.emu_rows_sum_f64, so.emu_rows_sum_f32):
        fn.restype = ctypes.c_char_p
        fn.argtypes = [ptr, ptr, i64, i64, i64, ptr, ptr, ptr]
    return so


def rows_sum(lib, g_e: torch.Tensor, w_row: torch.Tensor, P: int) -> torch.Tensor:
    E, H = g_e.shape
    out = torch.full((P, H), float("nan"), dtype=g_e.dtype)
    count = torch.zeros(P, dtype=torch.int32)
    slot = torch.full((P, 2), -7, dtype=torch.int64)
    fn = lib.emu_rows_sum_f64 if g_e.dtype == torch.float64 else lib.emu_rows_sum_f32
    assert fn(g_e.data_ptr(), w_row.data_ptr(), E, P, H, count.data_ptr(), slot.data_ptr(), out.data_ptr()) is None
    return out


def reference(g_e, w_row, P):
    keep = (w_row >= 0) & (w_row < P)
    return torch.zeros(P, g_e.shape[1], dtype=g_e.dtype).index_add_(0, w_row[keep], g_e[keep])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_pair_rows_sum_equals_index_add(lib, dtype):
    gen = torch.Generator().manual_seed(3)
    E, H = 400, 13
    partner = torch.randperm(E, generator=gen).view(-1, 2)  # a random pairing of the edges
    p = torch.empty(E, dtype=torch.int64)
    p[partner[:, 0]], p[partner[:, 1]] = partner[:, 1], partner[:, 0]
    w_row, _ = pair_rows(p)
    g_e = torch.randn(E, H, generator=gen, dtype=dtype)
    out = rows_sum(lib, g_e, w_row, E // 2)
    assert torch.equal(out, reference(g_e, w_row, E // 2))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_rows_of_zero_one_and_many_edges(lib, dtype):
    gen = torch.Generator().manual_seed(4)
    P, H = 9, 5
    # row 0: none; 1: one edge; 2: two; 3: five; 4: three; the last two edges out of range
    w_row = torch.tensor([1, 2, 3, 3, 2, 3, 4, 3, 4, 3, 4, 5, 6, 6, 7, 8, 8, -1, 9], dtype=torch.int64)
    g_e = torch.randn(w_row.numel(), H, generator=gen, dtype=dtype)
    out = rows_sum(lib, g_e, w_row, P)
    ref = reference(g_e, w_row, P)
    few = torch.tensor([0, 1, 2, 5, 6, 7, 8])
    assert torch.equal(out[few], ref[few])
    torch.testing.assert_close(out[3:5], ref[3:5], rtol=1e-6 if dtype == torch.float32 else 1e-14, atol=0)


def test_no_edges(lib):
    out = rows_sum(lib, torch.empty(0, 4, dtype=torch.float64), torch.empty(0, dtype=torch.int64), 3)
    assert torch.equal(out, torch.zeros(3, 4, dtype=torch.float64))
