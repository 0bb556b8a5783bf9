"""The edge-chunked materialised conv (csrc/tp_conv_chunked_cuda.cpp) on the CPU: the generated
tp_conv kernels (md_accel/ops/_codegen.py) run through the host emulation of CUDA (tests/cuda_emu)
chunk by chunk, with ``TPDims::accumulate`` after the first chunk and each chunk's graph built as
the C++ driver builds it (receiver offsets clamped to the chunk, the by-sender order filtered by
prefix counts). Against the plain-torch reference with w = hidden @ W: outputs, grad_x, grad_y,
grad_w, for chunk sizes that cut a receiver's edges; untouched rows stay untouched. The GPU side:
tests/gpu/test_tp_conv_fused_cuda.py::test_chunked_materialised."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402
from tp_testing import hub_graph, rel_err, second_order_problem  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

from md_accel.ops import _codegen  # noqa: E402
from md_accel.ops._custom_ops import _dense_cg  # noqa: E402
from md_accel.ops.tp_conv import build_graph  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402
from md_accel.ops.tp_reference import tp_conv_bwd_ref, tp_conv_dbwd_ref, tp_conv_fwd_ref  # noqa: E402

TOL = {torch.float64: 1e-13, torch.float32: 2e-6}
_LIB = {}


# the default kernels (L2 prefetch of the next edge's weights in the forward, the float32 backward and
# the double backward; backward passes merged over both in1 blocks) and tuning variants
# (MD_ACCEL_TP_TUNING): prefetch in every kernel, of y and x too (PF_FWD_XY, PF_PART1_XY), with budgets
# small enough to split every pass, and neither prefetch, merged passes nor the weights' evict-first loads (which the
# host emulation reads as plain loads), and the forward in blocks of one warp (its default: four edge slots, as
# the plan's channels fit a warp; in one-warp blocks its rows come by bulk copies, Tuning.fwd_tma, and every pass is
# split in float32 too, fwd_acc32=0), and the double backward's part 1 walking each receiver's edges from a rotated
# start (Tuning.wave), float32's too (its launch bounds given a minimum of resident blocks, min_warps32);
# grad_y through shared memory: test_grad_y_through_shared_memory
TUNINGS = {"default": _codegen.Tuning(),
           "wave": _codegen.Tuning(wave=1, min_warps32=8),
           "prefetch_all_split": _codegen.Tuning(prefetch=_codegen.PF_ALL, fwd_acc=4, fwd_acc_narrow=0, bwd_g32=4,
                                                 bwd_g64=4),
           "plain": _codegen.Tuning(prefetch=0, merge_in1=0, w_evict=0),
           "one_warp_forward": _codegen.Tuning(fwd_min_block=32, fwd_acc=4, fwd_acc32=0, fwd_acc_narrow=0)}
# wave's edges in order (test_rotated_part1_gives_the_same_bits alone)
IN_ORDER = {"in_order": _codegen.Tuning(min_warps32=8)}


def _library(name: str, make_problem, tune: _codegen.Tuning):
    """(plan, emulated library) of ``make_problem()`` generated under ``tune``, built once per (name, tune)."""
    if (name, tune) not in _LIB:
        plan = make_problem().lower()
        _LIB[name, tune] = (plan, emulate.SpecLibrary(_codegen.generate(_codegen.plan_structure(plan), tune)))
    return _LIB[name, tune]


def plan_and_library(tuning="default"):
    """The test plan's generated library under a TUNINGS entry; "unused_in1": a plan with an in1 block (4x2e)
    that no path reads (the kernels zero its grad_x columns), default tuning; "unused_mid_in1": that block between
    the two that are read (a gap the kernels zero, not only a tail)."""
    in1 = {"unused_in1": "8x0e+8x1o+4x2e", "unused_mid_in1": "8x0e+4x2e+8x1o"}.get(tuning, "8x0e+8x1o")
    b = 2 if tuning == "unused_mid_in1" else 1  # the 8x1o block
    return _library(in1, lambda: TPProblem.create(
        in1, "1x0e+1x1o+1x2e", "8x0e+8x1o+8x1e+8x2o+8x1o",
        [(0, 0, 0, "uvu", True), (0, 1, 1, "uvu", True), (b, 1, 2, "uvu", True), (b, 2, 3, "uvu", True),
         (b, 0, 4, "uvu", True)]), {**TUNINGS, **IN_ORDER}.get(tuning, _codegen.Tuning()))


def chunk_graph(g, e0: int, e1: int):
    """The chunk graph BwdChunks (csrc/tp_conv_chunked_cuda.cpp) builds for edges [e0, e1), by
    its definition: the global by-sender order filtered to the range (its kernels are checked
    against this definition in tests/test_chunk_graph_emulated.py)."""
    ec = e1 - e0
    dst_ptr = (g.dst_ptr - e0).clamp(0, ec)
    member = (g.src_perm >= e0) & (g.src_perm < e1)
    count = torch.cumsum(member, 0)
    src_ptr = torch.cat([count.new_zeros(1), count]).index_select(0, g.src_ptr)
    slot = torch.where(member, count - 1, torch.arange(ec, ec + g.src_perm.numel()))
    src_perm = torch.empty(ec + g.src_perm.numel(), dtype=torch.int64).scatter_(0, slot, g.src_perm - e0)
    return g.src[e0:e1], g.dst[e0:e1], dst_ptr, src_perm, src_ptr


@pytest.mark.parametrize("tuning", list(TUNINGS))
@pytest.mark.parametrize("step", [13, 40, 1000])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_chunks_match_reference(step, dtype, tuning):
    plan, lib = plan_and_library(tuning)
    gen = torch.Generator().manual_seed(step)
    n, g = hub_graph(gen)
    e = g.src.numel()
    x, y, w, go = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
                   ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), (n, plan.dim_out)))
    dense = [c.double() for c in plan.dense]
    ref_out = tp_conv_fwd_ref(x, y, w, g.src, g.dst, n, plan.paths.tolist(), dense, plan.dim_out)
    ref_gx, ref_gy, ref_gw = tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    xs, ys, ws, gos = (t.to(dtype).contiguous() for t in (x, y, w, go))
    nan = float("nan")
    out = torch.full((n, plan.dim_out), nan, dtype=dtype)
    gx, gy, gw = torch.full_like(xs, nan), torch.full_like(ys, nan), torch.full_like(ws, nan)
    for e0 in range(0, e, step):
        e1 = min(e, e0 + step)
        cg_graph = chunk_graph(g, e0, e1)
        lib.fwd(xs, ys[e0:e1], ws[e0:e1], cg_graph, out, accumulate=e0 > 0)
        work = torch.full((e1 - e0, plan.dim_in1), nan, dtype=dtype)
        lib.bwd(gos, xs, ys[e0:e1], ws[e0:e1], cg_graph, gx, gy[e0:e1], gw[e0:e1], work, accumulate=e0 > 0)
    for what, a, b in (("out", out, ref_out), ("grad_x", gx, ref_gx), ("grad_y", gy, ref_gy), ("grad_w", gw, ref_gw)):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))


@pytest.mark.parametrize("tuning", list(TUNINGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_double_backward_matches_reference(dtype, tuning):
    """The generated double backward (g_grad_out, then grad_x, grad_y, grad_w of <gg, dF>) on the
    whole graph, every output poisoned first, against tp_conv_dbwd_ref."""
    plan, lib = plan_and_library(tuning)
    n, g, (x, y, w, go, ggx, ggy, ggw), dense = second_order_problem(plan, 7)
    e = g.src.numel()
    shapes = ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), (n, plan.dim_out))
    ref = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    args = [t.to(dtype).contiguous() for t in (ggx, ggy, ggw, go, x, y, w)]
    nan = float("nan")
    outs = [torch.full(s, nan, dtype=dtype) for s in (shapes[3], shapes[0], shapes[1], shapes[2])]
    work = torch.full((e, plan.dim_in1), nan, dtype=dtype)
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    lib.dbwd(*args, graph, *outs, work)
    for what, a, b in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"), outs, ref):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))
    # no g_grad_out asked for (null output): the others unchanged
    for t in outs[1:] + [work]:
        t.fill_(nan)
    lib.dbwd(*args, graph, None, *outs[1:], work)
    for what, a, b in zip(("grad_x", "grad_y", "grad_w"), outs[1:], ref[1:]):
        assert rel_err(a, b) <= TOL[dtype], (what, "without g_grad_out", rel_err(a, b))


def test_xy_prefetch_only_where_asked():
    """PF_FWD_XY adds the y / x prefetch to every pass of both forward kernels (fwd, and dfwd with ggy / ggx),
    PF_PART1_XY to every pass of the backward's and the double backward's part 1, neither to anything else;
    the emulated tests of ``prefetch_all_split`` run both (the loads of the next sender included)."""
    plan, _ = plan_and_library()
    struct = _codegen.plan_structure(plan)

    def count(tune, what):
        return _codegen.generate(struct, _codegen.Tuning(prefetch=_codegen.PF_DEFAULT | tune)).count(what)

    fwd_passes = count(0, "// group ")  # the forward's and dfwd's passes
    part1_passes = count(0, "// pass ")  # the backward's and the double backward's
    assert fwd_passes >= 2 and part1_passes >= 2
    assert count(_codegen.PF_FWD_XY, "prefetch_l1(x + snext") == fwd_passes
    assert count(_codegen.PF_PART1_XY, "prefetch_l1(x + snext") == part1_passes
    assert count(_codegen.PF_FWD_XY, "prefetch_l2(ggy + (e + ") == count(_codegen.PF_FWD_XY, "prefetch_l1(ggx + snext") > 0
    assert "prefetch_l1" not in _codegen.generate(struct)


def test_weights_loaded_evict_first_only_where_asked():
    """Tuning.w_evict (the default): every load of a per-edge weight (w and ggw, in the forward, dfwd and both part-1
    kernels) goes through ld_stream, nothing else does, but for the double backward's part 1, which reads ggw
    through ld_stream_rw (no read-only path: it may write grad_w into ggw, TPSpec::dbwd_in_gg_w); w_evict=0 gives the
    plain loads back, one for one (__ldg, and for that ggw a plain dereference). The emulation reads ld_stream as
    __ldg, so the emulated tests cannot tell a load that lost its hint."""
    plan, _ = plan_and_library()
    struct = _codegen.plan_structure(plan)
    hinted, plain = _codegen.generate(struct), _codegen.generate(struct, _codegen.Tuning(w_evict=0))
    for ptr in ("wr", "vr"):
        n = plain.count(f"__ldg({ptr} + ")
        assert n > 0 and hinted.count(f"ld_stream({ptr} + ") == n and f"__ldg({ptr} + " not in hinted
    m = plain.count("*(vr + ")
    assert m > 0 and hinted.count("ld_stream_rw(vr + ") == m and "*(vr + " not in hinted
    assert hinted.count("ld_stream_rw(") == m + 2  # + 2 overloads
    assert hinted.count("ld_stream(") == plain.count("__ldg(wr + ") + plain.count("__ldg(vr + ") + 2  # + 2 overloads
    assert hinted.count("__ldg(xr + ") == plain.count("__ldg(xr + ") > 0  # the gathered rows keep the normal policy
    assert "ld_stream" not in plain and "createpolicy" not in plain


def test_prefetch_bits_checked(monkeypatch):
    """MD_ACCEL_TP_TUNING refuses prefetch bits no kernel reads (a build would be cached under a name of its own
    while generating what another setting generates)."""
    monkeypatch.setenv(_codegen.TUNING_ENV, f"prefetch={_codegen.PF_ALL}")
    assert _codegen.tuning().prefetch == _codegen.PF_ALL
    monkeypatch.setenv(_codegen.TUNING_ENV, f"prefetch={_codegen.PF_ALL + 1}")  # the bit above them all
    with pytest.raises(ValueError, match="prefetch takes the bits"):
        _codegen.tuning()


def test_accumulate_leaves_rows_without_edges_untouched():
    plan, lib = plan_and_library()
    n = 5
    g = build_graph(torch.tensor([4, 0]), torch.tensor([1, 1]), n)  # only node 1 receives, 0 and 4 send
    gen = torch.Generator().manual_seed(0)
    x, y, w, go = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
                   ((n, plan.dim_in1), (2, plan.dim_in2), (2, plan.weight_numel), (n, plan.dim_out)))
    out = torch.full((n, plan.dim_out), 7.0, dtype=torch.float64)
    lib.fwd(x, y, w, chunk_graph(g, 0, 2), out, accumulate=True)
    dense = [c.double() for c in plan.dense]
    ref = tp_conv_fwd_ref(x, y, w, g.src, g.dst, n, plan.paths.tolist(), dense, plan.dim_out)
    assert torch.equal(out[[0, 2, 3, 4]], torch.full((4, plan.dim_out), 7.0, dtype=torch.float64))
    assert rel_err(out[1] - 7.0, ref[1]) <= 1e-13
    gx = torch.full_like(x, 5.0)
    gy, gw, work = torch.empty_like(y), torch.empty_like(w), torch.empty(2, plan.dim_in1, dtype=torch.float64)
    lib.bwd(go, x, y, w, chunk_graph(g, 0, 2), gx, gy, gw, work, accumulate=True)
    ref_gx = tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)[0]
    assert torch.equal(gx[[1, 2, 3]], torch.full((3, plan.dim_in1), 5.0, dtype=torch.float64))
    assert rel_err(gx[[0, 4]] - 5.0, ref_gx[[0, 4]]) <= 1e-13


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_compiled_values_are_the_structures(dtype):
    """The CG values are compiled into the kernels: a library generated from perturbed values (each
    non-zero scaled by its own factor) records exactly those values and computes with them, forward,
    backward and double backward, against the reference built from the same perturbed values."""
    plan, _ = plan_and_library()
    gen = torch.Generator().manual_seed(11)
    vals = plan.cg_val * (0.5 + torch.rand(plan.cg_val.shape, generator=gen, dtype=torch.float64))
    struct = _codegen.structure(plan.paths.tolist(), plan.cg_ptr.tolist(), plan.cg_idx.tolist(), vals.tolist())
    lib = emulate.SpecLibrary(_codegen.generate(struct))
    assert torch.equal(lib.cg_val(), vals)
    plist, dense = _dense_cg(plan.paths, plan.cg_ptr, plan.cg_idx, vals, torch.float64)
    n, g = hub_graph(gen)
    e = g.src.numel()
    shapes = ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), (n, plan.dim_out))
    x, y, w, go = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes)
    ggx, ggy, ggw = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in shapes[:3])
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    xs, ys, ws, gos = (t.to(dtype).contiguous() for t in (x, y, w, go))
    nan = float("nan")
    out = torch.full(shapes[3], nan, dtype=dtype)
    lib.fwd(xs, ys, ws, graph, out)
    assert rel_err(out, tp_conv_fwd_ref(x, y, w, g.src, g.dst, n, plist, dense, plan.dim_out)) <= TOL[dtype]
    grads = [torch.full(s, nan, dtype=dtype) for s in shapes[:3]]
    lib.bwd(gos, xs, ys, ws, graph, *grads, torch.full((e, plan.dim_in1), nan, dtype=dtype))
    for a, b in zip(grads, tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plist, dense)):
        assert rel_err(a, b) <= TOL[dtype]
    outs = [torch.full(s, nan, dtype=dtype) for s in (shapes[3], shapes[0], shapes[1], shapes[2])]
    args = [t.to(dtype).contiguous() for t in (ggx, ggy, ggw, go, x, y, w)]
    lib.dbwd(*args, graph, *outs, torch.full((e, plan.dim_in1), nan, dtype=dtype))
    for a, b in zip(outs, tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plist, dense)):
        assert rel_err(a, b) <= TOL[dtype]


@pytest.mark.parametrize("tuning", list(TUNINGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_shared_weight_rows_equal_expanded_rows(dtype, tuning):
    """TPGraph::w_row (edges reading shared weight rows, csrc/tp_conv_chunked.h's pair path): the
    kernels reading row w_row[e] of the P rows give bitwise what they give on the rows expanded per
    edge (w_rows[w_row]), forward, backward and double backward, chunk by chunk (w_row offset to the
    chunk, the rows whole) and on the whole graph, with L2 prefetch of the next edge's row."""
    plan, lib = plan_and_library(tuning)
    gen = torch.Generator().manual_seed(5)
    n, g = hub_graph(gen)
    e, p = g.src.numel(), 37
    w_row = torch.randint(0, p, (e,), generator=gen)
    x, y, go = (torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype) for s in
                ((n, plan.dim_in1), (e, plan.dim_in2), (n, plan.dim_out)))
    w_rows = torch.randn(p, plan.weight_numel, generator=gen, dtype=torch.float64).to(dtype)
    w_edges = w_rows.index_select(0, w_row).contiguous()
    nan = float("nan")

    def run(shared: bool, step: int):
        out = torch.full((n, plan.dim_out), nan, dtype=dtype)
        gx, gy = torch.full_like(x, nan), torch.full_like(y, nan)
        gw = torch.full((e, plan.weight_numel), nan, dtype=dtype)
        for e0 in range(0, e, step):
            e1 = min(e, e0 + step)
            graph = chunk_graph(g, e0, e1) + ((w_row[e0:e1],) if shared else ())
            w = w_rows if shared else w_edges[e0:e1]
            lib.fwd(x, y[e0:e1], w, graph, out, accumulate=e0 > 0)
            work = torch.full((e1 - e0, plan.dim_in1), nan, dtype=dtype)
            lib.bwd(go, x, y[e0:e1], w, graph, gx, gy[e0:e1], gw[e0:e1], work, accumulate=e0 > 0)
        return out, gx, gy, gw

    for step in (13, 1000):
        for what, a, b in zip(("out", "grad_x", "grad_y", "grad_w"), run(True, step), run(False, step)):
            assert torch.isfinite(a).all() and torch.equal(a, b), (what, step)
    ggx, ggy, ggw = (torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype) for s in
                     ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel)))
    whole = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    results = []
    for graph, w in ((whole + (w_row,), w_rows), (whole, w_edges)):
        outs = [torch.full(s, nan, dtype=dtype) for s in ((n, plan.dim_out), x.shape, y.shape, ggw.shape)]
        lib.dbwd(ggx, ggy, ggw, go, x, y, w, graph, *outs, torch.full((e, plan.dim_in1), nan, dtype=dtype))
        results.append(outs)
    for what, a, b in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"), *results):
        assert torch.isfinite(a).all() and torch.equal(a, b), what


