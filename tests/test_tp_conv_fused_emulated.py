"""The generated fused-radial CUDA kernels (md_accel/ops/_codegen_fused.py) run on the CPU through
a host emulation of CUDA (tests/cuda_emu: a thread per CUDA thread, real barriers and shuffles),
against the plain-torch reference: every output, both dtypes, graph corner cases, and results
bit-identical for any grid size. Needs g++; the GPU itself: tests/gpu/test_tp_conv_fused_cuda.py."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

from md_accel.o3 import Irreps  # noqa: E402
from md_accel.ops import _codegen, _codegen_fused  # noqa: E402
from md_accel.ops.tp_conv import build_graph  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402
from md_accel.ops.tp_reference import tp_conv_fused_bwd_ref, tp_conv_fused_fwd_ref  # noqa: E402

TOL = {torch.float64: 1e-13, torch.float32: 2e-6}
HIDDEN = 32


def uvu(irreps_in1: str, lmax: int) -> TPProblem:
    """Every 'uvu' path with l_out <= lmax, one output block each."""
    i1, i2 = Irreps(irreps_in1), Irreps("+".join(f"1x{l}{'e' if l % 2 == 0 else 'o'}" for l in range(lmax + 1)))
    out, ins = [], []
    for a, m1 in enumerate(i1):
        for b, m2 in enumerate(i2):
            for l3 in range(abs(m1.ir.l - m2.ir.l), min(m1.ir.l + m2.ir.l, lmax) + 1):
                ins.append((a, b, len(out), "uvu", True))
                out.append(f"{m1.mul}x{l3}{'e' if m1.ir.p * m2.ir.p == 1 else 'o'}")
    return TPProblem.create(irreps_in1, str(i2), "+".join(out), ins)


# one multiplicity (a 32-channel warp, 8 edge slots) / three, with 4- and 8-slot groups and a
# 2-warp slot (cross-warp grad_y and grad_hidden sums)
PROBLEMS = {"narrow": lambda: uvu("8x0e+8x1o", 2), "mixed": lambda: uvu("40x0e+8x1o+8x2e", 2),
            "mace_medium": lambda: uvu("128x0e+128x1o", 3)}  # 4-warp slots, the models' hidden width
HIDDEN_OF = {"mace_medium": 64}
_LIBS = {}


def library(name, w_global=False):
    if (name, w_global) not in _LIBS:
        plan = PROBLEMS[name]().lower()
        src = _codegen_fused.generate_fused(_codegen.plan_structure(plan), HIDDEN_OF.get(name, HIDDEN), w_global)
        _LIBS[name, w_global] = (plan, emulate.FusedLibrary(src))
    return _LIBS[name, w_global]


def graph(kind: str, gen: torch.Generator):
    if kind == "random":  # 3/4 of the nodes active, one receiver with 40 extra senders
        n = 16
        src, dst = torch.randint(0, 12, (90,), generator=gen), torch.randint(0, 12, (90,), generator=gen)
        src, dst = torch.cat([src, torch.randint(0, 12, (40,), generator=gen)]), torch.cat([dst, torch.full((40,), 3)])
    elif kind == "single_edge":
        n, src, dst = 3, torch.tensor([2]), torch.tensor([0])
    elif kind == "no_edges":
        n, src, dst = 4, torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    else:  # one node with self-loops
        n, src, dst = 1, torch.zeros(3, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)
    return n, build_graph(src, dst, n)


def run(name, kind, dtype, seed, grid=(2, 1), grad_w=True, w_global=False):
    plan, lib = library(name, w_global)
    gen = torch.Generator().manual_seed(seed)
    n, g = graph(kind, gen)
    e, hidden = g.src.numel(), HIDDEN_OF.get(name, HIDDEN)
    x, y, h, go = (torch.randn(*s, generator=gen, dtype=torch.float64)
                   for s in ((n, plan.dim_in1), (e, plan.dim_in2), (e, hidden), (n, plan.dim_out)))
    W = torch.randn(hidden, plan.weight_numel, generator=gen, dtype=torch.float64) / hidden ** 0.5
    os.environ["EMU_SMS"], os.environ["EMU_PER_SM"] = str(grid[0]), str(grid[1])
    ops = [t.to(dtype).contiguous() for t in (x, y, h, W, go)]
    cg = plan.cg_val.to(dtype)
    out = lib.fwd(*ops[:4], g, cg, plan.dim_out)
    grads = lib.bwd(ops[4], *ops[:4], g, cg, grad_w)
    dense = [c.to(torch.float64) for c in plan.dense]
    ref_out = tp_conv_fused_fwd_ref(x, y, h, W, g.src, g.dst, n, plan.paths.tolist(), dense, plan.dim_out)
    ref = tp_conv_fused_bwd_ref(go, x, y, h, W, g.src, g.dst, plan.paths.tolist(), dense, True)
    ref_gw = h.new_zeros(0)
    if grad_w:  # grad_W_last = hidden^T grad_w: check grad_w itself
        from md_accel.ops.tp_reference import tp_conv_bwd_ref
        ref_gw = tp_conv_bwd_ref(go, x, y, h @ W, g.src, g.dst, plan.paths.tolist(), dense)[2]
    return (out, *grads), (ref_out, *ref[:3], ref_gw)


def rel_err(a, b):
    assert a.shape == b.shape and torch.isfinite(a).all(), "unwritten (NaN) output"
    scale = b.abs().max().item() if b.numel() else 0.0
    return (a.double() - b).abs().max().item() / (scale or 1.0) if a.numel() else 0.0


@pytest.mark.parametrize("w_global", [False, True], ids=["W_smem", "W_global"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_matches_reference(name, dtype, w_global):
    got, want = run(name, "random", dtype, seed=1, w_global=w_global)
    for what, a, b in zip(("out", "grad_x", "grad_y", "grad_hidden", "grad_w"), got, want):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))


@pytest.mark.parametrize("kind", ["random", "single_edge", "no_edges", "self_loops"])
def test_graph_shapes_and_grid_independence(kind):
    """Every grid size gives the same bits (sums never depend on the block partition)."""
    runs = [run("narrow", kind, torch.float32, seed=2, grid=grid, grad_w=grid != (3, 2))
            for grid in ((1, 1), (3, 2), (7, 3))]
    for got, want in runs:
        for what, a, b in zip(("out", "grad_x", "grad_y", "grad_hidden", "grad_w"), got, want):
            if a is not None:
                assert rel_err(a, b) <= TOL[torch.float32], (what, rel_err(a, b))
    for got, _ in runs[1:]:
        for a, b in zip(got[:4], runs[0][0][:4]):
            assert torch.equal(a, b)
