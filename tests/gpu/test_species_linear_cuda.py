"""CUDA kernels of md_accel::species_linear_{fwd,bwd_x,bwd_w} against the plain-torch reference
(md_accel/ops/sl_reference.py, the specification) in float64 on the CPU. Skipped without CUDA."""
from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.model.species_linear import SpeciesLinear  # noqa: E402
from md_accel.ops import _cuda, _sl_ops  # noqa: E402,F401  (_sl_ops registers the ops)
from md_accel.ops._op_registry import defined_in_cpp  # noqa: E402
from md_accel.ops.sl_reference import (species_linear_bwd_w_ref, species_linear_bwd_x_ref,  # noqa: E402
                                       species_linear_fwd_ref)

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
if not defined_in_cpp("species_linear_fwd"):
    pytest.fail("the loaded md_accel library has no species_linear ops (built from older sources?)", pytrace=False)
OPS = torch.ops.md_accel
DEV = torch.device("cuda")
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

CONFIGS = {
    "mace_skip": ("128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o+128x2e+128x3o"),
    "mace_to_hidden": ("128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o"),
    "mace_hidden": ("128x0e+128x1o", "128x0e+128x1o"),
    "mace_first": ("128x0e", "128x0e+128x1o"),  # 1o fed by nothing: zeros
    "sevennet0": ("128x0e+64x1e+32x2e", "128x0e+64x1e+32x2e"),
    "sevennet_l3i5": ("64x0e+32x1o+32x2e+32x3o", "64x0e+32x1o+32x2e+32x3o"),
    # repeated irreps (several terms per block), unused input block, odd multiplicities, two
    # column tiles (130), l = 7
    "mixed": ("3x0e+5x1o+2x0e+2x2o+4x2e+130x0e", "7x0e+2x1e+3x1o+5x2e+130x0e"),
    "l7": ("3x7o+2x0e+17x1e", "9x7o+1x0e+40x1e"),
}


def module(name: str, num_species: int) -> SpeciesLinear:
    return SpeciesLinear(*CONFIGS[name], num_species)


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


def random_species(n: int, num_species: int, gen: torch.Generator, mode: str = "random") -> torch.Tensor:
    if mode == "random":
        return torch.randint(0, num_species, (n,), generator=gen)
    if mode == "skewed":  # one dominant species (water-like), a few rare ones
        rare = torch.randint(0, num_species, (n,), generator=gen)
        return torch.where(torch.rand(n, generator=gen) < 0.9, torch.zeros_like(rare), rare)
    return torch.full((n,), num_species - 1, dtype=torch.int64)  # single species