@pytest.mark.parametrize("tuning", list(TUNINGS) + ["unused_in1", "unused_mid_in1"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_atomic_grad_x_matches_reference(dtype, tuning):
    """TPDims::atomic_gx (md_accel::set_deterministic(False)): the backward and the double backward add
    each edge's grad_x contribution into the sender's row of the zeroed grad_x (passed as work) and skip the
    per-sender sum; against the references, on one block per receiver and on three, every other output
    poisoned first."""
    plan, lib = plan_and_library(tuning)
    n, g, (x, y, w, go, ggx, ggy, ggw), dense = second_order_problem(plan, 11)
    ref_bwd = tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    ref_dbwd = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense, False)
    xs, ys, ws, gos, ggxs, ggys, ggws = (t.to(dtype).contiguous() for t in (x, y, w, go, ggx, ggy, ggw))
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    nan = float("nan")
    for split in (1, 3):
        gx, gy, gw = torch.zeros_like(xs), torch.full_like(ys, nan), torch.full_like(ws, nan)
        lib.bwd(gos, xs, ys, ws, graph, gx, gy, gw, gx, split=split, atomic_gx=True)
        for what, a, b in zip(("grad_x", "grad_y", "grad_w"), (gx, gy, gw), ref_bwd):
            assert rel_err(a, b) <= TOL[dtype], ("bwd", split, what, rel_err(a, b))
        gx, gy, gw = torch.zeros_like(xs), torch.full_like(ys, nan), torch.full_like(ws, nan)
        lib.dbwd(ggxs, ggys, ggws, gos, xs, ys, ws, graph, None, gx, gy, gw, gx, split=split, atomic_gx=True)
        for what, a, b in zip(("grad_x", "grad_y", "grad_w"), (gx, gy, gw), ref_dbwd[1:]):
            assert rel_err(a, b) <= TOL[dtype], ("dbwd", split, what, rel_err(a, b))


@pytest.mark.parametrize("tuning", list(TUNINGS) + ["unused_in1", "unused_mid_in1"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_rows_in_grad_w_give_the_scratch_rows_bits(dtype, tuning):
    """TPDims::rows_in_gw (no scratch: each edge's grad_x row kept in grad_w columns written later, the passes in
    runs, the deferred paths' weight gradients last): the backward and the double backward give the same bits
    as with the scratch rows (the same sums in the same order), and match the references; on one block per
    receiver and on three, shared weight rows too, every output poisoned first and no work buffer."""
    plan, lib = plan_and_library(tuning)
    assert lib.spec.rows_in_gw == 15  # every launch of this plan offers it
    n, g, (x, y, w, go, ggx, ggy, ggw), dense = second_order_problem(plan, 13)
    ref_bwd = tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    ref_dbwd = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense, False)
    xs, ys, ws, gos, ggxs, ggys, ggws = (t.to(dtype).contiguous() for t in (x, y, w, go, ggx, ggy, ggw))
    e = g.src.numel()
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    nan = float("nan")

    def backward(rows_in_gw: bool, split: int, graph=graph, w=ws):
        gx, gy, gw = torch.full_like(xs, nan), torch.full_like(ys, nan), torch.full((e, ws.shape[1]), nan, dtype=dtype)
        work = None if rows_in_gw else torch.full((e, plan.dim_in1), nan, dtype=dtype)
        lib.bwd(gos, xs, ys, w, graph, gx, gy, gw, work, split=split, rows_in_gw=rows_in_gw)
        return gx, gy, gw

    def double_backward(rows_in_gw: bool, split: int):
        gx, gy, gw = torch.full_like(xs, nan), torch.full_like(ys, nan), torch.full_like(ws, nan)
        work = None if rows_in_gw else torch.full((e, plan.dim_in1), nan, dtype=dtype)
        lib.dbwd(ggxs, ggys, ggws, gos, xs, ys, ws, graph, None, gx, gy, gw, work, split=split, rows_in_gw=rows_in_gw)
        return gx, gy, gw

    for split in (1, 3):
        for what, a, b, ref in zip(("grad_x", "grad_y", "grad_w"), backward(True, split), backward(False, split),
                                   ref_bwd):
            assert torch.isfinite(a).all() and torch.equal(a, b), ("bwd", split, what)
            assert rel_err(a, ref) <= TOL[dtype], ("bwd", split, what, rel_err(a, ref))
        for what, a, b, ref in zip(("grad_x", "grad_y", "grad_w"), double_backward(True, split),
                                   double_backward(False, split), ref_dbwd[1:]):
            assert torch.isfinite(a).all() and torch.equal(a, b), ("dbwd", split, what)
            assert rel_err(a, ref) <= TOL[dtype], ("dbwd", split, what, rel_err(a, ref))
    # weight rows shared by edges (TPGraph::w_row): grad_w stays per edge, the rows too
    w_row = torch.randint(0, 17, (e,), generator=torch.Generator().manual_seed(2))
    w_rows = torch.randn(17, ws.shape[1], generator=torch.Generator().manual_seed(4), dtype=torch.float64).to(dtype)
    shared = [backward(r, 1, graph + (w_row,), w_rows) for r in (True, False)]
    for what, a, b in zip(("grad_x", "grad_y", "grad_w"), *shared):
        assert torch.isfinite(a).all() and torch.equal(a, b), ("shared rows", what)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_rotated_part1_gives_the_same_bits(dtype):
    """Tuning.wave: part 1 of the double backward keeps nothing across a receiver's edges, so walking them from a
    rotated start (the host emulation's "4 SMs" give the receivers of this graph different starts) leaves every
    output bit for bit as walking them in order does, every output written."""
    in_order, wave = plan_and_library("in_order"), plan_and_library("wave")
    plan = in_order[0]
    n, g, (x, y, w, go, ggx, ggy, ggw), _ = second_order_problem(plan, 11)
    first = [t.to(dtype).contiguous() for t in (go, x, y, w)]
    second = [t.to(dtype).contiguous() for t in (ggx, ggy, ggw)] + first
    e = g.src.numel()
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    nan = float("nan")
    results = []
    for _, lib in (in_order, wave):
        grads = [torch.full(s, nan, dtype=dtype) for s in ((n, plan.dim_in1), (e, plan.dim_in2),
                                                           (e, plan.weight_numel))]
        lib.bwd(*first, graph, *grads, torch.full((e, plan.dim_in1), nan, dtype=dtype))
        outs = [torch.full(s, nan, dtype=dtype) for s in ((n, plan.dim_out), (n, plan.dim_in1),
                                                          (e, plan.dim_in2), (e, plan.weight_numel))]
        lib.dbwd(*second, graph, *outs, torch.full((e, plan.dim_in1), nan, dtype=dtype))
        results.append(grads + outs)
    names = ("grad_x", "grad_y", "grad_w", "g_grad_out", "dbwd grad_x", "dbwd grad_y", "dbwd grad_w")
    for what, a, b in zip(names, *results):
        assert not a.isnan().any() and torch.equal(a, b), what


@pytest.mark.parametrize("tuning", list(TUNINGS) + ["unused_in1", "unused_mid_in1"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_double_backward_into_gg_w_gives_the_same_bits(dtype, tuning):
    """TPSpec::dbwd_in_gg_w: the double backward given one buffer as gg_w and grad_w (t.ggw == t.gw, as
    tp_conv_cuda.cpp passes a donated gg_w) leaves in it the grad_w, grad_x and grad_y of separate buffers, bit for
    bit: each gg_w element is read before its grad_w element is written, by the thread that writes it. With the
    scratch rows and the atomic grad_x, on one block per receiver and on three, g_grad_out (which reads gg_w
    first) too."""
    plan, lib = plan_and_library(tuning)
    assert lib.spec.dbwd_in_gg_w == 3
    n, g, (x, y, w, go, ggx, ggy, ggw), dense = second_order_problem(plan, 19)
    ref = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    xs, ys, ws, gos, ggxs, ggys, ggws = (t.to(dtype).contiguous() for t in (x, y, w, go, ggx, ggy, ggw))
    e = g.src.numel()
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    nan = float("nan")

    def double_backward(in_gg_w: bool, split: int, atomic: bool):
        gout, gx, gy = torch.full_like(gos, nan), torch.full_like(xs, nan), torch.full_like(ys, nan)
        gg_w = ggws.clone()
        gw = gg_w if in_gg_w else torch.full_like(ws, nan)
        if atomic:
            gx.zero_()
        work = gx if atomic else torch.full((e, plan.dim_in1), nan, dtype=dtype)
        lib.dbwd(ggxs, ggys, gg_w, gos, xs, ys, ws, graph, gout, gx, gy, gw, work, split=split, atomic_gx=atomic)
        return gout, gx, gy, gw

    for split in (1, 3):
        for atomic in (False, True):
            for what, a, b, want in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"),
                                        double_backward(True, split, atomic), double_backward(False, split, atomic),
                                        ref):
                assert torch.isfinite(a).all() and torch.equal(a, b), (split, atomic, what)
                assert rel_err(a, want) <= TOL[dtype], (split, atomic, what, rel_err(a, want))


def test_grad_w_into_gg_w_only_where_one_pass_writes_each_weight_block():
    """_gw_in_one_pass: a weight block whose gradient a later pass adds to (paths sharing weights) would be read as
    gg_w after an earlier pass wrote its grad_w there: no grad_w into gg_w then."""
    from types import SimpleNamespace

    a, b, c = (SimpleNamespace(w_key=(off, 8, 1)) for off in (0, 8, 16))
    assert _codegen._gw_in_one_pass([[a, b], [c]])
    assert not _codegen._gw_in_one_pass([[a, b], [c, SimpleNamespace(w_key=a.w_key)]])
    assert _codegen._gw_in_one_pass([[a, SimpleNamespace(w_key=a.w_key)], [c]])


@pytest.mark.parametrize("num_edges", [0, 1])
def test_rows_in_grad_w_on_edgeless_and_single_edge_graphs(num_edges):
    """Rows in grad_w where there are nodes but no edge (every launch still well-formed: grad_x zero) or one edge:
    the references' results, every output poisoned first."""
    plan, lib = plan_and_library()
    gen = torch.Generator().manual_seed(21)
    n = 4
    g = build_graph(torch.tensor([2] * num_edges), torch.tensor([1] * num_edges), n)
    x, go, ggx = (torch.randn(n, d, generator=gen, dtype=torch.float64) for d in (plan.dim_in1, plan.dim_out,
                                                                                 plan.dim_in1))
    y, ggy = (torch.randn(num_edges, plan.dim_in2, generator=gen, dtype=torch.float64) for _ in range(2))
    w, ggw = (torch.randn(num_edges, plan.weight_numel, generator=gen, dtype=torch.float64) for _ in range(2))
    dense = [c.double() for c in plan.dense]
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    nan = float("nan")
    got = [torch.full_like(t, nan) for t in (x, y, w)]
    lib.bwd(go, x, y, w, graph, *got, None, rows_in_gw=True)
    for a, b in zip(got, tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)):
        assert rel_err(a, b) <= TOL[torch.float64] if b.numel() else a.numel() == 0
    got = [torch.full_like(t, nan) for t in (x, y, w)]
    lib.dbwd(ggx, ggy, ggw, go, x, y, w, graph, None, *got, None, rows_in_gw=True)
    want = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense, False)[1:]
    for a, b in zip(got, want):
        assert rel_err(a, b) <= TOL[torch.float64] if b.numel() else a.numel() == 0


@pytest.mark.parametrize("step", [13, 40])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_rows_in_grad_w_in_edge_chunks(step, dtype):
    """Edge chunks (tp_conv_chunk_launch: TPDims::accumulate after the first chunk, each chunk's grad_w slice) with
    the rows in grad_w: the scratch rows' bits chunk for chunk, the reference's values; nodes without edges in a
    chunk keep their grad_x rows, every output poisoned first and no work buffer."""
    plan, lib = plan_and_library("unused_in1")  # an in1 block no path reads: its columns zeroed by the first chunk
    n, g, (x, y, w, go, *_), dense = second_order_problem(plan, 17)
    ref = tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    xs, ys, ws, gos = (t.to(dtype).contiguous() for t in (x, y, w, go))
    e = g.src.numel()
    nan = float("nan")

    def chunked(rows_in_gw: bool):
        gx, gy, gw = torch.full_like(xs, nan), torch.full_like(ys, nan), torch.full_like(ws, nan)
        for e0 in range(0, e, step):
            e1 = min(e, e0 + step)
            work = None if rows_in_gw else torch.full((e1 - e0, plan.dim_in1), nan, dtype=dtype)
            lib.bwd(gos, xs, ys[e0:e1], ws[e0:e1], chunk_graph(g, e0, e1), gx, gy[e0:e1], gw[e0:e1], work,
                    accumulate=e0 > 0, split=2, rows_in_gw=rows_in_gw)
        return gx, gy, gw

    for what, a, b, r in zip(("grad_x", "grad_y", "grad_w"), chunked(True), chunked(False), ref):
        assert torch.isfinite(a).all() and torch.equal(a, b), what
        assert rel_err(a, r) <= TOL[dtype], (what, rel_err(a, r))


def test_rows_in_grad_w_refused_with_atomic():
    """The launch that rows in grad_w cannot serve says so instead of writing anything wrong."""
    plan, lib = plan_and_library()
    n, g, (x, y, w, go, *_), _ = second_order_problem(plan, 3)
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    gx, gy, gw = torch.zeros_like(x), torch.zeros_like(y), torch.zeros_like(w)
    with pytest.raises(AssertionError, match="not with atomic_gx"):
        lib.bwd(go, x, y, w, graph, gx, gy, gw, None, rows_in_gw=True, atomic_gx=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_receiver_split_is_bitwise_neutral(dtype):
    """TPDims::split (each receiver's edges cut into that many contiguous parts, one block each, in
    the per-edge kernel of the backward and double backward): the same bits as one block per
    receiver, whole graph and edge chunks (parts of a chunk's receiver and empty parts included),
    shared weight rows too; every output poisoned first."""
    plan, lib = plan_and_library()
    gen = torch.Generator().manual_seed(3)
    n, g = hub_graph(gen)
    e, p = g.src.numel(), 41
    w_row = torch.randint(0, p, (e,), generator=gen)
    x, y, go, ggx, ggy = (torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype) for s in
                          ((n, plan.dim_in1), (e, plan.dim_in2), (n, plan.dim_out), (n, plan.dim_in1),
                           (e, plan.dim_in2)))
    w_rows = torch.randn(p, plan.weight_numel, generator=gen, dtype=torch.float64).to(dtype)
    ggw = torch.randn(e, plan.weight_numel, generator=gen, dtype=torch.float64).to(dtype)
    nan = float("nan")

    def backward(split: int, step: int):
        gx, gy = torch.full_like(x, nan), torch.full_like(y, nan)
        gw = torch.full((e, plan.weight_numel), nan, dtype=dtype)
        for e0 in range(0, e, step):
            e1 = min(e, e0 + step)
            work = torch.full((e1 - e0, plan.dim_in1), nan, dtype=dtype)
            lib.bwd(go, x, y[e0:e1], w_rows, chunk_graph(g, e0, e1) + (w_row[e0:e1],), gx, gy[e0:e1], gw[e0:e1],
                    work, accumulate=e0 > 0, split=split)
        return gx, gy, gw

    def double_backward(split: int):
        outs = [torch.full(s, nan, dtype=dtype) for s in ((n, plan.dim_out), x.shape, y.shape, ggw.shape)]
        graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr, w_row)
        lib.dbwd(ggx, ggy, ggw, go, x, y, w_rows, graph, *outs, torch.full((e, plan.dim_in1), nan, dtype=dtype),
                 split=split)
        return outs

    for step in (13, 1000):
        one = backward(1, step)
        for split in (3, 64):  # 64 parts: more than node 3's 60+ edges, so some parts are empty
            for what, a, b in zip(("grad_x", "grad_y", "grad_w"), backward(split, step), one):
                assert torch.isfinite(a).all() and torch.equal(a, b), (what, split, step)
    one = double_backward(1)
    for split in (3, 64):
        for what, a, b in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"), double_backward(split), one):
            assert torch.isfinite(a).all() and torch.equal(a, b), (what, split)
    with pytest.raises(AssertionError, match="split must be positive"):
        backward(-1, 1000)


