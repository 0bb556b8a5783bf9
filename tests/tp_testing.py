"""Tensor-product problems of the CUDA tests (tests/gpu/test_tp_conv_cuda.py), importable without a
GPU so tools/prebuild_gpu_kernels.py can compile their generated kernels ahead; the graph, operands and error
measure of the emulated kernel tests (tests/test_tp_conv_*_emulated.py)."""
from __future__ import annotations

import torch

from md_accel.ops.tp_conv import build_graph
from md_accel.ops.tp_problem import TPProblem


def sh(lmax: int) -> str:
    return "+".join(f"1x{l}{'e' if l % 2 == 0 else 'o'}" for l in range(lmax + 1))


uvu_problem = TPProblem.all_uvu  # every 'uvu' path with l_out <= lmax_out (the name the tests use)


CONFIGS = {
    "mace_medium": lambda: uvu_problem("128x0e+128x1o", sh(3), 3),
    "mace_mp_medium": lambda: uvu_problem("128x0e+128x1o", sh(3), 3, parity_filter=True),
    "first_layer": lambda: uvu_problem("128x0e", sh(3), 3),
    "sevennet0_like": lambda: uvu_problem("128x0e+64x1e+32x2e", sh(2), 2),
    "sevennet_l3i5_like": lambda: uvu_problem("64x0e+32x1o+32x2e+32x3o", sh(3), 3),
    # every multiplicity 32: the float64 forward's wider budget (_codegen.FWD_ACC_NARROW), as benchmarks' nequip_l3
    "nequip_l3": lambda: uvu_problem("32x0e+32x1o+32x2e+32x3o", sh(3), 3),
    "nequip_l4": lambda: uvu_problem("16x0e+16x1o+16x2e+16x3o+16x4e", sh(4), 4),
    "l6": lambda: uvu_problem("3x5o+2x6e", sh(6), 6),
    "in2_mul2": lambda: TPProblem.create("8x0e+8x1o", "2x0e+1x1o", "8x0e+8x1o+8x1o",
                                         [(0, 0, 0, "uvu", True), (1, 0, 1, "uvu", True),
                                          (0, 1, 2, "uvu", True), (1, 1, 0, "uvu", True)]),
}


def hub_graph(gen):
    """30 nodes: 24..29 neither send nor receive; node 3 receives 60 edges (cut by small chunks)."""
    n = 30
    src = torch.cat([torch.randint(0, 24, (150,), generator=gen), torch.randint(0, 24, (60,), generator=gen)])
    dst = torch.cat([torch.randint(0, 24, (150,), generator=gen), torch.full((60,), 3)])
    return n, build_graph(src, dst, n)


def second_order_problem(plan, seed: int):
    """(n, hub graph, float64 (x, y, w, grad_out, gg_x, gg_y, gg_w), dense CG blocks) for a double backward."""
    gen = torch.Generator().manual_seed(seed)
    n, g = hub_graph(gen)
    e = g.src.numel()
    shapes = ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), (n, plan.dim_out))
    first = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes]
    second = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes[:3]]
    return n, g, first + second, [c.double() for c in plan.dense]


def rel_err(a, b):
    assert torch.isfinite(a).all(), "unwritten (NaN) element"
    return (a.double() - b).abs().max().item() / max(b.abs().max().item(), 1e-300)
