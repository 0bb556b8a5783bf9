"""CUDA kernels of md_accel::tp_conv_{fwd,bwd,dbwd} against the plain-torch reference
(md_accel/ops/tp_reference.py, the specification). Skipped without a CUDA device.

Tests taking the ``kernels`` fixture run twice: with the generic kernels and with the
plan-specialised ones (md_accel/ops/_codegen.py, built for every config at module start)."""
from __future__ import annotations

import math

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.ops import _cuda, _custom_ops  # noqa: E402
from md_accel.ops.tp_conv import build_graph  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402
from md_accel.ops.tp_reference import tp_conv_bwd_ref, tp_conv_dbwd_ref, tp_conv_fwd_ref  # noqa: E402
from tp_testing import CONFIGS, sh, uvu_problem  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
_custom_ops.register(True)
OPS = torch.ops.md_accel
DEV = torch.device("cuda")


def plan_tensors(problem: TPProblem, dtype, device=DEV):
    plan = problem.lower()
    return plan, (plan.paths.to(device), plan.cg_ptr.to(device), plan.cg_idx.to(device),
                  plan.cg_val.to(device, dtype))


def random_graph(num_nodes: int, num_edges: int, gen: torch.Generator, hub: int = -1, hub_degree: int = 0):
    """Random edges over the first 3/4 of the nodes (the rest send and receive nothing)."""
    active = max(1, (3 * num_nodes) // 4)
    src = torch.randint(0, active, (num_edges,), generator=gen)
    dst = torch.randint(0, active, (num_edges,), generator=gen)
    if hub >= 0:
        src = torch.cat([src, torch.randint(0, active, (hub_degree,), generator=gen)])
        dst = torch.cat([dst, torch.full((hub_degree,), hub)])
    g = build_graph(src.to(DEV), dst.to(DEV), num_nodes)
    return g


def inputs(problem, plan, g, num_nodes, dtype, gen):
    e = g.src.numel()
    x = torch.randn(num_nodes, plan.dim_in1, generator=gen, dtype=torch.float64)
    y = torch.randn(e, plan.dim_in2, generator=gen, dtype=torch.float64)
    w = torch.randn(e, plan.weight_numel, generator=gen, dtype=torch.float64)
    return [t.to(DEV, dtype) for t in (x, y, w)]


def graph_args(g):
    return (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)


def poison(*shapes, dtype):
    """Fill freed allocator blocks of the outputs' sizes with NaN, so unwritten elements show."""
    blocks = [torch.full(s, float("nan"), dtype=dtype, device=DEV) for s in shapes]
    del blocks


def ref_call(fn, tensors, g, plan, extra=()):
    """Reference in float64 on the CPU."""
    cpu = [t.detach().to("cpu", torch.float64) for t in tensors]
    src, dst = g.src.cpu(), g.dst.cpu()
    dense = [c.to(torch.float64) for c in plan.dense]
    return fn(*cpu, src, dst, *extra, plan.paths.tolist(), dense)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().to(torch.float64), b.detach().cpu().to(torch.float64)
    assert a.shape == b.shape
    assert torch.isfinite(a).all(), "non-finite values (unwritten output?)"
    scale = b.abs().max().item() if b.numel() else 0.0
    return (a - b).abs().max().item() / scale if scale > 0 else (a - b).abs().max().item() if a.numel() else 0.0


TOL = {torch.float64: 1e-10, torch.float32: 1e-5}

# configs whose plan the generator must specialise (fwd, and bwd + dbwd where marked)
MUST_SPECIALISE = {"mace_medium": True, "mace_mp_medium": True, "first_layer": True, "sevennet0_like": True,
                   "sevennet_l3i5_like": True, "in2_mul2": True}


@pytest.fixture(scope="module")
def specs():
    """Build (in parallel, nvcc) and load the specialised kernels of every config."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as ex:
        built = list(ex.map(lambda n: _cuda.specialise(CONFIGS[n]().lower()), CONFIGS))
    return dict(zip(CONFIGS, built))


@pytest.fixture(params=["generic", "specialised"])
def kernels(request, specs):
    previous = _cuda.set_specialised(request.param == "specialised")
    yield request.param
    _cuda.set_specialised(previous)


def test_specialised_built(specs):
    from md_accel.ops import _codegen

    for name, with_bwd in MUST_SPECIALISE.items():
        assert specs[name] is not None, name
        src = _codegen.generate(_codegen.plan_structure(CONFIGS[name]().lower()))
        assert ("bwd_launch<float>" in src) == with_bwd, name
        assert ("dbwd_launch<float>" in src) == with_bwd, name


def run_all(problem, g, num_nodes, dtype, seed, specialised=None):
    """Every pass against the reference; ``specialised`` (bool): whether generated kernels must
    (True) or must not (False) serve the calls."""
    gen = torch.Generator().manual_seed(seed)
    plan, pl = plan_tensors(problem, dtype)
    x, y, w = inputs(problem, plan, g, num_nodes, dtype, gen)
    if specialised is not None:
        assert OPS._tp_conv_specialised_for(x, *pl) == specialised
    e = y.shape[0]
    ga = graph_args(g)
    tol = TOL[dtype]

    poison((num_nodes, plan.dim_out), dtype=dtype)
    out = OPS.tp_conv_fwd(x, y, w, *ga, *pl, plan.dim_out)
    ref = ref_call(lambda x, y, w, s, d, *r: tp_conv_fwd_ref(x, y, w, s, d, num_nodes, *r, plan.dim_out),
                   (x, y, w), g, plan)
    assert rel_err(out, ref) <= tol, ("fwd", rel_err(out, ref))

    gout = torch.randn(num_nodes, plan.dim_out, generator=gen, dtype=torch.float64).to(DEV, dtype)
    poison((num_nodes, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), dtype=dtype)
    got = OPS.tp_conv_bwd(gout, x, y, w, *ga, *pl)
    want = ref_call(tp_conv_bwd_ref, (gout, x, y, w), g, plan)
    for name, a, b in zip(("grad_x", "grad_y", "grad_w"), got, want):
        assert rel_err(a, b) <= tol, (name, rel_err(a, b))

    ggx, ggy, ggw = (torch.randn(t.shape, generator=gen, dtype=torch.float64).to(DEV, dtype) for t in (x, y, w))
    poison((num_nodes, plan.dim_out), (num_nodes, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel),
           dtype=dtype)
    got = OPS.tp_conv_dbwd(ggx, ggy, ggw, gout, x, y, w, *ga, *pl)
    want = ref_call(tp_conv_dbwd_ref, (ggx, ggy, ggw, gout, x, y, w), g, plan)
    for name, a, b in zip(("g_grad_out", "g_x", "g_y", "g_w"), got, want):
        assert rel_err(a, b) <= tol, (name, rel_err(a, b))

    # without g_grad_out (its kernel not launched): the same g_x, g_y, g_w, an empty g_grad_out
    poison((num_nodes, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), dtype=dtype)
    lean = OPS.tp_conv_dbwd(ggx, ggy, ggw, gout, x, y, w, *ga, *pl, False)
    assert lean[0].shape == (0, plan.dim_out)
    for name, a, b in zip(("g_x", "g_y", "g_w"), lean[1:], want[1:]):
        assert rel_err(a, b) <= tol, (name, "need_grad_out=False", rel_err(a, b))


@pytest.mark.parametrize("split", [None, "3"], ids=["split_auto", "split3"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_reference(name, dtype, split, kernels, monkeypatch):
    """``split``: receivers cut into parts (MD_ACCEL_BWD_SPLIT, read per call): the generated
    backward's part loop; without it this small graph runs one block per receiver."""
    if split is not None:
        monkeypatch.setenv("MD_ACCEL_BWD_SPLIT", split)
    problem = CONFIGS[name]()
    gen = torch.Generator().manual_seed(1)
    num_nodes = 40
    g = random_graph(num_nodes, 300, gen, hub=3, hub_degree=40)
    must = MUST_SPECIALISE.get(name) if kernels == "specialised" else False
    run_all(problem, g, num_nodes, dtype, seed=2, specialised=must)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_other_cg_values_not_served_by_compiled_ones(dtype, specs):
    """The generated kernels have the plan's CG values compiled in: a call whose cg_val differs in the
    call's dtype (scaled, or changed in place after a served call) runs the generic kernels and
    matches the reference computed with its own values; values equal after the cast to the call's
    dtype (one float64 ulp off in a float32 call, a float64 cg_val with float32 features) are served."""
    problem = CONFIGS["sevennet_l3i5_like"]()
    gen = torch.Generator().manual_seed(8)
    num_nodes = 40
    g = random_graph(num_nodes, 300, gen, hub=3, hub_degree=40)
    plan, pl = plan_tensors(problem, dtype)
    x, y, w = inputs(problem, plan, g, num_nodes, dtype, gen)
    served = lambda cg, feats=x: OPS._tp_conv_specialised_for(feats, *pl[:3], cg)  # noqa: E731
    assert served(pl[3])
    assert served(plan.cg_val.clone().to(DEV, dtype))  # the same values in a new tensor
    one_ulp = plan.cg_val.clone()
    one_ulp[5] = torch.nextafter(one_ulp[5], torch.tensor(2.0, dtype=torch.float64))
    assert served(one_ulp.to(DEV, dtype)) == (dtype == torch.float32)
    assert served(plan.cg_val.to(DEV), x.float())

    def check(cg, vals):
        out = OPS.tp_conv_fwd(x, y, w, *graph_args(g), *pl[:3], cg, plan.dim_out)
        plist, dense = _custom_ops._dense_cg(plan.paths, plan.cg_ptr, plan.cg_idx, vals, torch.float64)
        ref = tp_conv_fwd_ref(*(t.cpu().double() for t in (x, y, w)), g.src.cpu(), g.dst.cpu(), num_nodes,
                              plist, dense, plan.dim_out)
        assert rel_err(out, ref) <= TOL[dtype]

    scaled = plan.cg_val * 1.25
    assert not served(scaled.to(DEV, dtype))
    check(scaled.to(DEV, dtype), scaled)
    cg = plan.cg_val.to(DEV, dtype)
    check(cg, plan.cg_val)
    assert served(cg)
    cg.mul_(1.25)  # in place: a new version of the tensor matched before
    assert not served(cg)
    check(cg, plan.cg_val.to(dtype).double() * 1.25)


def test_module_in_another_dtype_than_the_features(specs):
    """A TensorProductConv left in float64 with float32 features passes its float64 cg_val buffer
    (the op converts it): served by the generated kernels and bitwise equal to the module in
    float32, forward and gradients."""
    from md_accel.ops import TensorProductConv

    problem = CONFIGS["sevennet_l3i5_like"]()
    ins = list(problem.instructions)
    conv64 = TensorProductConv(problem.irreps_in1, problem.irreps_in2, problem.irreps_out, ins).to(DEV, torch.float64)
    conv32 = TensorProductConv(problem.irreps_in1, problem.irreps_in2, problem.irreps_out, ins).to(DEV, torch.float32)
    gen = torch.Generator().manual_seed(11)
    num_nodes = 50
    g = random_graph(num_nodes, 400, gen)
    plan = problem.lower()
    x, y, w = inputs(problem, plan, g, num_nodes, torch.float32, gen)
    assert OPS._tp_conv_specialised_for(x, conv64.paths, conv64.cg_ptr, conv64.cg_idx, conv64.cg_val)
    outs = []
    for conv in (conv64, conv32):
        xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
        out = conv(xs, ys, w, g.src, g.dst, num_nodes)
        gx, gy = torch.autograd.grad((out * out).sum(), (xs, ys))
        outs.append((out.detach(), gx, gy))
    for a, b in zip(*outs):
        assert a.dtype == torch.float32 and torch.equal(a, b)


def hub_problem(name: str, dtype, seed: int):
    """Config ``name`` on a 60-node, 2,000-edge graph with a hub of 300 edges: (plan, plan tensors, graph,
    nodes, (x, y, w, grad_out), the generator for further inputs)."""
    problem = CONFIGS[name]()
    plan, pl = plan_tensors(problem, dtype)
    gen = torch.Generator().manual_seed(seed)
    n = 60
    g = random_graph(n, 2000, gen, hub=5, hub_degree=300)
    x, y, w = inputs(problem, plan, g, n, dtype, gen)
    gout = torch.randn(n, plan.dim_out, generator=gen, dtype=torch.float64).to(DEV, dtype)
    return plan, pl, g, n, (x, y, w, gout), gen


def sized_allocations(fn, *sizes: int):
    """(fn()'s result, how many device allocations of exactly each of ``sizes`` bytes it asked for), counted from
    the caching allocator's trace (requested sizes), not from peaks: those move with the allocator's block reuse by
    up to ~1 MiB per tensor, as much as these small graphs' buffers."""
    dev = torch.cuda.current_device()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history("all", context=None, max_entries=1 << 20)
    try:
        start = len(torch.cuda.memory._snapshot()["device_traces"][dev])
        out = fn()
        torch.cuda.synchronize()
        trace = torch.cuda.memory._snapshot()["device_traces"][dev][start:]
    finally:
        torch.cuda.memory._record_memory_history(None)
    return out, tuple(sum(1 for e in trace if e["action"] == "alloc" and e["size"] == b) for b in sizes)


def rows_allocations(fn, rows_bytes: int):
    """(fn()'s result, how many allocations of exactly the per-edge rows' bytes it asked for): the deterministic
    backward's E x in1 scratch, which the atomic mode and rows in grad_w do without (sized_allocations)."""
    out, (count,) = sized_allocations(fn, rows_bytes)
    return out, count


def second_order_runner(name: str, dtype, seed: int):
    """(plan, plan tensors, x, nodes, the references of the backward and double backward, the bytes of the per-edge
    rows, run):
    ``run(op)`` calls the specialised-or-not op ("bwd" or "dbwd", with g_grad_out) on config ``name``'s hub
    problem, outputs poisoned first, and returns (outputs, its allocations of the rows' size: rows_allocations)."""
    plan, pl, g, n, (x, y, w, gout), gen = hub_problem(name, dtype, seed)
    ggx, ggy, ggw = (torch.randn(t.shape, generator=gen, dtype=torch.float64).to(DEV, dtype) for t in (x, y, w))
    ga = graph_args(g)
    e = g.src.numel()

    def run(op):
        poison((n, plan.dim_out), (n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), dtype=dtype)
        if op == "bwd":
            return rows_allocations(lambda: OPS.tp_conv_bwd(gout, x, y, w, *ga, *pl), rows)
        return rows_allocations(lambda: OPS.tp_conv_dbwd(ggx, ggy, ggw, gout, x, y, w, *ga, *pl, True), rows)

    want = {"bwd": ref_call(tp_conv_bwd_ref, (gout, x, y, w), g, plan),
            "dbwd": ref_call(tp_conv_dbwd_ref, (ggx, ggy, ggw, gout, x, y, w), g, plan)}
    rows = e * plan.dim_in1 * x.element_size()
    return plan, pl, x, n, want, rows, run


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["sevennet0_like", "mace_mp_medium"])
def test_backward_in_edge_chunks(name, dtype, specs, monkeypatch):
    """A graph whose per-edge grad_x rows exceed MD_ACCEL_BWD_WORK_MIB runs the specialised backward in
    edge chunks (grad_x accumulated chunk after chunk): the reference's results, bitwise the same run
    after run, and a lower peak than the unchunked backward (its rows are 8x one chunk's)."""
    plan, pl, g, n, (x, y, w, gout), _ = hub_problem(name, dtype, 11)
    ga = graph_args(g)
    row = plan.dim_in1 * x.element_size()

    def peak_of_bwd():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = OPS.tp_conv_bwd(gout, x, y, w, *ga, *pl)
        torch.cuda.synchronize()
        return out, torch.cuda.max_memory_allocated() - base

    previous = _cuda.set_specialised(True)
    try:
        assert OPS._tp_conv_specialised_for(x, *pl)
        monkeypatch.delenv("MD_ACCEL_BWD_WORK_MIB", raising=False)
        _, whole_peak = peak_of_bwd()
        monkeypatch.setenv("MD_ACCEL_BWD_WORK_MIB", repr(300.5 * row / 2 ** 20))  # 300 edges a chunk: 8 chunks
        e = g.src.numel()
        poison((n, plan.dim_in1), (e, plan.dim_in2), (e, plan.weight_numel), dtype=dtype)
        got, chunked_peak = peak_of_bwd()
        again = OPS.tp_conv_bwd(gout, x, y, w, *ga, *pl)
    finally:
        _cuda.set_specialised(previous)
    # the chunks hold 7 x 300 rows fewer than the whole backward; allow two chunks' rows of slack
    assert chunked_peak < whole_peak - 5 * 300 * row, (chunked_peak, whole_peak)
    want = ref_call(tp_conv_bwd_ref, (gout, x, y, w), g, plan)
    for what, a, b, c in zip(("grad_x", "grad_y", "grad_w"), got, want, again):
        assert rel_err(a, b) <= TOL[dtype], (what, rel_err(a, b))
        assert torch.equal(a, c), what


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["sevennet0_like", "mace_mp_medium"])
def test_atomic_grad_x(name, dtype, specs, monkeypatch):
    """set_deterministic(False): the specialised backward and double backward add grad_x atomically
    (no per-edge rows, no per-sender sum): the references' results without the E x in1 scratch of the
    deterministic mode; torch.use_deterministic_algorithms(True) overrides it (bitwise the deterministic results)."""
    from md_accel.ops import set_deterministic

    plan, pl, x, n, want, rows, run = second_order_runner(name, dtype, 13)
    monkeypatch.delenv("MD_ACCEL_BWD_WORK_MIB", raising=False)  # the deterministic backward unchunked
    spec_prev, det_prev = _cuda.set_specialised(True), set_deterministic(True)
    torch_det = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        assert OPS._tp_conv_specialised_for(x, *pl)
        det = {op: run(op) for op in ("bwd", "dbwd")}
        set_deterministic(False)
        atomic = {op: run(op) for op in ("bwd", "dbwd")}
        torch.use_deterministic_algorithms(True)
        try:
            forced = {op: run(op)[0] for op in ("bwd", "dbwd")}
        finally:
            torch.use_deterministic_algorithms(torch_det[0], warn_only=torch_det[1])
    finally:
        _cuda.set_specialised(spec_prev)
        set_deterministic(det_prev)
    for op in ("bwd", "dbwd"):
        assert atomic[op][1] == 0 and det[op][1] >= 1, (op, atomic[op][1], det[op][1], rows)
        for k, (a, b) in enumerate(zip(atomic[op][0], want[op])):
            assert rel_err(a, b) <= TOL[dtype], (op, k, rel_err(a, b))
        for k, (a, b) in enumerate(zip(forced[op], det[op][0])):
            assert torch.equal(a, b), (op, k)


