"""The float32 forward on the tensor cores (``Tuning.fwd_mma``, md_accel/ops/_codegen_mma.py) on the CPU: the
generated ``fwd_kernel_mma`` through the host emulation of CUDA (tests/cuda_emu: mma.sync from the PTX ISA's
fragment layouts, the tensor cores' adds truncating) against the float64 reference, in edge chunks (accumulate) with
the output poisoned first; the pass plan against the paths it must cover. The GPU side:
tests/gpu/test_tp_conv_cuda.py under MD_ACCEL_TP_TUNING=fwd_mma=..."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402
from test_tp_conv_chunked_emulated import chunked_forward, forward_problem  # noqa: E402
from tp_testing import rel_err  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

from md_accel.ops import _codegen, _codegen_mma  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402

# (in1, in2, n-tiles per pass): l1 = 3 (7 components: a lane's second A column partly outside), 64 channels (two
# warps per edge slot, two slots) beside 32, l1 = 4 (9 components: two k-steps), a budget that splits every block
PROBLEMS = {"l3, 32 channels": ("32x0e+32x1o+32x3o", "1x0e+1x1o+1x2e", 4),
            "64 and 32 channels": ("64x0e+32x1o", "1x0e+1x1o+1x2e+1x3o", 3),
            "l4, two k-steps": ("32x4e+32x1o", "1x0e+1x1o", 2)}
_LIB = {}


def _libraries(problem: str):
    """(plan, tensor-core library, scalar library) of a PROBLEMS entry."""
    if problem not in _LIB:
        in1, in2, tiles = PROBLEMS[problem]
        plan = TPProblem.all_uvu(in1, in2, 4).lower()
        struct = _codegen.plan_structure(plan)
        src = _codegen.generate(struct, _codegen.Tuning(fwd_mma=tiles))
        assert "fwd_kernel_mma<<<" in src
        _LIB[problem] = (plan, emulate.SpecLibrary(src), emulate.SpecLibrary(_codegen.generate(struct)))
    return _LIB[problem]


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_forward_on_tensor_cores_matches_reference(problem):
    """float32: the tensor-core forward within float32's tolerance of the float64 reference, in edge chunks and
    whole, and not the scalar forward's bits (it ran); with the weights one element off 16-byte alignment the
    launcher takes the scalar forward: its bits exactly. float64 never takes it: the scalar forward's bits."""
    plan, lib, scalar = _libraries(problem)
    n, g, inputs, ref = forward_problem(plan, 11)
    e = g.src.numel()
    x, y, w = (t.float().contiguous() for t in inputs)
    chunks = chunked_forward(lib, plan, n, g, (x, y, w), 13)
    assert rel_err(chunks, ref) <= 2e-6, rel_err(chunks, ref)
    whole = chunked_forward(lib, plan, n, g, (x, y, w), e)
    assert rel_err(whole, ref) <= 2e-6, rel_err(whole, ref)
    scalar_whole = chunked_forward(scalar, plan, n, g, (x, y, w), e)
    assert not torch.equal(whole, scalar_whole)
    shifted = torch.cat([w.new_zeros(1), w.flatten()])[1:].view(w.shape)
    assert shifted.data_ptr() % 16 != 0
    assert torch.equal(chunked_forward(lib, plan, n, g, (x, y, shifted), e), scalar_whole)
    d = [t.contiguous() for t in inputs]
    assert torch.equal(chunked_forward(lib, plan, n, g, d, e), chunked_forward(scalar, plan, n, g, d, e))


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_passes_cover_every_path_once(problem):
    """Each pass: one multiplicity, at most the budget's n-tiles of 8 columns, each lane's column pair (2t, 2t + 1)
    from one path; over the passes every output component of every path exactly once."""
    in1, in2, tiles = PROBLEMS[problem]
    _, live, _, _ = _codegen._analyse(_codegen.plan_structure(TPProblem.all_uvu(in1, in2, 4).lower()))
    seen = []
    for tiles_of_pass in _codegen_mma.passes(live, tiles):
        assert len({t.key[1] for t in tiles_of_pass}) == 1
        assert len(tiles_of_pass) <= tiles
        for t in tiles_of_pass:
            assert len(t.cols) == 8 and all(c is None or c[0].in1_key == t.key for c in t.cols)
            for q in range(4):
                a, b = t.cols[2 * q], t.cols[2 * q + 1]
                assert b is None or (a is not None and a[0] is b[0])
            seen += [(c[0].idx, c[1]) for c in t.cols if c]
    assert sorted(seen) == sorted((p.idx, k) for p in live for k in range(p.d3))


def test_not_generated_where_the_plan_does_not_allow():
    """Multiplicities that are not multiples of 32, and the default tuning: no tensor-core forward."""
    def has(in1, tune):
        src = _codegen.generate(_codegen.plan_structure(TPProblem.all_uvu(in1, "1x0e+1x1o", 2).lower()), tune)
        return "fwd_kernel_mma" in src

    assert has("32x0e+32x1o", _codegen.Tuning(fwd_mma=8))
    assert not has("32x0e+32x1o", _codegen.Tuning())
    assert not has("16x0e+32x1o", _codegen.Tuning(fwd_mma=8))
