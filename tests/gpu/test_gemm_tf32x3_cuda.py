"""CUDA implementation of md_accel::gemm_3xtf32 (tensor cores, 3xTF32 split) against a float64
reference, on its routes (small K: the split operands in one cuBLAS TF32 GEMM; the kernel of
gemm_tf32x3_kernels.cu, which MD_ACCEL_GEMM_CUBLAS=0 selects everywhere; its unbiased scheme on
every shape, MD_ACCEL_GEMM_UNBIASED=1): float32 accuracy (max error relative to max|C| <= 2e-6, median elementwise relative error within 4x of
cuBLAS SGEMM's on the same data), the check's power (plain 1xTF32 fails it), no bias with
MD_ACCEL_GEMM_UNBIASED=1 (the mean of the tensor cores' truncation added back), every output element
written, determinism, odd row counts, the two radial-MLP shapes, CUDA-graph replay. Skipped
without CUDA."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.ops import _cuda  # noqa: E402
from md_accel.ops._op_registry import defined_in_cpp  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
if not defined_in_cpp("gemm_3xtf32"):
    pytest.fail("the loaded md_accel library has no gemm_3xtf32 (built from older sources?)", pytrace=False)
OP = torch.ops.md_accel.gemm_3xtf32
DEV = torch.device("cuda")
MAX_REL = 2e-6

# (K, N, transpose_b): forward W = H @ B (K = 64); input gradient dH = dW @ B^T (N = 64), B given
# as [64, K] (transpose_b) or already transposed as [K, 64]
SHAPES = [(64, 512, False), (64, 1280, False), (64, 1760, False), (64, 960, False), (64, 512, True), (40, 136, True),
          (512, 64, True), (960, 64, True), (1280, 64, True), (1760, 64, True), (1760, 64, False)]
ROWS = [0, 1, 127, 129, 100003]


@pytest.fixture(params=["default", "kernel", "unbiased"])
def route(request, monkeypatch):
    """default: cuBLAS for the small-K shapes; kernel: md_accel's kernel for every shape
    (MD_ACCEL_GEMM_CUBLAS=0); unbiased: the kernel's unbiased scheme for every shape
    (MD_ACCEL_GEMM_UNBIASED=1)."""
    monkeypatch.delenv("MD_ACCEL_GEMM_CUBLAS", raising=False)
    monkeypatch.delenv("MD_ACCEL_GEMM_UNBIASED", raising=False)
    if request.param == "kernel":
        monkeypatch.setenv("MD_ACCEL_GEMM_CUBLAS", "0")
    if request.param == "unbiased":
        monkeypatch.setenv("MD_ACCEL_GEMM_UNBIASED", "1")
    return request.param


def _kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def test_routes(monkeypatch):
    """The forward shape (K = 64) runs the split + cuBLAS, the input gradient (K = 1280) md_accel's
    kernel; MD_ACCEL_GEMM_CUBLAS=0 and MD_ACCEL_GEMM_UNBIASED=1 each send both to the kernel."""
    monkeypatch.delenv("MD_ACCEL_GEMM_CUBLAS", raising=False)
    monkeypatch.delenv("MD_ACCEL_GEMM_UNBIASED", raising=False)
    fwd = _operands(1000, 64, 1280, False)
    bwd = _operands(1000, 1280, 64, True)
    names = _kernel_names(lambda: OP(*fwd, False))
    assert any("split3_a_kernel" in n for n in names) and not any("gemm_3xtf32_kernel" in n for n in names), names
    assert any("gemm_3xtf32_kernel" in n for n in _kernel_names(lambda: OP(*bwd, True)))
    for var, value in (("MD_ACCEL_GEMM_CUBLAS", "0"), ("MD_ACCEL_GEMM_UNBIASED", "1")):
        monkeypatch.setenv(var, value)
        names = _kernel_names(lambda: OP(*fwd, False))
        assert any("gemm_3xtf32_kernel" in n for n in names) and not any("split3" in n for n in names), (var, names)
        monkeypatch.delenv(var)


def _operands(m, k, n, transpose_b, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed + 7 * m + k + n)
    a = torch.randn(m, k, device=DEV, generator=g)
    shape = (n, k) if transpose_b else (k, n)
    b = torch.randn(shape, device=DEV, generator=g) / k**0.5
    return a, b


def _bmat(b, transpose_b):
    return b.t() if transpose_b else b


def _run(a, b, transpose_b):
    """The op with its output block poisoned: a NaN tensor of the output's size is freed just
    before, so the caching allocator hands the op that memory."""
    m, n = a.shape[0], (b.shape[0] if transpose_b else b.shape[1])
    poison = torch.full((m, n), float("nan"), device=DEV)
    del poison
    return OP(a, b, transpose_b)


def _tf32(x):
    """Round to tf32 (nearest, ties away from zero), as cvt.rna.tf32.f32."""
    bits = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    bits = (bits + 0x1000) & 0xFFFFE000
    bits = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)
    return bits.view(torch.float32)


def _errors(c, ref):
    err = (c.double() - ref).abs()
    return (err.max() / ref.abs().max()).item(), (err / ref.abs()).median().item()


def _sgemm(a, b):
    prev = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # cuBLAS SGEMM, no TF32
    try:
        return a @ b
    finally:
        torch.set_float32_matmul_precision(prev)


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("k,n,transpose_b", SHAPES)
def test_accuracy(k, n, transpose_b, m, route):
    a, b = _operands(m, k, n, transpose_b)
    c = _run(a, b, transpose_b)
    assert c.shape == (m, n) and c.dtype == torch.float32 and c.is_contiguous() and c.device.type == "cuda"
    if m == 0:
        return
    assert not c.isnan().any(), "output not fully written"
    bm = _bmat(b, transpose_b)
    ref = a.double() @ bm.double()
    max_rel, med = _errors(c, ref)
    assert max_rel <= MAX_REL, f"max relative error {max_rel:.3g}"
    if m >= 127:
        _, med_sgemm = _errors(_sgemm(a, bm), ref)
        assert med <= 4 * med_sgemm, f"median relative error {med:.3g} vs SGEMM {med_sgemm:.3g}"
        # the check can fail: plain 1xTF32 (operands rounded to tf32, exact products) does not pass
        max_rel_1x, _ = _errors(_tf32(a).double() @ _tf32(bm.contiguous()).double(), ref)
        assert max_rel_1x > 10 * MAX_REL, f"1xTF32 error {max_rel_1x:.3g} passes the check"
    # deterministic
    assert torch.equal(c, OP(a, b, transpose_b))


@pytest.mark.parametrize("k,n,transpose_b", [(64, 1280, False), (1280, 64, True)])
@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_kernel_errors_unbiased(k, n, transpose_b, signs, monkeypatch):
    """With MD_ACCEL_GEMM_UNBIASED=1 the errors average out: the mean of (C - C64) sign(C64) over
    100k rows is below 1e-8 of the mean |C64| (the default routes: -2e-7, H200; cuBLAS SGEMM: at
    most 4e-10)."""
    monkeypatch.delenv("MD_ACCEL_GEMM_CUBLAS", raising=False)
    monkeypatch.setenv("MD_ACCEL_GEMM_UNBIASED", "1")
    a, b = _operands(100_000, k, n, transpose_b)
    if signs == "positive":
        a, b = a.abs(), b.abs()
    ref = a.double() @ _bmat(b, transpose_b).double()
    diff = OP(a, b, transpose_b).double() - ref
    bias = ((diff * ref.sign()).mean() / ref.abs().mean()).item()
    assert abs(bias) < 1e-8, f"mean signed error {bias:.2e} of the mean |C|"


def test_large_rows(route):
    """2.5M rows (one forward shape), the reference in row chunks to bound memory."""
    m, k, n = 2_500_000, 64, 512
    a, b = _operands(m, k, n, False, seed=1)
    c = _run(a, b, False)
    assert not c.isnan().any()
    bd, worst, scale = b.double(), 0.0, 0.0
    for r in range(0, m, 250_000):
        ref = a[r:r + 250_000].double() @ bd
        worst = max(worst, (c[r:r + 250_000].double() - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
    assert worst / scale <= MAX_REL, f"max relative error {worst / scale:.3g}"
    assert torch.equal(c, OP(a, b, False))


def test_misaligned_and_strided_inputs():
    m, k, n = 1000, 64, 128
    flat = torch.randn(m * k + 1, device=DEV)
    a = flat[1:].view(m, k)  # 4-byte offset: not 16-byte aligned
    assert a.data_ptr() % 16 != 0
    b = torch.randn(n, k, device=DEV).t()  # [k, n], column-major
    ref = a.double() @ b.double()
    assert _errors(OP(a, b, False), ref)[0] <= MAX_REL
    a_strided = torch.randn(m, 2 * k, device=DEV)[:, ::2]
    assert _errors(OP(a_strided, b, False), a_strided.double() @ b.double())[0] <= MAX_REL


def test_k_tail_and_small_n(route):
    """K not a multiple of the 32-wide k tile, N not a multiple of the 64-wide column tile."""
    for k, n, t in [(8, 8, False), (40, 72, True), (104, 8, False), (200, 136, True)]:
        a, b = _operands(333, k, n, t)
        ref = a.double() @ _bmat(b, t).double()
        assert _errors(_run(a, b, t), ref)[0] <= MAX_REL, (k, n, t)


def test_zero_k():
    c = OP(torch.randn(17, 0, device=DEV), torch.randn(0, 16, device=DEV), False)
    assert c.shape == (17, 16) and torch.equal(c, torch.zeros_like(c))


@pytest.mark.parametrize("device,k,n,dtype,text", [("cuda", 64, 12, "float32", "multiples of 8"),
                                                    ("cuda", 32, 16, "float32", "do not match"),
                                                    ("cuda", 64, 16, "float64", "float32"),
                                                    ("cpu", 64, 12, "float32", "multiples of 8")])
def test_errors(device, k, n, dtype, text):
    """Bad shapes and dtypes raise a RuntimeError naming the problem. Each case runs in its own
    subprocess with faulthandler: a crash on the error path (seen on an H100: SIGSEGV) fails this
    case with the Python stack of the crash, not the session."""
    code = textwrap.dedent(f"""
        import torch, md_accel.ops
        a = torch.randn(10, 64, device="{device}", dtype=torch.{dtype})
        b = torch.randn({k}, {n}, device="{device}", dtype=torch.{dtype})
        try:
            torch.ops.md_accel.gemm_3xtf32(a, b, False)
        except RuntimeError as e:
            assert "{text}" in str(e), str(e)
            print("ok")
        else:
            raise AssertionError("no error")
    """)
    run = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, (run.returncode, run.stderr[-3000:])


@pytest.mark.parametrize("k,n,transpose_b", [(1760, 64, True), (64, 1280, False)])
def test_cuda_graph(k, n, transpose_b, route):
    a, b = _operands(4096, k, n, transpose_b)
    static_a = a.clone()
    OP(static_a, b, transpose_b)  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = OP(static_a, b, transpose_b)
    static_a.copy_(a * 2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, OP(a * 2, b, transpose_b))
