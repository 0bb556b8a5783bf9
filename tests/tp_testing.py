"""Tensor-product problems of the CUDA tests (tests/gpu/test_tp_conv_cuda.py), importable without a
GPU so tools/prebuild_gpu_kernels.py can compile their generated kernels ahead."""
from __future__ import annotations

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
