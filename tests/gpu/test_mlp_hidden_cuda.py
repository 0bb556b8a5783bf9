"""Fused CUDA kernels of md_accel::mlp_hidden_{fwd,bwd} against the plain-torch reference
(md_accel/ops/mlp_reference.py, the specification) in float64 on the CPU. Skipped without CUDA."""
from __future__ import annotations

import copy

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.model.radial import RadialMLP  # noqa: E402
from md_accel.model.scalar_mlp import ScalarMLP  # noqa: E402
from md_accel.ops import _cuda  # noqa: E402
from md_accel.ops._op_registry import defined_in_cpp  # noqa: E402
from md_accel.ops.mlp_reference import mlp_hidden_bwd_ref, mlp_hidden_fwd_ref  # noqa: E402
from mlp_testing import PATHS, TENSOR_CORES, use_path  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
if not defined_in_cpp("mlp_hidden_fwd"):
    pytest.fail("the loaded md_accel library has no mlp_hidden ops (built from older sources?)", pytrace=False)
OPS = torch.ops.md_accel
DEV = torch.device("cuda")
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
CST = 1.6791767923989418  # e3nn's SiLU constant (any value works)

# (K0, H1, ..., HL): fused kernels for K0 <= 16 and hidden widths <= 64,
# zero-padded where smaller ("padded"); the others run the ATen composition ("aten").
WIDTHS = {
    "mace": (8, 64, 64, 64),
    "mace_mp0": (10, 64, 64, 64),  # MACE-MP-0's 10 Bessel functions: two input k8 steps
    "sevennet": (8, 64, 64),
    "wide": (8, 128),
    "padded": (5, 48, 30, 64),
    "k0_16": (12, 64, 64),
    "padded4": (6, 64, 40, 64, 24),
    "aten": (20, 200, 64),
}
EDGES = [0, 1, 1000, 100003]


def inputs(widths, e: int, dtype, seed: int):
    """x, weights (scaled like e3nn's), grad_h: float64 CPU masters rounded to dtype."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(e, widths[0], generator=gen, dtype=torch.float64)
    ws = [torch.randn(a, b, generator=gen, dtype=torch.float64) / a ** 0.5 for a, b in zip(widths, widths[1:])]
    g = torch.randn(e, widths[-1], generator=gen, dtype=torch.float64)
    return x.to(dtype), [w.to(dtype) for w in ws], g.to(dtype)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().to(torch.float64), b.detach().cpu().to(torch.float64)
    assert a.shape == b.shape
    assert torch.isfinite(a).all(), "non-finite values (unwritten output?)"
    if a.numel() == 0:
        return 0.0
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def poison(*shapes, dtype):
    """Fill freed allocator blocks of the outputs' sizes with NaN, so unwritten elements show."""
    blocks = [torch.full(s, float("nan"), dtype=dtype, device=DEV) for s in shapes]
    del blocks


def cuda_ops(x, ws, g):
    xd, gd, wd = x.to(DEV), g.to(DEV), [w.to(DEV) for w in ws]
    poison(g.shape, dtype=x.dtype)
    h = OPS.mlp_hidden_fwd(xd, wd, CST)
    poison(x.shape, dtype=x.dtype)
    gx = OPS.mlp_hidden_bwd(xd, gd, wd, CST)
    return h, gx


def ref_ops(x, ws, g):
    x, g, ws = x.double(), g.double(), [w.double() for w in ws]
    return mlp_hidden_fwd_ref(x, ws, CST), mlp_hidden_bwd_ref(x, g, ws, CST)




@pytest.mark.parametrize("e", EDGES)
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", list(WIDTHS))
def test_matches_reference(name, path, e, monkeypatch):
    dtype = use_path(path, monkeypatch)
    x, ws, g = inputs(WIDTHS[name], e, dtype, seed=EDGES.index(e) + 10 * list(WIDTHS).index(name))
    for got, want, what in zip(cuda_ops(x, ws, g), ref_ops(x, ws, g), ("fwd", "bwd")):
        assert rel_err(got, want) <= TOL[dtype], what


