"""md_accel::gemm_3xtf32 on the CPU: the op (C++ CPU kernel or the Python fallback) against
torch.matmul, its argument checks and fake implementation; and the CUDA kernel
(csrc/gemm_tf32x3_kernels.cu) compiled for the host with tests/cuda_emu, its mma / cvt
(tests/cuda_emu/mma_emu.h) and cp.async replaced by host versions written from the PTX ISA
(the tensor cores' accumulation emulated as round-toward-zero): tiling, bounds and fragment mapping, no GPU needed.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

import md_accel.ops  # noqa: F401  (registers torch.ops.md_accel.gemm_3xtf32)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402

OP = torch.ops.md_accel.gemm_3xtf32
ROOT = Path(__file__).resolve().parent.parent


def _ref(a, b, transpose_b):
    return a.double() @ (b.double().t() if transpose_b else b.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("m,k,n", [(0, 64, 512), (1, 64, 8), (37, 64, 96), (53, 120, 64), (9, 0, 16)])
def test_matches_matmul(dtype, transpose_b, m, k, n):
    g = torch.Generator().manual_seed(m * 1000 + k + n)
    a = torch.randn(m, k, generator=g, dtype=dtype)
    b = torch.randn(n, k, generator=g, dtype=dtype) if transpose_b else torch.randn(k, n, generator=g, dtype=dtype)
    out = OP(a, b, transpose_b)
    assert out.shape == (m, n) and out.dtype == dtype and out.is_contiguous()
    expect = a @ (b.t() if transpose_b else b)
    torch.testing.assert_close(out, expect)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    if out.numel():
        assert (out.double() - _ref(a, b, transpose_b)).abs().max().item() <= tol * max(1.0, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_grouped_matches_per_component_matmul(dtype, transpose_b):
    """a [G, K, d]: out[g, :, m] = a[g, :, m] @ B, also for a strided view of wider rows."""
    g = torch.Generator().manual_seed(5)
    wide = torch.randn(13, 100, generator=g, dtype=dtype)
    a = wide[:, 3:3 + 16 * 5].view(13, 16, 5)
    b = torch.randn(24, 16, generator=g, dtype=dtype) if transpose_b else torch.randn(16, 24, generator=g, dtype=dtype)
    out = OP(a, b, transpose_b)
    assert out.shape == (13, 24, 5) and out.is_contiguous()
    bb = b.t() if transpose_b else b
    expect = torch.stack([a[:, :, m] @ bb for m in range(5)], dim=2)
    torch.testing.assert_close(out, expect)


def test_non_contiguous_operands():
    a = torch.randn(64, 40)[:, :32]  # row stride 40
    b = torch.randn(16, 32).t()      # [32, 16], column-major
    torch.testing.assert_close(OP(a, b, False), a @ b)
    torch.testing.assert_close(OP(a, b.t(), True), a @ b)


@pytest.mark.parametrize("a_shape,b_shape,transpose_b", [
    ((4, 12), (12, 16), False),   # K not a multiple of 8
    ((4, 16), (16, 12), False),   # N not a multiple of 8
    ((4, 16), (12, 16), True),    # N (b transposed) not a multiple of 8
    ((4, 16), (24, 16), False),   # K mismatch
    ((4, 16), (16, 24), True),    # K mismatch, b transposed
    ((16,), (16, 8), False),      # not 2-D
])
def test_bad_shapes(a_shape, b_shape, transpose_b):
    with pytest.raises(RuntimeError, match="gemm_3xtf32"):
        OP(torch.randn(a_shape), torch.randn(b_shape), transpose_b)


def test_dtype_mismatch():
    with pytest.raises(RuntimeError, match="gemm_3xtf32"):
        OP(torch.randn(4, 8), torch.randn(8, 8, dtype=torch.float64), False)


def test_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, b = torch.empty(1000, 64), torch.empty(1760, 64)
        assert OP(a, b, True).shape == (1000, 1760)
        assert OP(torch.empty(7, 1760), b, False).shape == (7, 64)


# --- the CUDA kernel, emulated on the host ------------------------------------------------------

_SHIM = r"""
#include "cuda_emu.h"
#include <cstring>

