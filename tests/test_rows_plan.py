"""md_accel/ops/_rows_plan.py: where the deterministic backward keeps its grad_x rows in grad_w. For the
benchmark workloads and the GPU tests' plans, with the pass structures of both dtypes' backward and double
backward: every row element gets a grad_w column of its own within its run, inside the weight columns of a path
that no earlier run has written and that the run itself does not write (a path of a later run or a deferred one),
and every in1 block's passes lie in one run."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from workloads import WORKLOADS  # noqa: E402

from md_accel.ops import _codegen  # noqa: E402
from md_accel.ops._rows_plan import rows_in_grad_w  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402
from tp_testing import CONFIGS  # noqa: E402

PROBLEMS = {**{f"workload_{n}": (lambda w=w: TPProblem.create(w.irreps_in1, w.irreps_in2, w.irreps_out,
                                                                w.instructions)) for n, w in WORKLOADS.items()},
            **{f"config_{n}": make for n, make in CONFIGS.items()}}
TUNE = _codegen.Tuning()
BUDGETS = {"bwd_f32": (TUNE.bwd_g32, TUNE.bwd_g32), "bwd_f64": (TUNE.bwd_g64, min(TUNE.bwd_g64, TUNE.merge_g64)),
           "dbwd_f32": (TUNE.dbwd_g32, TUNE.dbwd_g32), "dbwd_f64": (TUNE.dbwd_g64, min(TUNE.dbwd_g64, TUNE.merge_g64)),
           "split_every_block": (4, 0)}


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_rows_fit_in_unwritten_weight_columns(name, budget):
    try:
        _, live, _, _ = _codegen._analyse(_codegen.plan_structure(PROBLEMS[name]().lower()))
    except _codegen.Unsupported:
        pytest.skip("no specialised kernels for this plan")
    groups = _codegen._bwd_groups(live, *BUDGETS[budget])
    plan = rows_in_grad_w(groups, live)
    assert plan is not None
    runs = plan.launches
    assert runs[0][0] == 0 and runs[-1][1] == len(groups)
    assert all(a < b == c for (a, b), (c, _) in zip(runs, runs[1:] + [(runs[-1][1], None)]))
    columns = {p.idx: {p.w_off + u * p.w_stride for u in range(p.mul)} for p in live}
    deferred = {p.idx for p in plan.deferred}
    for r, (a, b) in enumerate(runs):
        keys = {p.in1_key for g in groups[a:b] for p in g}
        assert not keys & {p.in1_key for g in groups[:a] + groups[b:] for p in g}, "a block's passes in two runs"
        assert {k for k, run in plan.launch_of.items() if run == r} == keys
        free = set().union(*(columns[p.idx] for g in groups[b:] for p in g), *(columns[i] for i in deferred))
        used = set()
        for key in keys:
            for i in range(key[2]):
                base, stride = plan.slots[key, i]
                cols = {base + u * stride for u in range(key[1])}
                assert len(cols) == key[1] and not cols & used, (key, i, "columns shared")
                assert any(cols <= c for c in columns.values()), (key, i, "not within one path's columns")
                assert cols <= free, (key, i, "columns written before the run's sum")
                used |= cols
    # the paths the kernel leaves to the deferred pass are exactly the deferred ones, each a live path
    assert deferred <= {p.idx for p in live}


def test_shared_weight_blocks_get_no_plan():
    _, live, _, _ = _codegen._analyse(_codegen.plan_structure(CONFIGS["sevennet0_like"]().lower()))
    twin = _codegen._Path(99, (live[0].in1_off, live[0].mul, live[0].l1, live[0].in2_off, live[0].l2,
                               live[0].out_off, live[0].l3, live[0].w_off, live[0].w_stride), live[0].nz)
    assert rows_in_grad_w([[*live, twin]], [*live, twin]) is None


def test_generated_constant_memory_fits_wide_plans():
    """The generated library's __constant__ data stays under the GPU's 64 KiB (ptxas refuses more: the kernels
    would not build): a wide plan, whose rows-in-grad_w tables alone would take ~80 KiB there, keeps them in
    global memory."""
    import re

    plan = TPProblem.all_uvu("256x0e+256x1o+256x2e", "1x0e+1x1o+1x2e", 2).lower()
    src = _codegen.generate(_codegen.plan_structure(plan))
    assert "rows_in_gw_" in src and "kSlotPos_" in src
    size = {"int": 4, "float": 4, "double": 8}
    total = 0
    for typ, dims in re.findall(r"__constant__\s+(?:const\s+)?(\w+)\s+\w+((?:\[\d+\])+)", src):
        count = 1
        for d in re.findall(r"\d+", dims):
            count *= int(d)
        total += size[typ] * count
    assert total < 64 * 1024, total


@pytest.mark.parametrize("mode", [1, 0, "on", None, "Auto"])
def test_set_rows_in_grad_w_refuses_unknown_modes(mode):
    """The process-wide switch takes True, False or "auto" only: 1 / 0 (equal to True / False in Python but not
    bools) and misspelt modes are refused before anything is set, with or without the CUDA library."""
    from md_accel.ops import set_rows_in_grad_w

    with pytest.raises(ValueError, match="True, False or 'auto'"):
        set_rows_in_grad_w(mode)