@pytest.mark.parametrize("split", [None, "3"], ids=["split_auto", "split3"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", [n for n, bwd in MUST_SPECIALISE.items() if bwd])
def test_rows_in_grad_w(name, dtype, split, specs, monkeypatch):
    """set_rows_in_grad_w(True): the deterministic backward and double backward keep each edge's grad_x row in
    grad_w columns written later (no E x in1 scratch): the same bits as with the scratch rows, the references'
    results, no allocation of the rows' size (the scratch mode makes one), bitwise the same run after run;
    receivers cut into parts too (MD_ACCEL_BWD_SPLIT)."""
    from md_accel.ops import set_deterministic, set_rows_in_grad_w

    if split is not None:
        monkeypatch.setenv("MD_ACCEL_BWD_SPLIT", split)
    monkeypatch.delenv("MD_ACCEL_BWD_WORK_MIB", raising=False)  # the scratch backward unchunked
    plan, pl, x, n, want, rows, run = second_order_runner(name, dtype, 17)
    previous = _cuda.set_specialised(True), set_deterministic(True), set_rows_in_grad_w(False)
    try:
        assert OPS._tp_conv_specialised_for(x, *pl)
        scratch = {op: run(op) for op in ("bwd", "dbwd")}
        set_rows_in_grad_w(True)
        in_gw = {op: run(op) for op in ("bwd", "dbwd")}
        again = {op: run(op)[0] for op in ("bwd", "dbwd")}
    finally:
        _cuda.set_specialised(previous[0])
        set_deterministic(previous[1])
        set_rows_in_grad_w(previous[2])
    for op in ("bwd", "dbwd"):
        assert in_gw[op][1] == 0 and scratch[op][1] >= 1, (op, in_gw[op][1], scratch[op][1], rows)
        for k, (a, b, c, ref) in enumerate(zip(in_gw[op][0], scratch[op][0], again[op], want[op])):
            assert torch.equal(a, b) and torch.equal(a, c), (op, k)
            assert rel_err(a, ref) <= TOL[dtype], (op, k, rel_err(a, ref))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", [n for n, bwd in MUST_SPECIALISE.items() if bwd])
def test_rows_auto_in_the_final_backwards_only(name, dtype, specs, monkeypatch):
    """set_rows_in_grad_w("auto"), the default: the final backwards autograd runs (tp_conv_fwd's backward without
    create_graph; the double backward) keep each edge's grad_x row in grad_w, without the E x in1 scratch that mode
    False allocates; a backward under create_graph and direct op calls keep the scratch. Counted per way: the
    forward + backward pass makes no allocation of the rows' size (False: one), the double-backward pass one (its
    first backward's; False: two), a direct tp_conv_bwd or tp_conv_dbwd call one as with False. Every gradient
    bitwise that of False; the first-order ones within the tolerance of the reference."""
    from md_accel.ops import set_dbwd_in_gg_w, set_deterministic, set_rows_in_grad_w

    monkeypatch.delenv("MD_ACCEL_BWD_WORK_MIB", raising=False)  # the scratch backward unchunked
    plan, pl, g, n, (x, y, w, gout), gen = hub_problem(name, dtype, 23)
    ggx, ggy, ggw = (torch.randn(t.shape, generator=gen, dtype=torch.float64).to(DEV, dtype) for t in (x, y, w))
    ga = graph_args(g)
    rows = g.src.numel() * plan.dim_in1 * x.element_size()

    def forward():
        leaves = [t.clone().requires_grad_() for t in (x, y, w)]
        return leaves, OPS.tp_conv_fwd(*leaves, *ga, *pl, plan.dim_out)

    def first_order():
        leaves, out = forward()
        return torch.autograd.grad(out, leaves, gout)

    def second_order():  # a training step's shape: the first gradients in the loss
        leaves, out = forward()
        first = torch.autograd.grad(out, leaves, gout, create_graph=True)
        return torch.autograd.grad(sum((f * f).sum() for f in first), leaves)

    ways = {"first": first_order, "second": second_order,
            "direct_bwd": lambda: OPS.tp_conv_bwd(gout, x, y, w, *ga, *pl),
            "direct_dbwd": lambda: OPS.tp_conv_dbwd(ggx, ggy, ggw, gout, x, y, w, *ga, *pl, True)}

    def runs():
        return {way: rows_allocations(fn, rows) for way, fn in ways.items()}

    # the double backward's grad_w not into gg_w (which takes precedence over the rows: the next test)
    previous = (_cuda.set_specialised(True), set_deterministic(True), set_rows_in_grad_w(False),
                set_dbwd_in_gg_w(False))
    try:
        assert OPS._tp_conv_specialised_for(x, *pl)
        scratch = runs()
        assert set_rows_in_grad_w("auto") is False
        auto = runs()
    finally:
        _cuda.set_specialised(previous[0])
        set_deterministic(previous[1])
        set_rows_in_grad_w(previous[2])
        set_dbwd_in_gg_w(previous[3])
    counts = {way: (auto[way][1], scratch[way][1]) for way in ways}
    assert counts["first"] == (0, 1) and counts["second"] == (1, 2), counts
    assert counts["direct_bwd"] == counts["direct_dbwd"] == (1, 1), counts
    for way in ways:
        for k, (a, b) in enumerate(zip(auto[way][0], scratch[way][0])):
            assert torch.equal(a.detach(), b.detach()), (way, k)
    want = ref_call(tp_conv_bwd_ref, (gout, x, y, w), g, plan)
    for k, (a, ref) in enumerate(zip(auto["first"][0], want)):
        assert rel_err(a, ref) <= TOL[dtype], (k, rel_err(a, ref))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", [n for n, bwd in MUST_SPECIALISE.items() if bwd])
def test_final_double_backward_writes_grad_w_into_gg_w(name, dtype, specs, monkeypatch):
    """set_dbwd_in_gg_w(True), the default: the double backward that autograd runs without create_graph writes its
    grad_w into the memory of the incoming gg_w, which nothing else holds (here the loss's gradient to the first
    backward's grad_w): the training-step pass asks for one allocation of E x w elements fewer than with False, and
    its grad_x rows go to the scratch (two allocations of the rows' size, one with False: the rows in grad_w would
    overwrite gg_w). Every gradient bitwise False's. Where a hook keeps gg_w, the double backward leaves it as the
    loss made it (twice the first grad_w, exactly) and allocates as with False. A gradient made by a Python autograd
    function (whose Python wrapper the tensor keeps while nothing in Python holds it) is handed over as well. With the
    rows forced into grad_w (set_rows_in_grad_w(True)) nothing is handed over and no rows are allocated; a direct
    tp_conv_dbwd call leaves its gg_w as it was."""
    from md_accel.ops import set_dbwd_in_gg_w, set_rows_in_grad_w

    class SumOfSquares(torch.autograd.Function):  # the loss as benchmarks/kernels.py computes it
        @staticmethod
        def forward(ctx, f):
            ctx.save_for_backward(f)
            return (f * f).sum()

        @staticmethod
        def backward(ctx, grad):
            (f,) = ctx.saved_tensors
            return f * (2 * grad)

    monkeypatch.delenv("MD_ACCEL_BWD_WORK_MIB", raising=False)
    plan, pl, g, n, (x, y, w, gout), gen = hub_problem(name, dtype, 29)
    ga = graph_args(g)
    e = g.src.numel()
    rows, w_bytes = (e * d * x.element_size() for d in (plan.dim_in1, plan.weight_numel))
    ggx, ggy, ggw = (torch.randn(t.shape, generator=gen, dtype=torch.float64).to(DEV, dtype) for t in (x, y, w))
    ggw_before = ggw.clone()
    assert rows != w_bytes
    kept = []

    def second_order(keep: bool, python_loss: bool = False):
        leaves = [t.clone().requires_grad_() for t in (x, y, w)]
        out = OPS.tp_conv_fwd(*leaves, *ga, *pl, plan.dim_out)
        first = torch.autograd.grad(out, leaves, gout, create_graph=True)
        if keep:
            first[2].register_hook(kept.append)  # holds gg_w
        loss = sum(SumOfSquares.apply(f) if python_loss else (f * f).sum() for f in first)
        second = torch.autograd.grad(loss, leaves)
        return second, first[2].detach()

    previous = _cuda.set_specialised(True), set_rows_in_grad_w("auto"), set_dbwd_in_gg_w(False)
    try:
        assert OPS._tp_conv_specialised_for(x, *pl)
        off = sized_allocations(lambda: second_order(False), rows, w_bytes)
        assert set_dbwd_in_gg_w(True) is False
        on = sized_allocations(lambda: second_order(False), rows, w_bytes)
        held = sized_allocations(lambda: second_order(True), rows, w_bytes)
        python = sized_allocations(lambda: second_order(False, python_loss=True), rows, w_bytes)
        OPS.tp_conv_dbwd(ggx, ggy, ggw, gout, x, y, w, *ga, *pl, True)
        set_rows_in_grad_w(True)
        forced = sized_allocations(lambda: second_order(False), rows, w_bytes)
        set_rows_in_grad_w("auto")
        set_dbwd_in_gg_w(False)
        python_off = sized_allocations(lambda: second_order(False, python_loss=True), rows, w_bytes)
    finally:
        _cuda.set_specialised(previous[0])
        set_rows_in_grad_w(previous[1])
        set_dbwd_in_gg_w(previous[2])
    (rows_off, w_off), (rows_on, w_on), (rows_held, w_held) = off[1], on[1], held[1]
    assert (rows_on, rows_off, rows_held) == (2, 1, 1), (rows_on, rows_off, rows_held)
    assert w_on == w_off - 1 and w_held == w_off, (w_on, w_off, w_held)
    assert python[1] == (2, python_off[1][1] - 1) and python_off[1][0] == 1, (python[1], python_off[1])
    assert forced[1] == (0, w_off), (forced[1], w_off)
    assert torch.equal(ggw, ggw_before)
    for k, (a, b, c, d, f) in enumerate(zip(on[0][0], off[0][0], held[0][0], python[0][0], forced[0][0])):
        assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d) and torch.equal(a, f), k
    assert len(kept) == 1 and torch.equal(kept[0], 2 * held[0][1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["sevennet0_like", "mace_mp_medium"])
def test_fused_op_double_backward_writes_grad_w_into_gg_w(name, dtype, specs, monkeypatch):
    """The fused-radial op's double backward (csrc/fused_ops.cpp, composed: gg_w = gg_h W + h gg_W, its own, then
    tp_conv_dbwd) hands gg_w over as the previous test's does: one allocation of E x w elements fewer than with
    set_dbwd_in_gg_w(False), every gradient (to x, y, the hidden features and W) bitwise the same. Run materialised
    (no fused-radial library loaded in this module)."""
    from md_accel.ops import set_dbwd_in_gg_w

    monkeypatch.delenv("MD_ACCEL_BWD_WORK_MIB", raising=False)
    plan, pl, g, n, (x, y, _, gout), gen = hub_problem(name, dtype, 31)
    ga = graph_args(g)
    e, hidden = g.src.numel(), 16
    h = torch.randn(e, hidden, generator=gen, dtype=torch.float64).to(DEV, dtype)
    W = (torch.randn(hidden, plan.weight_numel, generator=gen, dtype=torch.float64) / hidden ** 0.5).to(DEV, dtype)
    w_bytes = e * plan.weight_numel * x.element_size()

    def second_order():
        leaves = [t.clone().requires_grad_() for t in (x, y, h, W)]
        out = OPS.tp_conv_fused_fwd(*leaves, *ga, *pl, plan.dim_out)
        first = torch.autograd.grad(out, leaves, gout, create_graph=True)
        return torch.autograd.grad(sum((f * f).sum() for f in first), leaves)

    previous = _cuda.set_specialised(True), set_dbwd_in_gg_w(False)
    try:
        assert OPS._tp_conv_specialised_for(x, *pl)
        off = sized_allocations(second_order, w_bytes)
        set_dbwd_in_gg_w(True)
        on = sized_allocations(second_order, w_bytes)
    finally:
        _cuda.set_specialised(previous[0])
        set_dbwd_in_gg_w(previous[1])
    assert on[1][0] == off[1][0] - 1, (on[1], off[1])
    for k, (a, b) in enumerate(zip(on[0], off[0])):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_forward_rows_by_bulk_copies_on_the_device(dtype, specs):
    """The forward of a plan whose passes take one edge slot each (128 channels) is ``fwd_kernel_tma`` (its edge rows
    by bulk copies, Tuning.fwd_tma) on compute capability 9 and newer; a call whose x is not 16-byte aligned gets the
    forward without copies. Both against the reference, with the same bits."""
    from md_accel.ops import _codegen

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("bulk copies need compute capability 9 or newer")
    if not _codegen.tuning().fwd_tma:
        pytest.skip("MD_ACCEL_TP_TUNING turns fwd_tma off")
    problem = CONFIGS["mace_medium"]()
    gen = torch.Generator().manual_seed(21)
    num_nodes = 300
    g = random_graph(num_nodes, 6000, gen)
    plan, pl = plan_tensors(problem, dtype)
    x, y, w = inputs(problem, plan, g, num_nodes, dtype, gen)
    assert OPS._tp_conv_specialised_for(x, *pl)
    shifted = torch.cat([x.new_zeros(1), x.flatten()])[1:].view(x.shape)
    assert x.data_ptr() % 16 == 0 and shifted.data_ptr() % 16 != 0
    ref = ref_call(lambda x, y, w, s, d, *r: tp_conv_fwd_ref(x, y, w, s, d, num_nodes, *r, plan.dim_out),
                   (x, y, w), g, plan)
    outs = []
    for xs, bulk in ((x, True), (shifted, False)):
        poison((num_nodes, plan.dim_out), dtype=dtype)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            outs.append(OPS.tp_conv_fwd(xs, y, w, *graph_args(g), *pl, plan.dim_out))
            torch.cuda.synchronize()
        kernels = [k.key for k in prof.key_averages() if "fwd_kernel" in k.key]
        assert kernels and any("fwd_kernel_tma" in k for k in kernels) == bulk, kernels
        assert rel_err(outs[-1], ref) <= TOL[dtype], rel_err(outs[-1], ref)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["sevennet_l3i5_like", "mace_mp_medium"])
def test_graph_shapes(name, dtype, kernels):
    problem = CONFIGS[name]()
    gen = torch.Generator().manual_seed(3)
    # one receiver with 1500 neighbours among mostly isolated nodes
    run_all(problem, random_graph(2000, 10, gen, hub=7, hub_degree=1500), 2000, dtype, seed=4)
    # a single edge
    one = build_graph(torch.tensor([2], device=DEV), torch.tensor([0], device=DEV), 3)
    run_all(problem, one, 3, dtype, seed=5)
    # no edges at all: outputs are zeros, per-edge gradients empty
    none = build_graph(torch.zeros(0, dtype=torch.int64, device=DEV), torch.zeros(0, dtype=torch.int64, device=DEV), 5)
    run_all(problem, none, 5, dtype, seed=6)


def test_large_graph_forward(kernels):
    """10M edges, small features: forward against the reference evaluated on the GPU."""
    problem = uvu_problem("4x0e+4x1o", sh(1), 1)
    if kernels == "specialised":
        assert _cuda.specialise(problem.lower()) is not None
    gen = torch.Generator(device=DEV).manual_seed(7)
    n, e = 200_000, 10_000_000
    src = torch.randint(0, n, (e,), device=DEV, generator=gen)
    dst = torch.randint(0, n, (e,), device=DEV, generator=gen)
    g = build_graph(src, dst, n)
    plan, pl = plan_tensors(problem, torch.float32)
    x = torch.randn(n, plan.dim_in1, device=DEV, generator=gen)
    y = torch.randn(e, plan.dim_in2, device=DEV, generator=gen)
    w = torch.randn(e, plan.weight_numel, device=DEV, generator=gen)
    out = OPS.tp_conv_fwd(x, y, w, *graph_args(g), *pl, plan.dim_out)
    dense = [c.to(DEV, torch.float64) for c in plan.dense]
    ref = tp_conv_fwd_ref(x.double(), y.double(), w.double(), g.src, g.dst, n, plan.paths.tolist(), dense,
                          plan.dim_out)
    assert rel_err(out, ref) <= 1e-5


@pytest.mark.parametrize("name", ["mace_medium", "sevennet_l3i5_like"])
@pytest.mark.parametrize("op", ["fwd", "bwd", "dbwd"])
def test_bitwise_deterministic(op, name, kernels):
    problem = CONFIGS[name]()
    gen = torch.Generator().manual_seed(8)
    g = random_graph(64, 3000, gen, hub=5, hub_degree=500)
    plan, pl = plan_tensors(problem, torch.float32)
    x, y, w = inputs(problem, plan, g, 64, torch.float32, gen)
    gout = torch.randn(64, plan.dim_out, generator=gen).to(DEV)
    ga = graph_args(g)
    if op == "fwd":
        call = lambda: (OPS.tp_conv_fwd(x, y, w, *ga, *pl, plan.dim_out),)  # noqa: E731
    elif op == "bwd":
        call = lambda: OPS.tp_conv_bwd(gout, x, y, w, *ga, *pl)  # noqa: E731
    else:
        call = lambda: OPS.tp_conv_dbwd(x, y, w, gout, x, y, w, *ga, *pl)  # noqa: E731
    first = [t.clone() for t in call()]
    for _ in range(5):
        for a, b in zip(call(), first):
            assert torch.equal(a, b)


def _tiny():
    problem = uvu_problem("2x0e+2x1o+1x2e", sh(2), 2)
    assert _cuda.specialise(problem.lower()) is not None
    gen = torch.Generator().manual_seed(9)
    g = random_graph(5, 9, gen, hub=1, hub_degree=3)
    plan, pl = plan_tensors(problem, torch.float64)
    x, y, w = (t.requires_grad_() for t in inputs(problem, plan, g, 5, torch.float64, gen))
    fn = lambda x, y, w: OPS.tp_conv_fwd(x, y, w, *graph_args(g), *pl, plan.dim_out)  # noqa: E731
    return fn, (x, y, w)


def test_gradcheck(kernels):
    fn, args = _tiny()
    assert torch.autograd.gradcheck(fn, args)


def test_gradgradcheck(kernels):
    fn, args = _tiny()
    assert torch.autograd.gradgradcheck(fn, args)


def test_torchscript_forces_and_double_backward():
    """A scripted function using the op differentiates twice through the C++ autograd kernel."""
    problem = CONFIGS["sevennet0_like"]()
    gen = torch.Generator().manual_seed(10)
    g = random_graph(30, 200, gen)
    plan, pl = plan_tensors(problem, torch.float64)
    x, y, w = inputs(problem, plan, g, 30, torch.float64, gen)

    @torch.jit.script
    def energy(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
               dst_ptr: torch.Tensor, src_perm: torch.Tensor, src_ptr: torch.Tensor, paths: torch.Tensor,
               cg_ptr: torch.Tensor, cg_idx: torch.Tensor, cg_val: torch.Tensor, dim_out: int) -> torch.Tensor:
        out = torch.ops.md_accel.tp_conv_fwd(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
                                             cg_idx, cg_val, dim_out)
        return (out * out).sum()

    def grads(x, y, w, fwd):
        y = y.clone().requires_grad_()
        e = fwd(x, y, w)
        (gy,) = torch.autograd.grad(e, y, create_graph=True)
        (hy,) = torch.autograd.grad((gy * gy).sum(), y)
        return e.detach(), gy.detach(), hy

    ga = graph_args(g)
    e1, gy1, hy1 = grads(x, y, w, lambda x, y, w: energy(x, y, w, *ga, *pl, plan.dim_out))
    dense = [c.to(DEV) for c in plan.dense]
    ref = lambda x, y, w: (tp_conv_fwd_ref(x, y, w, g.src, g.dst, 30, plan.paths.tolist(), dense,  # noqa: E731
                                           plan.dim_out) ** 2).sum()
    e2, gy2, hy2 = grads(x, y, w, ref)
    assert rel_err(e1.reshape(1), e2.reshape(1)) <= 1e-10
    assert rel_err(gy1, gy2) <= 1e-10
    assert rel_err(hy1, hy2) <= 1e-10
    assert math.isfinite(e1.item())