// cp.async 16 / 4 bytes with src-size (zero fill), done at once; commit / wait are no-ops
inline void cp_async16(float* smem, const float* gmem, int src_bytes) {
  std::memset(smem, 0, 16);
  if (src_bytes > 0) std::memcpy(smem, gmem, size_t(src_bytes));
}
inline void cp_async4(float* smem, const float* gmem, int src_bytes) {
  *smem = src_bytes > 0 ? *gmem : 0.f;
}
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
"""

_WRAPPER = r"""
extern "C" int emu_gemm_3xtf32_splits(int64_t m, int64_t k, int64_t n) {
  return md_accel::gemm_3xtf32_splits(m, k, n);
}
extern "C" const char* emu_gemm_3xtf32(const float* a, const float* b, int trans_b, float* c, int64_t m,
                                       int64_t k, int64_t n, int splits, void* scratch) {
  return md_accel::gemm_3xtf32_launch(a, b, trans_b != 0, c, m, k, n, splits, scratch, nullptr, 0, 0);
}
extern "C" const char* emu_gemm_3xtf32_grouped(const float* a, const float* b, int trans_b, float* c, int64_t m,
                                               int64_t k, int64_t n, void* scratch, int d, int64_t lda) {
  return md_accel::gemm_3xtf32_launch(a, b, trans_b != 0, c, m, k, n, 1, scratch, nullptr, d, lda);
}
extern "C" int64_t emu_gemm_3xtf32_scratch_bytes(int64_t m, int64_t k, int64_t n, int splits) {
  return md_accel::gemm_3xtf32_scratch_bytes(m, k, n, splits);
}
"""


def _emu_library(wrapper: str) -> ctypes.CDLL:
    """gemm_tf32x3_kernels.cu compiled for the host (tests/cuda_emu) with `wrapper` appended."""
    if not emulate.available():
        pytest.skip("needs g++")
    return ctypes.CDLL(emulate.build(_SHIM + (ROOT / "csrc" / "gemm_tf32x3_kernels.cu").read_text() + wrapper))


@pytest.fixture(scope="module")
def emu_lib():
    lib = _emu_library(_WRAPPER)
    lib.emu_gemm_3xtf32_splits.restype = ctypes.c_int
    lib.emu_gemm_3xtf32_splits.argtypes = [ctypes.c_int64] * 3
    lib.emu_gemm_3xtf32.restype = ctypes.c_char_p
    lib.emu_gemm_3xtf32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                    ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_void_p]
    lib.emu_gemm_3xtf32_grouped.restype = ctypes.c_char_p
    lib.emu_gemm_3xtf32_grouped.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                            ctypes.c_int, ctypes.c_int64]
    lib.emu_gemm_3xtf32_scratch_bytes.restype = ctypes.c_int64
    lib.emu_gemm_3xtf32_scratch_bytes.argtypes = [ctypes.c_int64] * 3 + [ctypes.c_int]
    return lib


def _emu_scratch_bytes(lib, m, k, n):
    """(splits, scratch bytes) as the op computes them: the split count once, for both."""
    splits = lib.emu_gemm_3xtf32_splits(m, k, n)
    return splits, lib.emu_gemm_3xtf32_scratch_bytes(m, k, n, splits)


def _emu_gemm(lib, a, b, transpose_b):
    m, k = a.shape
    n = b.shape[0] if transpose_b else b.shape[1]
    out = torch.full((m, n), float("nan"))
    splits, nbytes = _emu_scratch_bytes(lib, m, k, n)
    scratch = torch.full((max(nbytes // 4, 4),), float("nan"))
    err = lib.emu_gemm_3xtf32(a.data_ptr(), b.data_ptr(), int(transpose_b), out.data_ptr(), m, k, n, splits,
                              scratch.data_ptr())
    return out, err


# (M, K, N, transpose_b): row and column tails, K tails (K % 32 != 0), more k tiles than stages;
# the last two split K on the emulator's 2 SMs (4 block slots): 5 row tiles run as 4 K ranges of
# 4 k tiles, and 10 tiles as 2 ranges of 9 and 8 k tiles (K tail in the last)
EMU_CASES = [(130, 64, 72, False), (129, 104, 64, True), (5, 8, 8, False), (40, 40, 136, True), (3, 0, 8, False),
             (600, 512, 64, True), (600, 536, 72, False)]
SPLIT_CASES = EMU_CASES[-2:]


# the default accumulation on every case, the unbiased one (MD_ACCEL_GEMM_UNBIASED=1) on a tail case
# and a split-K case
@pytest.mark.parametrize("m,k,n,transpose_b,unbiased", [c + ("0",) for c in EMU_CASES]
                         + [c + ("1",) for c in (EMU_CASES[0], EMU_CASES[-2])])
def test_emulated_kernel(emu_lib, m, k, n, transpose_b, unbiased, monkeypatch):
    monkeypatch.setenv("EMU_SMS", "2")  # the emulated device SPLIT_CASES are chosen for
    monkeypatch.setenv("EMU_PER_SM", "1")
    monkeypatch.setenv("MD_ACCEL_GEMM_UNBIASED", unbiased)
    g = torch.Generator().manual_seed(7 + m + k + n)
    a = torch.randn(m, k, generator=g)
    b = (torch.randn(n, k, generator=g) if transpose_b else torch.randn(k, n, generator=g)) / max(k, 1) ** 0.5
    out, err = _emu_gemm(emu_lib, a, b, transpose_b)
    assert err is None, err
    split = _emu_scratch_bytes(emu_lib, m, k, n)[1] > k * n * 8  # partial products in the scratch
    assert split == ((m, k, n, transpose_b) in SPLIT_CASES)
    ref = _ref(a, b, transpose_b)
    assert not out.isnan().any(), "output not fully written"
    scale = max(ref.abs().max().item(), 1e-30)
    assert (out.double() - ref).abs().max().item() / scale <= 2e-6
    # deterministic (fixed summation order)
    again, _ = _emu_gemm(emu_lib, a, b, transpose_b)
    assert torch.equal(out, again)


@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_emulated_kernel_unbiased(emu_lib, signs, monkeypatch):
    """Under the emulator's truncating mma, with MD_ACCEL_GEMM_UNBIASED=1 the kernel's errors
    average out: the mean of (C - C64) sign(C64) is below 1e-8 of the mean |C64| (a float32 matmul
    gives ~1e-9); the default scheme shows the bias this removes, -2.3e-7."""
    monkeypatch.setenv("EMU_SMS", "2")
    monkeypatch.setenv("EMU_PER_SM", "1")
    monkeypatch.setenv("MD_ACCEL_GEMM_UNBIASED", "1")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(256, 128, generator=g), torch.randn(128, 128, generator=g)
    if signs == "positive":
        a, b = a.abs(), b.abs()
    out, err = _emu_gemm(emu_lib, a, b, False)
    assert err is None, err
    ref = _ref(a, b, False)
    bias = (((out.double() - ref) * ref.sign()).mean() / ref.abs().mean()).item()
    assert abs(bias) < 1e-8, f"mean signed error {bias:.2e} of the mean |C|"
    monkeypatch.delenv("MD_ACCEL_GEMM_UNBIASED")
    out, _ = _emu_gemm(emu_lib, a, b, False)
    assert (((out.double() - ref) * ref.sign()).mean() / ref.abs().mean()).item() < -1e-7


@pytest.mark.parametrize("groups,k,n,d,pad,transpose_b,unbiased", [(60, 40, 64, 3, 7, False, "0"),
                                                                   (23, 64, 72, 7, 0, True, "0"),
                                                                   (9, 8, 8, 5, 1, False, "0"),
                                                                   (23, 64, 72, 7, 0, True, "1")])
def test_emulated_grouped_layout(emu_lib, groups, k, n, d, pad, transpose_b, unbiased, monkeypatch):
    """A [G, K, d] (groups lda = K * d + pad floats apart: a block of wider feature rows) times B,
    written as [G, N, d]: every element against float64, none left unwritten, deterministic; row
    tiles that start inside a group (128 rows, d = 3, 5, 7); both accumulation schemes."""
    monkeypatch.setenv("MD_ACCEL_GEMM_UNBIASED", unbiased)
    g = torch.Generator().manual_seed(groups + k + n + d)
    lda = k * d + pad
    wide = torch.randn(groups, lda, generator=g)
    a = wide[:, :k * d].view(groups, k, d)
    b = (torch.randn(n, k, generator=g) if transpose_b else torch.randn(k, n, generator=g)) / k**0.5
    m = groups * d
    out = torch.full((groups, n, d), float("nan"))
    _, nbytes = _emu_scratch_bytes(emu_lib, m, k, n)
    scratch = torch.full((max(nbytes // 4, 4),), float("nan"))

    def run():
        return emu_lib.emu_gemm_3xtf32_grouped(wide.data_ptr(), b.data_ptr(), int(transpose_b), out.data_ptr(), m, k,
                                               n, scratch.data_ptr(), d, lda)

    assert run() is None
    assert not out.isnan().any(), "output not fully written"
    bb = (b.t() if transpose_b else b).double()
    ref = torch.stack([a[:, :, c].double() @ bb for c in range(d)], dim=2)
    assert (out.double() - ref).abs().max().item() <= 2e-6 * ref.abs().max().item()
    first = out.clone()
    assert run() is None and torch.equal(out, first)


def test_emulated_kernel_rejects_bad_shapes(emu_lib):
    a, b = torch.randn(4, 12), torch.randn(12, 16)
    _, err = _emu_gemm(emu_lib, a, b, False)
    assert err is not None and b"multiples of 8" in err


# --- the operands of the cuBLAS route (K tripled), emulated on the host --------------------------

_SPLIT3_WRAPPER = r"""
extern "C" const char* emu_gemm_3xtf32_split3(const float* a, const float* b, int trans_b, float* a3, float* b3,
                                              int64_t m, int64_t k, int64_t n) {
  return md_accel::gemm_3xtf32_split3(a, b, trans_b != 0, a3, b3, m, k, n, nullptr);
}
"""


@pytest.fixture(scope="module")
def emu_split3():
    lib = _emu_library(_SPLIT3_WRAPPER)
    lib.emu_gemm_3xtf32_split3.restype = ctypes.c_char_p
    lib.emu_gemm_3xtf32_split3.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3
    return lib


def _low_bits(x):
    """The 13 mantissa bits below tf32's, per element (0 where x is exact in tf32)."""
    return x.contiguous().view(torch.int32) & 0x1FFF