def wide_plan_and_library(tune: _codegen.Tuning):
    """A plan with blocks of 64, 32 and 8 channels (kernels of 64 threads: the 32-channel passes run two edge
    slots, four with two channels per thread; the 8-channel block keeps one channel per thread)."""
    return _library("wide", lambda: TPProblem.all_uvu("64x0e+32x1o+8x2e", "1x0e+1x1o+1x2e", 2), tune)


def forward_problem(plan, seed: int):
    """(n, hub graph, float64 (x, y, w), the reference forward) for a forward test."""
    gen = torch.Generator().manual_seed(seed)
    n, g = hub_graph(gen)
    e = g.src.numel()
    x, y, w = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
               ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel)))
    ref = tp_conv_fwd_ref(x, y, w, g.src, g.dst, n, plan.paths.tolist(), [c.double() for c in plan.dense],
                          plan.dim_out)
    return n, g, (x, y, w), ref


def chunked_forward(lib, plan, n: int, g, inputs, step: int):
    """The forward of ``lib`` over the graph's edges in chunks of ``step`` (accumulate after the first), into an
    output poisoned with NaN first."""
    x, y, w = inputs
    e = g.src.numel()
    out = torch.full((n, plan.dim_out), float("nan"), dtype=x.dtype)
    for e0 in range(0, e, step):
        e1 = min(e, e0 + step)
        lib.fwd(x, y[e0:e1], w[e0:e1], chunk_graph(g, e0, e1), out, accumulate=e0 > 0)
    return out