@pytest.mark.parametrize("path", list(PATHS))
def test_fused_kernel_runs(path, monkeypatch):
    """The template shapes run a fused kernel (one launch per op; the tensor-core one for float32
    radial-MLP shapes unless switched off), the others do not."""
    dtype = use_path(path, monkeypatch)

    def kernels(name):
        x, ws, g = inputs(WIDTHS[name], 5000, dtype, seed=1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            cuda_ops(x, ws, g)
            torch.cuda.synchronize()
        return [ev.name for ev in prof.events() if "mlp_hidden" in ev.name and "kernel" in ev.name]

    for name in ("mace", "mace_mp0", "k0_16"):
        names = kernels(name)
        assert len(names) == 2
        assert all(("mma" in k) == (path in TENSOR_CORES) for k in names), (name, names)
    # the CUDA-core kernel; in float64 its backward's weights and derivative factors (29184 doubles,
    # 228 KiB) need more shared memory than sm_90 has (227 KiB): there ATen serves the backward
    smem = getattr(torch.cuda.get_device_properties(DEV), "shared_memory_per_block_optin", 227 * 1024)
    bwd_fits = dtype == torch.float32 or 29184 * 8 <= smem
    four_layers = kernels("padded4")
    assert len(four_layers) == (2 if bwd_fits else 1) and all("mma" not in k for k in four_layers)
    assert len(kernels("aten")) == 0
    assert len(kernels("wide")) == 0


@pytest.mark.parametrize("mma", ["1", "0"])
@pytest.mark.parametrize("op", ["fwd", "bwd"])
def test_bitwise_deterministic(op, mma, monkeypatch):
    monkeypatch.setenv("MD_ACCEL_MLP_MMA", mma)
    x, ws, g = inputs(WIDTHS["mace"], 100003, torch.float32, seed=2)
    xd, gd, wd = x.to(DEV), g.to(DEV), [w.to(DEV) for w in ws]
    call = {"fwd": lambda: OPS.mlp_hidden_fwd(xd, wd, CST), "bwd": lambda: OPS.mlp_hidden_bwd(xd, gd, wd, CST)}[op]
    first = call().clone()
    for _ in range(3):
        assert torch.equal(call(), first)


@pytest.mark.parametrize("name", ["mace", "padded", "aten"])
def test_double_backward_matches_cpu(name):
    """Force-training graph: E = <c, h(x)>; F = dE/dx (create_graph); loss(F) differentiated with
    respect to x and the weights, through the C++ autograd kernel."""
    x, ws, c = inputs(WIDTHS[name], 300, torch.float64, seed=3)
    target = torch.randn(x.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)

    def grads(device, fn):
        xd = x.to(device).requires_grad_()
        wd = [w.to(device).requires_grad_() for w in ws]
        e = (fn(xd, wd, CST) * c.to(device)).sum()
        (f,) = torch.autograd.grad(e, xd, create_graph=True)
        return (e.detach(), f.detach(), *torch.autograd.grad(((f - target.to(device)) ** 2).sum(), [xd, *wd]))

    for a, b in zip(grads(DEV, OPS.mlp_hidden_fwd), grads("cpu", mlp_hidden_fwd_ref)):
        assert rel_err(a.reshape(-1), b.reshape(-1)) <= 1e-10


def test_gradcheck_and_gradgradcheck():
    x, ws, _ = inputs((5, 16, 8), 6, torch.float64, seed=5)
    xd = x.to(DEV).requires_grad_()
    wd = [w.to(DEV).requires_grad_() for w in ws]
    fn = lambda x, *w: OPS.mlp_hidden_fwd(x, list(w), CST)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (xd, *wd), fast_mode=True)
    assert torch.autograd.gradgradcheck(fn, (xd, *wd), fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("make", [lambda: RadialMLP([8, 64, 64, 64, 40], "silu"),
                                  lambda: ScalarMLP([8, 64, 64, 30], [0.5, 0.25, 0.125], "silu")],
                         ids=["radial", "scalar"])
def test_module_on_cuda_equals_cpu(make, dtype):
    """RadialMLP / ScalarMLP (eager and TorchScript) on CUDA, through the fused op, equal the
    layer loop on the CPU, forces included."""
    torch.manual_seed(6)
    m = make().to(dtype)
    assert m.hidden_op
    x = torch.randn(2000, 8, dtype=torch.float64).to(dtype)
    g = torch.randn(2000, m.hs[-1], dtype=torch.float64).to(dtype)

    def run(module, device, dt):
        xd = x.to(device, dt).requires_grad_()
        out = module(xd)
        (gx,) = torch.autograd.grad(out, xd, g.to(device, dt))
        return out, gx

    want = run(copy.deepcopy(m).double(), "cpu", torch.float64)
    m = m.to(DEV)
    for module in (m, torch.jit.script(m)):
        for a, b in zip(run(module, DEV, dtype), want):
            assert rel_err(a, b) <= 10 * TOL[dtype]


def test_cuda_graph_capture_and_replay():
    """No host synchronisation: forward + force backward capture into a CUDA graph; replays with
    new inputs equal eager calls."""
    x, ws, g = inputs(WIDTHS["mace"], 3000, torch.float32, seed=7)
    x, ws, g = x.to(DEV), [w.to(DEV) for w in ws], g.to(DEV)

    def step():
        xr = x.detach().requires_grad_()
        h = OPS.mlp_hidden_fwd(xr, ws, CST)
        (gx,) = torch.autograd.grad(h, xr, g)
        return h.detach(), gx

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for seed in (8, 9):
        x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(DEV))
        graph.replay()
        for a, b in zip(captured, step()):
            assert torch.equal(a, b)