@pytest.mark.parametrize("m,k,n,transpose_b", [(37, 64, 192, False), (300, 64, 1280, False), (5, 8, 24, True)])
def test_emulated_split3_operands(emu_split3, m, k, n, transpose_b):
    """a3 = [a_lo | a_hi | a_hi], b3 = [b_hi ; b_lo ; b_hi]: every element exact in tf32 (so a TF32
    GEMM of them has exact products whatever its tf32 conversion does), hi + lo = the operand to
    ~2^-22, and the exact product a3 @ b3 within float32 accuracy of a @ b."""
    g = torch.Generator().manual_seed(m + k + n)
    a = torch.randn(m, k, generator=g) * torch.logspace(-3, 3, k)  # a spread of exponents
    b = (torch.randn(n, k, generator=g) if transpose_b else torch.randn(k, n, generator=g)) / k**0.5
    a3 = torch.full((m, 3 * k), float("nan"))
    b3 = torch.full((3 * k, n), float("nan"))
    err = emu_split3.emu_gemm_3xtf32_split3(a.data_ptr(), b.data_ptr(), int(transpose_b), a3.data_ptr(),
                                            b3.data_ptr(), m, k, n)
    assert err is None, err
    assert not a3.isnan().any() and not b3.isnan().any(), "not fully written"
    assert not _low_bits(a3).any() and not _low_bits(b3).any(), "an element is not exact in tf32"
    bm = b.t().contiguous() if transpose_b else b
    a_lo, a_hi, a_hi2 = a3.split(k, dim=1)
    b_hi, b_lo, b_hi2 = b3.split(k, dim=0)
    assert torch.equal(a_hi, a_hi2) and torch.equal(b_hi, b_hi2)
    for x, hi, lo in ((a, a_hi, a_lo), (bm, b_hi, b_lo)):
        assert ((hi.double() - x.double()).abs() <= 2.0**-11 * x.double().abs()).all()
        assert ((hi.double() + lo.double() - x.double()).abs() <= 2.0**-21 * x.double().abs()).all()
    ref = _ref(a, b, transpose_b)
    got = a3.double() @ b3.double()
    assert (got - ref).abs().max().item() <= 2e-6 * ref.abs().max().item()
    # the split's power: the hi blocks alone (plain TF32) are far off
    assert (a_hi.double() @ b_hi.double() - ref).abs().max().item() > 20 * 2e-6 * ref.abs().max().item()