def inputs(m: SpeciesLinear, n: int, num_species: int, dtype, seed: int, mode: str = "random"):
    """x, weight, grad_out (float64 CPU masters) and species."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, m.dim_in, generator=gen, dtype=torch.float64)
    w = torch.randn(num_species, m.weight_numel, generator=gen, dtype=torch.float64)
    g = torch.randn(n, m.dim_out, generator=gen, dtype=torch.float64)
    return x.to(dtype), w.to(dtype), g.to(dtype), random_species(n, num_species, gen, mode)


def cuda_ops(m, x, w, g, species, num_species):
    xd, wd, gd, sd = (t.to(DEV) for t in (x, w, g, species))
    order = torch.argsort(sd, stable=True)
    a = (sd, order, m.op_ins, m.path_weights)
    poison((x.shape[0], m.dim_out), dtype=x.dtype)
    out = OPS.species_linear_fwd(xd, wd, *a, m.dim_out)
    poison((x.shape[0], m.dim_in), dtype=x.dtype)
    gx = OPS.species_linear_bwd_x(gd, wd, *a, m.dim_in)
    poison((num_species, m.weight_numel), dtype=x.dtype)
    gw = OPS.species_linear_bwd_w(xd, gd, *a, num_species)
    return out, gx, gw


def ref_ops(m, x, w, g, species, num_species):
    x, w, g = (t.to(torch.float64) for t in (x, w, g))
    a = (species, m.op_ins, m.path_weights)
    return (species_linear_fwd_ref(x, w, *a, m.dim_out), species_linear_bwd_x_ref(g, w, *a, m.dim_in),
            species_linear_bwd_w_ref(x, g, *a, num_species))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_reference(name, dtype):
    num_species = 89
    m = module(name, num_species)
    x, w, g, species = inputs(m, 700, num_species, dtype, seed=list(CONFIGS).index(name))
    for got, ref, what in zip(cuda_ops(m, x, w, g, species, num_species), ref_ops(m, x, w, g, species, num_species),
                              ("fwd", "bwd_x", "bwd_w")):
        assert rel_err(got, ref) <= TOL[dtype], what


@pytest.mark.parametrize("mode", ["skewed", "single"])
@pytest.mark.parametrize("name", ["mace_skip", "sevennet_l3i5"])
def test_many_tiles_and_chunks(name, mode):
    """A dominant species spans many node tiles and weight-gradient chunks."""
    num_species = 4
    m = module(name, num_species)
    x, w, g, species = inputs(m, 9000, num_species, torch.float32, seed=3, mode=mode)
    for got, ref, what in zip(cuda_ops(m, x, w, g, species, num_species), ref_ops(m, x, w, g, species, num_species),
                              ("fwd", "bwd_x", "bwd_w")):
        assert rel_err(got, ref) <= TOL[torch.float32], what


def test_large_random_89_species():
    num_species = 89
    m = module("mace_skip", num_species)
    x, w, g, species = inputs(m, 32768, num_species, torch.float32, seed=4)
    got = cuda_ops(m, x, w, g, species, num_species)
    ref = ref_ops(m, x, w, g, species, num_species)
    for a, b, what in zip(got, ref, ("fwd", "bwd_x", "bwd_w")):
        assert rel_err(a, b) <= TOL[torch.float32], what


def test_empty_and_absent_species():
    m = module("mixed", 5)
    x, w, g, species = inputs(m, 0, 5, torch.float64, seed=5)
    out, gx, gw = cuda_ops(m, x, w, g, species, 5)
    assert out.shape == (0, m.dim_out) and gx.shape == (0, m.dim_in)
    assert gw.shape == (5, m.weight_numel) and gw.abs().max().item() == 0
    x, w, g, species = inputs(m, 50, 5, torch.float64, seed=6)
    species = species % 2  # species 2..4 absent: zero weight gradient
    _, _, gw = cuda_ops(m, x, w, g, species, 5)
    assert gw[2:].abs().max().item() == 0 and gw[:2].abs().max().item() > 0


def test_invalid_species_rows_are_nan():
    """Species outside [0, S) cannot be checked without a host sync: their rows become NaN, the
    other rows are unaffected, and they do not contribute to the weight gradient."""
    m = module("sevennet0", 3)
    x, w, g, species = inputs(m, 40, 3, torch.float64, seed=7)
    bad = torch.zeros(40, dtype=torch.bool)
    bad[[3, 17, 39]] = True
    species[3], species[17], species[39] = 3, -1, 11
    out, gx, gw = (t.cpu() for t in cuda_ops(m, x, w, g, species, 3))
    assert torch.isnan(out[bad]).all() and torch.isnan(gx[bad]).all()
    ref = ref_ops(m, x[~bad], w, g[~bad], species[~bad], 3)
    assert rel_err(out[~bad], ref[0]) <= 1e-10 and rel_err(gx[~bad], ref[1]) <= 1e-10
    assert rel_err(gw, ref[2]) <= 1e-10


@pytest.mark.parametrize("op", ["fwd", "bwd_x", "bwd_w"])
def test_bitwise_deterministic(op):
    num_species = 89
    m = module("mace_skip", num_species)
    x, w, g, species = inputs(m, 5000, num_species, torch.float32, seed=8, mode="skewed")
    xd, wd, gd, sd = (t.to(DEV) for t in (x, w, g, species))
    a = (sd, torch.argsort(sd, stable=True), m.op_ins, m.path_weights)
    call = {
        "fwd": lambda: OPS.species_linear_fwd(xd, wd, *a, m.dim_out),
        "bwd_x": lambda: OPS.species_linear_bwd_x(gd, wd, *a, m.dim_in),
        "bwd_w": lambda: OPS.species_linear_bwd_w(xd, gd, *a, num_species),
    }[op]
    first = call().clone()
    for _ in range(5):
        assert torch.equal(call(), first)


def test_double_backward_matches_cpu():
    """Force-training graph: E = sum(out^2) + sum(out); F = dE/dx (create_graph); loss(F)
    differentiated with respect to x and W, through the C++ autograd kernel."""
    num_species = 7
    m = module("sevennet_l3i5", num_species).double()
    x, w, _, species = inputs(m, 300, num_species, torch.float64, seed=9)
    target = torch.randn(x.shape, generator=torch.Generator().manual_seed(10), dtype=torch.float64)

    def grads(device):
        xd = x.to(device).requires_grad_()
        wd = w.to(device).requires_grad_()
        sd = species.to(device)
        out = OPS.species_linear_fwd(xd, wd, sd, torch.argsort(sd, stable=True), m.op_ins, m.path_weights, m.dim_out)
        e = (out ** 2).sum() + out.sum()
        (fx,) = torch.autograd.grad(e, xd, create_graph=True)
        hx, hw = torch.autograd.grad(((fx - target.to(device)) ** 2).sum(), (xd, wd))
        return e.detach(), fx.detach(), hx, hw

    for a, b in zip(grads(DEV), grads("cpu")):
        assert rel_err(a.reshape(-1), b.reshape(-1)) <= 1e-10


def test_gradcheck_and_gradgradcheck():
    m = module("mixed", 3).double()
    x, w, _, species = inputs(m, 6, 3, torch.float64, seed=11)
    sd = species.to(DEV)
    order = torch.argsort(sd, stable=True)
    xd, wd = x.to(DEV).requires_grad_(), w.to(DEV).requires_grad_()
    fn = lambda x, w: OPS.species_linear_fwd(x, w, sd, order, m.op_ins, m.path_weights, m.dim_out)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (xd, wd), fast_mode=True)
    assert torch.autograd.gradgradcheck(fn, (xd, wd), fast_mode=True)


def test_module_and_torchscript_on_cuda():
    m = module("mace_to_hidden", 10).double()
    x, _, _, species = inputs(m, 200, 10, torch.float64, seed=12)
    ref = m.forward_species(x, species)  # CPU: gather + einsum

    class Uses(torch.nn.Module):
        def __init__(self, sl):
            super().__init__()
            self.sl = sl

        def forward(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
            return self.sl.forward_species(x, species)

    mc = Uses(m).to(DEV)
    assert rel_err(mc(x.to(DEV), species.to(DEV)), ref) <= 1e-10
    scripted = torch.jit.script(mc)
    assert rel_err(scripted(x.to(DEV), species.to(DEV)), ref) <= 1e-10


def test_cuda_graph_capture_and_replay():
    """No host synchronisation: forward + force backward capture into a CUDA graph; replays
    with new inputs equal eager calls."""
    num_species = 89
    m = module("mace_skip", num_species).to(DEV)
    gen = torch.Generator().manual_seed(13)
    n = 3000
    x = torch.randn(n, m.dim_in, generator=gen).to(DEV)
    species = torch.randint(0, num_species, (n,), generator=gen).to(DEV)
    g = torch.randn(n, m.dim_out, generator=gen).to(DEV)

    def step():
        xr = x.detach().requires_grad_()
        out = m.forward_species(xr, species)
        (gx,) = torch.autograd.grad(out, xr, g)
        return out.detach(), gx

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    for seed in (14, 15):
        gen = torch.Generator().manual_seed(seed)
        x.copy_(torch.randn(n, m.dim_in, generator=gen).to(DEV))
        species.copy_(torch.randint(0, num_species, (n,), generator=gen).to(DEV))
        graph.replay()
        eager = step()
        for a, b in zip(captured, eager):
            assert torch.equal(a, b)