# (split: one pass plan for both dtypes, which the source then holds once)
CPL_TUNINGS = {"cpl2": _codegen.Tuning(fwd_cpl=2),
               "cpl2_split_prefetch_all": _codegen.Tuning(fwd_cpl=2, fwd_acc=6, prefetch=_codegen.PF_ALL, fwd_acc32=0,
                                                          fwd_acc_narrow=0, fwd_slots32=0)}


@pytest.mark.parametrize("tuning", list(CPL_TUNINGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_forward_with_two_channels_per_thread(dtype, tuning):
    """``Tuning.fwd_cpl=2``: each thread of a 32- or 64-channel pass holds channels u and u + L; the forward in
    edge chunks (accumulate), output poisoned first, against the reference, and against the default kernels'
    forward to rounding (the edge slots' order of summation differs)."""
    tune = CPL_TUNINGS[tuning]
    plan, lib = wide_plan_and_library(tune)
    src = _codegen.generate(_codegen.plan_structure(plan), tune)
    passes = _codegen._fwd_passes(_codegen._analyse(_codegen.plan_structure(plan))[1], tune.fwd_acc, 2)
    assert src.count("2 channels per thread") == sum(g[0].mul % 32 == 0 for g in passes) > 0  # not the 8 channels
    assert len(passes) > sum(g[0].mul % 32 == 0 for g in passes)
    n, g, inputs, ref = forward_problem(plan, 3)
    inputs = [t.to(dtype).contiguous() for t in inputs]
    e = g.src.numel()
    for step in (17, e):
        out = chunked_forward(lib, plan, n, g, inputs, step)
        assert rel_err(out, ref) <= TOL[dtype], (step, rel_err(out, ref))
    out_default = chunked_forward(wide_plan_and_library(_codegen.Tuning())[1], plan, n, g, inputs, e)
    assert rel_err(out, out_default.double()) <= TOL[dtype]


@pytest.mark.parametrize("problem", ["test plan", "wide plan"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_forward_block_of_four_warps(dtype, problem):
    """The forward's block has FWD_MIN_BLOCK threads where the other kernels' is narrower: the test plan (8 channels,
    blocks of one warp) runs its passes on four edge slots, the wide plan (64 channels, two warps) on two or more
    each. The output, poisoned first and in edge chunks too, matches the reference, and the forward of one-warp blocks
    (fwd_min_block=32) to rounding (the slots add in another order)."""
    plan, lib = plan_and_library() if problem == "test plan" else wide_plan_and_library(_codegen.Tuning())
    struct = _codegen.plan_structure(plan)
    _, live, threads, _ = _codegen._analyse(struct)
    assert threads < _codegen.FWD_MIN_BLOCK
    assert _codegen.fwd_block(live, threads, _codegen.Tuning()) == (_codegen.FWD_MIN_BLOCK, _codegen.FWD_SLOT_SMEM)
    assert _codegen.fwd_block(live, threads, _codegen.Tuning(fwd_min_block=32)) == (threads, _codegen.FWD_SLOT_SMEM)
    src = _codegen.generate(struct)
    fwd = src[src.index("// Forward:"):]
    fwd = fwd[:fwd.index("\n}\n")]
    assert f"constexpr int kFwdThreads = {_codegen.FWD_MIN_BLOCK};" in fwd and "__launch_bounds__(kFwdThreads" in fwd
    slots = [int(m) for m in re.findall(r"channels x (\d+) edge slot", fwd)]
    assert slots and min(slots) >= _codegen.FWD_MIN_BLOCK // threads and max(slots) > 1
    narrow = emulate.SpecLibrary(_codegen.generate(struct, _codegen.Tuning(fwd_min_block=32)))
    n, g, inputs, ref = forward_problem(plan, 13)
    inputs = [t.to(dtype).contiguous() for t in inputs]
    for step in (17, g.src.numel()):
        outs = [chunked_forward(library, plan, n, g, inputs, step) for library in (lib, narrow)]
        assert rel_err(outs[0], ref) <= TOL[dtype], (step, rel_err(outs[0], ref))
        assert rel_err(outs[0], outs[1].double()) <= TOL[dtype], step


# (in1, in2, fwd_acc): passes of one edge slot in blocks of one warp (fwd_min_block=32), and of four warps (128
# channels: four arrivals per stage on its empty barrier); y rows of 9 and 16 columns; one forward pass, and several
# (the barriers set up again per pass)
TMA_PROBLEMS = {"8 channels": ("8x0e+8x1o", "1x0e+1x1o+1x2e", 48),
                "32 channels": ("32x0e+32x1o+8x2e", "1x0e+1x1o+1x2e+1x3o", 48),
                "32 channels, split": ("32x0e+32x1o+8x2e", "1x0e+1x1o+1x2e+1x3o", 4),
                "128 channels": ("128x0e", "1x0e+1x1o+1x2e+1x3o", 48)}


@pytest.mark.parametrize("problem", list(TMA_PROBLEMS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_forward_rows_by_bulk_copies(dtype, problem):
    """``Tuning.fwd_tma``: the forward's edge rows copied into shared memory by the block's thread 0 (the host
    emulation's bulk copies and mbarriers), read from there. The output, poisoned first, in edge chunks and with edges
    sharing weight rows (w_row), equals the forward without it bit for bit (the same operations in the same order)
    and the reference; the copies moved each pass's weight and x runs once per edge, and the y columns too where y
    rows are 16-byte multiples (16 columns; 9 are loaded). With x (or w) not 16-byte aligned the launcher takes the
    forward without copies; with y not aligned the kernel loads y itself: the same bits either way."""
    in1, in2, acc = TMA_PROBLEMS[problem]
    # one pass plan (fwd_acc32: the next test), fwd_acc for every multiplicity
    tune = _codegen.Tuning(fwd_min_block=32, fwd_acc=acc, fwd_acc32=0, fwd_acc_narrow=0)
    make = lambda: TPProblem.all_uvu(in1, in2, 2)  # noqa: E731
    plan, lib = _library(f"tma {in1} {in2}", make, tune)
    base = _library(f"tma {in1} {in2}", make, tune._replace(fwd_tma=0))[1]
    struct = _codegen.plan_structure(plan)
    src = _codegen.generate(struct, tune)
    assert "fwd_kernel_tma<T><<<" in src
    assert "fwd_kernel_tma" not in _codegen.generate(struct, tune._replace(fwd_tma=0))
    _, live, threads, _ = _codegen._analyse(struct)
    groups = _codegen._fwd_passes(live, tune.fwd_acc, tune.fwd_cpl)
    assert (len(groups) > len(_codegen._fwd_passes(live, 48, 1))) == (acc < 48)
    rows = [_codegen._tma_rows(g) for g in groups]
    # Tuning.w_evict: each weight run is copied under the evict-first policy, the x runs and y under the default one
    hinted, plain = "bulk_copy_hint(b + ", "bulk_copy(b + "
    assert src.count(hinted) == sum(len(r.w_runs) for r in rows)
    assert src.count(plain) == sum(len(r.x_runs) + 1 for r in rows)
    no_evict = _codegen.generate(struct, tune._replace(w_evict=0))
    assert hinted not in no_evict and no_evict.count(plain) == src.count(hinted) + src.count(plain)
    ystage = plan.dim_in2 % _codegen.FWD_TMA_VEC == 0
    assert ystage == (in2 != "1x0e+1x1o+1x2e")
    rows_bytes = sum(r.w_len + r.x_len for r in rows) * dtype.itemsize
    per_edge = rows_bytes + sum(r.y_hi - r.y_lo for r in rows) * dtype.itemsize * ystage
    n, g, inputs, ref = forward_problem(plan, 5)
    inputs = [t.to(dtype).contiguous() for t in inputs]
    e = g.src.numel()
    for step in (17, e):
        before = lib._lib.emu_bulk_copy_bytes()
        out = chunked_forward(lib, plan, n, g, inputs, step)
        assert lib._lib.emu_bulk_copy_bytes() - before == e * per_edge, step
        assert torch.equal(out, chunked_forward(base, plan, n, g, inputs, step)), step
        assert rel_err(out, ref) <= TOL[dtype], (step, rel_err(out, ref))
    # edges in pairs sharing a weight row: each edge reads row w_row[e]
    x, y, w = inputs
    w_row = torch.arange(e, dtype=torch.int64) // 2 * 2
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr, w_row)
    outs = []
    for library in (lib, base):
        outs.append(torch.full((n, plan.dim_out), float("nan"), dtype=dtype))
        library.fwd(x, y, w, graph, outs[-1])
    assert torch.equal(outs[0], outs[1])
    expanded = torch.full((n, plan.dim_out), float("nan"), dtype=dtype)
    base.fwd(x, y, w[w_row].contiguous(), graph[:5], expanded)
    assert torch.equal(outs[0], expanded)

    def shifted(t):  # the same values one element past a 16-byte boundary
        return torch.cat([t.new_zeros(1), t.flatten()])[1:].view(t.shape)

    # x shifted: no copies at all (the launcher's forward without them); y shifted: y loaded, the rest copied
    for xs, ys, copied in ((shifted(x), y, 0), (x, shifted(y), e * rows_bytes)):
        assert xs.data_ptr() % 16 != 0 or ys.data_ptr() % 16 != 0
        before = lib._lib.emu_bulk_copy_bytes()
        got = torch.full((n, plan.dim_out), float("nan"), dtype=dtype)
        lib.fwd(xs, ys, w, graph[:5], got)
        assert lib._lib.emu_bulk_copy_bytes() - before == copied
        assert torch.equal(got, out)  # the last chunked forward's output: all edges in one call


def test_forward_rows_by_bulk_copies_only_in_one_slot_passes():
    """The bulk-copy forward is generated where every forward pass has one edge slot per block (128 channels; 32 in
    one-warp blocks), not where a pass sums a receiver's edges on several (the test plan's 8 channels in the default
    block of four warps, 64- and 32-channel passes beside a 128-channel one), nor without Tuning.fwd_tma."""
    def has(in1, tune=_codegen.Tuning()):
        src = _codegen.generate(_codegen.plan_structure(TPProblem.all_uvu(in1, "1x0e+1x1o+1x2e+1x3o", 2).lower()), tune)
        return "fwd_kernel_tma" in src

    assert has("128x0e+128x1o") and has("128x0e") and has("32x0e+32x1o", _codegen.Tuning(fwd_min_block=32))
    assert not has("8x0e+8x1o") and not has("128x0e+64x1o+32x2e") and not has("32x0e+32x1o")
    assert not has("128x0e+128x1o", _codegen.Tuning(fwd_tma=0))


# a plan whose forward passes come by bulk copies (128 channels, one edge slot), and one whose do not (its 32-channel
# block on four edge slots, which keeps fwd_acc in float32 too; prefetch tables per pass and dtype)
ACC32_PROBLEMS = {"128 channels": ("128x0e", "1x0e+1x1o+1x2e+1x3o"),
                  "128 and 32 channels": ("128x0e+32x1o", "1x0e+1x1o+1x2e")}


@pytest.mark.parametrize("slots32", [0, 1], ids=["one-slot passes", "fwd_slots32"])
@pytest.mark.parametrize("problem", list(ACC32_PROBLEMS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_forward_pass_plan_per_dtype(dtype, problem, slots32):
    """``Tuning.fwd_acc32``: the float32 forward runs its one-slot passes (128 channels) under their own budget (here
    one pass), and under ``fwd_slots32`` its several-slot passes too (32 channels); the rest and the float64 forward
    under fwd_acc (several passes each): each dtype's output, poisoned first and in edge chunks, equals the reference,
    and bit for bit the output of the library without fwd_acc32 (each output component sums the same products in the
    same order, whichever pass holds it) but where fwd_slots32 gives float32's passes other edge slots (to rounding
    then); in the bulk-copy forward each dtype copies its own passes' rows (x once per pass)."""
    in1, in2 = ACC32_PROBLEMS[problem]
    make = lambda: TPProblem.all_uvu(in1, in2, 2)  # noqa: E731
    both = _codegen.Tuning(fwd_acc=4, fwd_acc32=48, prefetch=_codegen.PF_ALL, fwd_slots32=slots32)
    plan, lib = _library(f"acc32 {problem}", make, both)
    struct = _codegen.plan_structure(plan)
    _, live, threads, _ = _codegen._analyse(struct)
    plans = _codegen.fwd_plans(live, threads, both)
    assert len(plans) == 2
    f32, f64 = ([(g[0].mul, _codegen._out_width(g)) for g in groups] for groups in plans)
    assert sum(m == 128 for m, _ in f32) == 1 and len(f64) > len(f32)
    narrow32 = [mw for mw in f32 if mw[0] < 128]
    if slots32:  # every multiplicity in one pass
        assert len(f32) == len({m for m, _ in f32}) and (problem == "128 channels") == (not narrow32)
    else:  # several slots: fwd_acc
        assert narrow32 == [mw for mw in f64 if mw[0] < 128]
    assert _codegen.fwd_plans(live, threads, both._replace(fwd_acc32=0)) == [plans[1]]
    src = _codegen.generate(struct, both)
    tma = "fwd_kernel_tma<T><<<" in src
    assert tma == (problem == "128 channels")
    assert src.count(f"{len(f32)} pass(es) in float32, {len(f64)} in float64") == 1 + tma
    base = _library(f"acc32 {problem}", make, both._replace(fwd_acc32=0))[1]
    n, g, inputs, ref = forward_problem(plan, 9)
    inputs = [t.to(dtype).contiguous() for t in inputs]
    e = g.src.numel()
    if tma:
        per_edge = sum(_codegen._tma_rows(gr).stage for gr in plans[dtype == torch.float64]) * dtype.itemsize
    for step in (17, e):
        before = lib._lib.emu_bulk_copy_bytes()
        out = chunked_forward(lib, plan, n, g, inputs, step)
        if tma:
            assert lib._lib.emu_bulk_copy_bytes() - before == e * per_edge, step
        out_base = chunked_forward(base, plan, n, g, inputs, step)
        if dtype == torch.float32 and slots32 and narrow32:
            assert rel_err(out, out_base.double()) <= TOL[dtype], step
        else:
            assert torch.equal(out, out_base), step
        assert rel_err(out, ref) <= TOL[dtype], (step, rel_err(out, ref))


# (in1, in2, lmax, fwd_acc = fwd_acc32, fwd_slot_smem, the forward's block in float64's count / under fwd_slots32): a
# 32-channel pass that 24 KiB hold to three slots of the 128-thread block in float64 (39 components per channel; four
# in FWD_SLOT_SMEM), and a 32-channel plan of one-warp blocks whose one pass of 90 components gets three slots of
# FWD_SLOT_SMEM in float64, four in float32 (the forward's block then 128 threads, not 96)
SLOTS32_PROBLEMS = {"128 and 32 channels": ("128x0e+32x1o", "1x0e+1x1o+1x2e+1x3o", 3, 48, 24 * 1024, (128, 128)),
                    "32 channels, one pass": ("32x1o+32x2e", "1x0e+1x1o+1x2e+1x3o", 3, 96, _codegen.FWD_SLOT_SMEM,
                                              (96, 128))}


@pytest.mark.parametrize("problem", list(SLOTS32_PROBLEMS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_forward_edge_slots_of_float32_sums(dtype, problem):
    """``Tuning.fwd_slots32``: the float32 forward counts its edge slots' partial sums at 4 bytes, so a 32-channel
    pass that the shared memory holds to three slots in float64 runs on four in float32, the forward's block sized for
    the wider of the two. Outputs, poisoned first and in edge chunks, against the reference; float64 bit-identical to
    the library without it, float32 equal to it to rounding (the slots' sums add in another order)."""
    in1, in2, lmax, acc, smem, blocks = SLOTS32_PROBLEMS[problem]
    make = lambda: TPProblem.all_uvu(in1, in2, lmax)  # noqa: E731
    tune = _codegen.Tuning(fwd_acc=acc, fwd_acc32=acc, fwd_acc_narrow=0, fwd_slots32=1, fwd_slot_smem=smem)
    plan, lib = _library(f"slots32 {problem}", make, tune)
    base = _library(f"slots32 {problem}", make, tune._replace(fwd_slots32=0))[1]
    struct = _codegen.plan_structure(plan)
    _, live, threads, _ = _codegen._analyse(struct)
    assert tuple(_codegen.fwd_block(live, threads, t)[0] for t in (tune._replace(fwd_slots32=0), tune)) == blocks
    src = _codegen.generate(struct, tune)
    fwd = src[src.index("// Forward:"):]
    fwd = fwd[:fwd.index("\n}\n")]
    passes = len(_codegen.fwd_plans(live, threads, tune)[0])
    assert f"{passes} pass(es) in float32, {passes} in float64" in fwd
    assert re.findall(r"32 channels x (\d+) edge slot", fwd) == ["4", "3"]  # float32's pass, then float64's
    assert "s_acc[sizeof(T) == 4 ? " in fwd
    if smem < _codegen.FWD_SLOT_SMEM:  # float64's pass on four slots too in the default's shared memory
        src = _codegen.generate(struct, tune._replace(fwd_slot_smem=_codegen.FWD_SLOT_SMEM))
        assert re.findall(r"32 channels x (\d+) edge slot", src[src.index("// Forward:"):]).count("3") == 0
    n, g, inputs, ref = forward_problem(plan, 21)
    inputs = [t.to(dtype).contiguous() for t in inputs]
    for step in (17, g.src.numel()):
        out, out_base = (chunked_forward(library, plan, n, g, inputs, step) for library in (lib, base))
        assert rel_err(out, ref) <= TOL[dtype], (step, rel_err(out, ref))
        if dtype == torch.float64:
            assert torch.equal(out, out_base), step
        else:
            assert rel_err(out, out_base.double()) <= TOL[dtype], step


# in1 (y: 1x0e+1x1o+1x2e, l_out <= 2) -> whether every multiplicity is at most FWD_NARROW_MUL
NARROW_PROBLEMS = {"32x0e+32x1o+32x2e": True, "128x0e+32x1o+32x2e": False}


@pytest.mark.parametrize("in1", list(NARROW_PROBLEMS))
def test_float64_forward_budget_of_narrow_plans(in1):
    """``Tuning.fwd_acc_narrow`` (GEN 42): float64's forward passes hold up to FWD_ACC_NARROW output components per
    channel where no multiplicity exceeds FWD_NARROW_MUL (here one pass of 51 components instead of two under
    fwd_acc), fwd_acc where a wider block shares the kernel. The float64 output, poisoned first and in edge chunks,
    equals the reference, and bit for bit the library's without the rule (each component sums the same products in
    the same order, whichever pass holds it)."""
    make = lambda: TPProblem.all_uvu(in1, "1x0e+1x1o+1x2e", 2)  # noqa: E731
    tune = _codegen.Tuning()
    plan, lib = _library(f"narrow {in1}", make, tune)
    _, live, threads, _ = _codegen._analyse(_codegen.plan_structure(plan))
    f64 = _codegen.fwd_plans(live, threads, tune)[-1]
    without = _codegen.fwd_plans(live, threads, tune._replace(fwd_acc_narrow=0))[-1]
    narrow_widths = [_codegen._out_width(g) for g in f64 if g[0].mul <= _codegen.FWD_NARROW_MUL]
    if NARROW_PROBLEMS[in1]:
        assert narrow_widths == [51] and len(without) == 2
        assert max(_codegen._out_width(g) for g in without) <= _codegen.FWD_ACC_BUDGET
    else:
        assert f64 == without and max(narrow_widths) <= _codegen.FWD_ACC_BUDGET
        return
    base = _library(f"narrow {in1}", make, tune._replace(fwd_acc_narrow=0))[1]
    n, g, inputs, ref = forward_problem(plan, 23)
    inputs = [t.contiguous() for t in inputs]  # float64
    for step in (17, g.src.numel()):
        out, out_base = (chunked_forward(library, plan, n, g, inputs, step) for library in (lib, base))
        assert rel_err(out, ref) <= TOL[torch.float64], (step, rel_err(out, ref))
        assert torch.equal(out, out_base), step


# y irreps -> the warp_sum_smem widths V (used y columns of a pass, to a power of two) of the wide plan's passes
GY_SMEM_Y = {"1x0e": {1}, "1x0e+1x0o": {2}, "1x0e+1x2e": {8}, "1x0e+1x1o+1x2e+1x3o+1x4e": {4, 16, 32}}


@pytest.mark.parametrize("in2", list(GY_SMEM_Y))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_grad_y_through_shared_memory(dtype, in2, monkeypatch):
    """``Tuning.gy_smem``: part 1's grad_y summed over each warp's lanes through shared memory, for every width V,
    in the passes of one warp per edge slot and in those of two warps (64 channels: s_red adds the warps); the
    backward and the double backward against the references, outputs poisoned, the double backward bit-identical
    run after run. Where the buffers would exceed GY_SMEM_BYTES, the butterfly."""
    tune = _codegen.Tuning(gy_smem=1)
    plan, lib = _library(f"wide {in2}", lambda: TPProblem.all_uvu("64x0e+32x1o+8x2e", in2, 2), tune)
    struct = _codegen.plan_structure(plan)
    src = _codegen.generate(struct, tune)
    assert "__shared__ T s_gy" in src and "= warp_butterfly<T" not in src and "s_red[c][warp]" in src
    assert src.count("= warp_sum_smem<T") == _codegen.generate(struct).count("= warp_butterfly<T") > 0
    assert {int(v) for v in re.findall(r"= warp_sum_smem<T, (\d+)>", src)} == GY_SMEM_Y[in2]
    n, g, (x, y, w, go, ggx, ggy, ggw), dense = second_order_problem(plan, 11)
    e = g.src.numel()
    graph = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)
    nan = float("nan")
    xs, ys, ws, gos = (t.to(dtype).contiguous() for t in (x, y, w, go))
    gx, gy, gw = torch.full_like(xs, nan), torch.full_like(ys, nan), torch.full_like(ws, nan)
    lib.bwd(gos, xs, ys, ws, chunk_graph(g, 0, e), gx, gy, gw, torch.full((e, plan.dim_in1), nan, dtype=dtype),
            accumulate=False)
    for what, a, b in zip(("grad_x", "grad_y", "grad_w"), (gx, gy, gw),
                          tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))
    ref = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)

    def double_backward():
        outs = [torch.full_like(t, nan) for t in (gos, xs, ys, ws)]
        lib.dbwd(*(t.to(dtype).contiguous() for t in (ggx, ggy, ggw, go, x, y, w)), graph, *outs,
                 torch.full((e, plan.dim_in1), nan, dtype=dtype))
        return outs

    outs = double_backward()
    for what, a, b, again in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"), outs, ref, double_backward()):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))
        assert torch.equal(a, again), what
    monkeypatch.setattr(_codegen, "GY_SMEM_BYTES", 1024)
    src = _codegen.generate(struct, tune)
    assert "s_gy" not in src and "warp_sum_smem" not in src and "= warp_butterfly<T" in src  # nor its template


@pytest.mark.parametrize("problem", ["test plan", "wide"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_grad_out_through_shared_memory(dtype, problem, monkeypatch):
    """``Tuning.g_smem`` (every part-1 kernel): grad_out's components in shared memory, each path reading its own in
    the edge loop (every channel's, shared by a block's edge slots: the wide plan's 32- and 8-channel passes run
    several). The
    same operations on the same values as with them in registers: the backward (edge chunks, receivers in parts)
    and the double backward bit for bit the default library's, every output poisoned first, and within the
    float64 bound of the references. Where s_g would exceed GY_SMEM_BYTES beside the other arrays, registers."""
    tune = _codegen.Tuning(g_smem=_codegen.G_SMEM_ALL)
    plan, base = plan_and_library() if problem == "test plan" else wide_plan_and_library(_codegen.Tuning())
    struct = _codegen.plan_structure(plan)
    src = _codegen.generate(struct, tune)
    assert "__shared__ T s_g[" in src and "lds_each(&s_g[" in src
    assert src.count("per_iteration(g") < _codegen.generate(struct).count("per_iteration(g")  # (the deferred kernel's)
    lib = emulate.SpecLibrary(src)
    gen = torch.Generator().manual_seed(5)
    n, g = hub_graph(gen)
    e = g.src.numel()
    x, y, w, go, ggx, ggy, ggw = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in
                                  ((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), (n, plan.dim_out),
                                   (n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel)))
    xs, ys, ws, gos, ggxs, ggys, ggws = (t.to(dtype) for t in (x, y, w, go, ggx, ggy, ggw))
    nan = float("nan")

    def backward(library, split: int, step: int):
        gx, gy, gw = torch.full_like(xs, nan), torch.full_like(ys, nan), torch.full_like(ws, nan)
        for e0 in range(0, e, step):
            e1 = min(e, e0 + step)
            library.bwd(gos, xs, ys[e0:e1], ws[e0:e1], chunk_graph(g, e0, e1), gx, gy[e0:e1], gw[e0:e1],
                        torch.full((e1 - e0, plan.dim_in1), nan, dtype=dtype), accumulate=e0 > 0, split=split)
        return gx, gy, gw

    def double_backward(library, split: int):
        outs = [torch.full(s, nan, dtype=dtype) for s in ((n, plan.dim_out), x.shape, y.shape, w.shape)]
        library.dbwd(ggxs, ggys, ggws, gos, xs, ys, ws, (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr), *outs,
                     torch.full((e, plan.dim_in1), nan, dtype=dtype), split=split)
        return outs

    for split, step in ((1, e), (3, 13)):
        for what, a, b in zip(("grad_x", "grad_y", "grad_w"), backward(lib, split, step), backward(base, split, step)):
            assert torch.isfinite(a).all() and torch.equal(a, b), (what, split, step)
        for what, a, b in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"), double_backward(lib, split),
                              double_backward(base, split)):
            assert torch.isfinite(a).all() and torch.equal(a, b), (what, split)
    dense = [c.double() for c in plan.dense]
    for what, a, b in zip(("grad_x", "grad_y", "grad_w"), backward(lib, 1, e),
                          tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))
    ref = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, plan.paths.tolist(), dense)
    for what, a, b in zip(("g_grad_out", "grad_x", "grad_y", "grad_w"), double_backward(lib, 1), ref):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))
    monkeypatch.setattr(_codegen, "GY_SMEM_BYTES", 1024)
    assert "s_g[" not in _codegen.generate(struct, tune) and "lds_each" not in _codegen.generate(struct, tune)


def test_forward_float64_minimum_is_its_own():
    """Tuning.fwd_min_warps64: the float64 minimum of resident warps asked of the compiler (__launch_bounds__) in the
    forward kernel, and in no other kernel (g_grad_out's forward-shaped kernel keeps min_warps64)."""
    plan, _ = plan_and_library()
    default = _codegen.generate(_codegen.plan_structure(plan), _codegen.Tuning())
    src = _codegen.generate(_codegen.plan_structure(plan), _codegen.Tuning(fwd_min_warps64=8))
    pattern = r"__launch_bounds__\(k(?:Fwd)?Threads, sizeof\(T\) == 4 \? \d+ : (\d+)\) (\w+)\("
    before = {name: int(b) for b, name in re.findall(pattern, default)}
    after = {name: int(b) for b, name in re.findall(pattern, src)}
    assert set(after) == set(before) and "fwd_kernel" in after and "dfwd_kernel" in after
    assert {k for k in after if after[k] != before[k]} == {"fwd_kernel"}
    _, live, threads, _ = _codegen._analyse(_codegen.plan_structure(plan))
    assert after["fwd_kernel"] == 8 * 32 // _codegen.fwd_block(live, threads, _codegen.Tuning())[0]


def test_double_backward_register_cap_is_its_own():
    """Tuning.dbwd_min_warps32: the float32 minimum of resident warps asked of the compiler (__launch_bounds__) in the
    double backward's per-edge kernel, and in no other kernel."""
    plan, _ = plan_and_library()
    src = _codegen.generate(_codegen.plan_structure(plan), _codegen.Tuning(dbwd_min_warps32=12))
    per_kernel = {name: int(b32) for b32, name in
                  re.findall(r"__launch_bounds__\(kThreads, sizeof\(T\) == 4 \? (\d+) : \d+\) (\w+)\(", src)}
    capped = {k for k, v in per_kernel.items() if v}
    assert per_kernel and capped == {k for k in per_kernel if k.startswith("dbwd_kernel")}
    assert set(per_kernel.values()) == {0, 12 * 32 // 32}  # kernels of 32 threads: twelve blocks


def test_tuning_names_and_checks(monkeypatch):
    """A variant's cache name hashes only the fields that differ from the defaults (a field added later leaves
    the earlier names as they were); fwd_cpl takes 1 or 2, the switches 0 or 1."""
    assert _codegen.Tuning(fwd_cpl=1).suffix() == ""
    assert _codegen.Tuning(fwd_cpl=2).suffix() != _codegen.Tuning(fwd_acc=64).suffix() != ""
    assert _codegen.Tuning(fwd_acc=64, fwd_cpl=2).suffix() not in (_codegen.Tuning(fwd_cpl=2).suffix(), "")
    monkeypatch.setenv(_codegen.TUNING_ENV, "fwd_cpl=3")
    with pytest.raises(ValueError, match="fwd_cpl is 1 or 2"):
        _codegen.tuning()
    monkeypatch.setenv(_codegen.TUNING_ENV, "w_evict=2")
    with pytest.raises(ValueError, match="w_evict is 0 or 1"):
        _codegen.tuning()
    monkeypatch.setenv(_codegen.TUNING_ENV, "fwd_mma=17")
    with pytest.raises(ValueError, match="fwd_mma is 0 to 16"):
        _codegen.tuning()
    monkeypatch.setenv(_codegen.TUNING_ENV, "gy_smem=2")
    with pytest.raises(ValueError, match="gy_smem is 0 or 1"):
        _codegen.tuning()
    monkeypatch.setenv(_codegen.TUNING_ENV, "fwd_min_block=16")
    with pytest.raises(ValueError, match="fwd_min_block is 32 to 1024"):
        _codegen.tuning()
    monkeypatch.setenv(_codegen.TUNING_ENV, "g_smem=16")
    with pytest.raises(ValueError, match="g_smem takes the bits of 15"):
        _codegen.tuning()
    monkeypatch.setenv(_codegen.TUNING_ENV, "g_smem=10")
    assert _codegen.tuning().g_smem == _codegen.G_SMEM_BIT["bd"] | _codegen.G_SMEM_BIT["dd"]
    monkeypatch.setenv(_codegen.TUNING_ENV, "wave=3")
    with pytest.raises(ValueError, match="wave is 0 or 1"):
        _codegen.tuning()

