"""Problems and hidden widths of the fused-radial CUDA tests (tests/gpu/test_tp_conv_fused_cuda.py),
importable without a GPU so tools/prebuild_gpu_kernels.py can compile their kernels ahead."""
from __future__ import annotations

import sys
from pathlib import Path

from md_accel.ops.tp_problem import TPProblem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from workloads import WORKLOADS  # noqa: E402


def _workload(name):
    w = WORKLOADS[name]
    return TPProblem.create(w.irreps_in1, w.irreps_in2, w.irreps_out, w.instructions)


CONFIGS = {  # name -> (problem, hidden width)
    "mace_mp0_medium": (lambda: _workload("mace_mp0_medium"), 64),
    "mace_first": (lambda: _workload("mace_first"), 64),
    "sevennet_0": (lambda: _workload("sevennet_0"), 64),
    "sevennet_l3i5": (lambda: _workload("sevennet_l3i5"), 64),
    "nequip_l3_h32": (lambda: _workload("nequip_l3"), 32),
    "in2_mul2": (lambda: TPProblem.create("8x0e+8x1o", "2x0e+1x1o", "8x0e+8x1o+8x1o",
                                          [(0, 0, 0, "uvu", True), (1, 0, 1, "uvu", True),
                                           (0, 1, 2, "uvu", True), (1, 1, 0, "uvu", True)]), 16),
    "tiny": (lambda: TPProblem.create("2x0e+2x1o", "1x0e+1x1o", "2x0e+2x1o+2x1e",
                                      [(0, 0, 0, "uvu", True), (0, 1, 1, "uvu", True), (1, 1, 2, "uvu", True)]), 16),
}
