"""CUDA kernels of md_accel::tp_conv_fused_{fwd,bwd} (the radial MLP's last layer fused into the
tensor-product convolution, md_accel/ops/_codegen_fused.py) against the float64 CPU reference
(tp_reference.tp_conv_fused_*_ref): fresh random inputs, poisoned outputs, graph corner cases,
bitwise determinism, the C++ autograd to second order, the materialised fallback, and the model
layers. Shapes: the real MACE-MP-0 medium, SevenNet-0 and SevenNet-l3i5 convolutions
(benchmarks/workloads.py). Skipped without a CUDA device."""
from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.ops import _cuda, _custom_ops  # noqa: E402
from md_accel.ops.tp_conv import build_graph  # noqa: E402
from md_accel.ops.tp_reference import tp_conv_fused_bwd_ref, tp_conv_fused_fwd_ref  # noqa: E402

from fused_testing import CONFIGS  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
_custom_ops.register(True)
OPS = torch.ops.md_accel
DEV = torch.device("cuda")
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


# The fused-radial kernels are opt-in (MD_ACCEL_FUSED_RADIAL=1) and take minutes of nvcc on a
# fresh machine; tools/gpu_check.sh skips their tests unless GPU_FUSED=1.
SKIP_FUSED = os.environ.get("MD_ACCEL_SKIP_FUSED_KERNEL_TESTS") == "1"


@pytest.fixture(scope="module")
def fused_specs():
    """Build (in parallel, nvcc) and load the fused kernels of every config."""
    from concurrent.futures import ThreadPoolExecutor

    if SKIP_FUSED:
        pytest.skip("fused-radial kernel tests off (MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1)")

    def build(name):
        problem, hidden = CONFIGS[name]
        return _cuda.specialise_fused(problem().lower(), hidden)

    with ThreadPoolExecutor(max_workers=8) as ex:
        return dict(zip(CONFIGS, ex.map(build, CONFIGS)))


def test_fused_built(fused_specs):
    for name, path in fused_specs.items():
        assert path is not None, name


def plan_args(plan, dtype):
    return (plan.paths.to(DEV), plan.cg_ptr.to(DEV), plan.cg_idx.to(DEV), plan.cg_val.to(DEV, dtype))


def random_graph(num_nodes, num_edges, gen, hub=-1, hub_degree=0):
    active = max(1, (3 * num_nodes) // 4)
    src = torch.randint(0, active, (num_edges,), generator=gen)
    dst = torch.randint(0, active, (num_edges,), generator=gen)
    if hub >= 0:
        src = torch.cat([src, torch.randint(0, active, (hub_degree,), generator=gen)])
        dst = torch.cat([dst, torch.full((hub_degree,), hub)])
    return build_graph(src.to(DEV), dst.to(DEV), num_nodes)


def graph_args(g):
    return (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)


def inputs(plan, hidden, g, num_nodes, dtype, gen):
    e = g.src.numel()
    shapes = ((num_nodes, plan.dim_in1), (e, plan.dim_in2), (e, hidden), (hidden, plan.weight_numel),
              (num_nodes, plan.dim_out))
    x, y, h, W, go = (torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes)
    W = W / hidden ** 0.5
    return [t.to(DEV, dtype) for t in (x, y, h, W, go)]


def poison(*shapes, dtype):
    """Fill freed allocator blocks of the outputs' sizes with NaN, so unwritten elements show."""
    blocks = [torch.full(s, float("nan"), dtype=dtype, device=DEV) for s in shapes]
    del blocks


def rel_err(a, b):
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    assert a.shape == b.shape, (a.shape, b.shape)
    assert torch.isfinite(a).all(), "non-finite values (unwritten output?)"
    if a.numel() == 0:
        return 0.0
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


def reference(plan, g, num_nodes, x, y, h, W, go):
    cpu = [t.detach().cpu().double() for t in (x, y, h, W, go)]
    src, dst = g.src.cpu(), g.dst.cpu()
    dense = [c.double() for c in plan.dense]
    out = tp_conv_fused_fwd_ref(*cpu[:4], src, dst, num_nodes, plan.paths.tolist(), dense, plan.dim_out)
    grads = tp_conv_fused_bwd_ref(cpu[4], *cpu[:4], src, dst, plan.paths.tolist(), dense, True)
    return out, grads


def run_all(name, g, num_nodes, dtype, seed):
    problem, hidden = CONFIGS[name]
    plan = problem().lower()
    pl = plan_args(plan, dtype)
    x, y, h, W, go = inputs(plan, hidden, g, num_nodes, dtype, torch.Generator().manual_seed(seed))
    e = y.shape[0]
    ref_out, ref_grads = reference(plan, g, num_nodes, x, y, h, W, go)
    tol = TOL[dtype]
    poison((num_nodes, plan.dim_out), dtype=dtype)
    out = OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out)
    assert rel_err(out, ref_out) <= tol, ("fwd", rel_err(out, ref_out))
    for need_W in (True, False):
        poison((num_nodes, plan.dim_in1), (e, plan.dim_in2), (e, hidden), (e, plan.weight_numel),
               (e, plan.dim_in1), dtype=dtype)
        got = OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, need_W)
        for what, a, b in zip(("grad_x", "grad_y", "grad_hidden", "grad_W"), got, ref_grads):
            if what == "grad_W" and not need_W:
                assert a.shape == (0, plan.weight_numel)
            else:
                assert rel_err(a, b) <= tol, (what, need_W, rel_err(a, b))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_reference(name, dtype, fused_specs):
    gen = torch.Generator().manual_seed(1)
    run_all(name, random_graph(40, 300, gen, hub=3, hub_degree=40), 40, dtype, seed=2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["mace_mp0_medium", "sevennet_l3i5"])
def test_graph_shapes(name, dtype, fused_specs):
    gen = torch.Generator().manual_seed(3)
    # one receiver with 1500 neighbours among mostly isolated nodes
    run_all(name, random_graph(2000, 10, gen, hub=7, hub_degree=1500), 2000, dtype, seed=4)
    one = build_graph(torch.tensor([2], device=DEV), torch.tensor([0], device=DEV), 3)
    run_all(name, one, 3, dtype, seed=5)
    none = build_graph(torch.zeros(0, dtype=torch.int64, device=DEV), torch.zeros(0, dtype=torch.int64, device=DEV), 5)
    run_all(name, none, 5, dtype, seed=6)


@pytest.mark.parametrize("name", ["mace_mp0_medium", "sevennet_0", "sevennet_l3i5"])
def test_fused_equals_materialised_float32(name, fused_specs):
    """The fused kernels against the path they replace (cuBLAS w = hidden @ W, then tp_conv_*)."""
    problem, hidden = CONFIGS[name]
    plan = problem().lower()
    pl = plan_args(plan, torch.float32)
    gen = torch.Generator().manual_seed(11)
    g = random_graph(300, 9000, gen)
    x, y, h, W, go = inputs(plan, hidden, g, 300, torch.float32, gen)
    w = h @ W
    out = OPS.tp_conv_fwd(x, y, w, *graph_args(g), *pl, plan.dim_out)
    gx, gy, gw = OPS.tp_conv_bwd(go, x, y, w, *graph_args(g), *pl)
    want = (out, gx, gy, gw @ W.t(), h.t() @ gw)
    got = (OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out),
           *OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, True))
    for what, a, b in zip(("out", "grad_x", "grad_y", "grad_hidden", "grad_W"), got, want):
        assert rel_err(a, b) <= 1e-5, (what, rel_err(a, b))


@pytest.mark.parametrize("name", ["mace_mp0_medium", "sevennet_l3i5"])
@pytest.mark.parametrize("op", ["fwd", "bwd"])
def test_bitwise_deterministic(op, name, fused_specs):
    problem, hidden = CONFIGS[name]
    plan = problem().lower()
    pl = plan_args(plan, torch.float32)
    gen = torch.Generator().manual_seed(8)
    g = random_graph(64, 3000, gen, hub=5, hub_degree=500)
    x, y, h, W, go = inputs(plan, hidden, g, 64, torch.float32, gen)
    if op == "fwd":
        call = lambda: (OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out),)  # noqa: E731
    else:
        call = lambda: OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, True)  # noqa: E731
    first = [t.clone() for t in call()]
    for _ in range(5):
        for a, b in zip(call(), first):
            assert torch.equal(a, b)


def test_materialised_fallback(fused_specs):
    """Fused kernels switched off, and a hidden width with no fused library: same results."""
    problem, hidden = CONFIGS["sevennet_0"]
    plan = problem().lower()
    pl = plan_args(plan, torch.float64)
    gen = torch.Generator().manual_seed(12)
    g = random_graph(30, 200, gen)
    x, y, h, W, go = inputs(plan, hidden, g, 30, torch.float64, gen)
    ref_out, ref_grads = reference(plan, g, 30, x, y, h, W, go)
    previous = _cuda.set_fused(False)
    try:
        out = OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out)
        grads = OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, True)
    finally:
        _cuda.set_fused(previous)
    assert rel_err(out, ref_out) <= 1e-10
    for a, b in zip(grads, ref_grads):
        assert rel_err(a, b) <= 1e-10
    h24, W24 = h[:, :24].contiguous(), W[:24].contiguous()  # no library for H = 24
    ref24, _ = reference(plan, g, 30, x, y, h24, W24, go)
    assert rel_err(OPS.tp_conv_fused_fwd(x, y, h24, W24, *graph_args(g), *pl, plan.dim_out), ref24) <= 1e-10


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["mace_mp0_medium", "mace_first", "sevennet_l3i5", "nequip_l3_h32", "tiny"])
def test_chunked_materialised(name, dtype, monkeypatch):
    """Fused kernels off: w materialised in about 7 chunks of edges (a hub receiver's edges span
    several), against the reference, and bit-identical run to run."""
    problem, hidden = CONFIGS[name]
    plan = problem().lower()
    assert _cuda.specialise(plan) is not None, "the chunked path needs the specialised tp_conv kernels"
    gen = torch.Generator().manual_seed(21)
    g = random_graph(300, 4000, gen, hub=3, hub_degree=900)
    elem = 8 if dtype == torch.float64 else 4
    monkeypatch.setenv("MD_ACCEL_WEIGHT_CHUNK_MIB", str(g.src.numel() / 7 * plan.weight_numel * elem / 2**20))
    previous = _cuda.set_fused(False)
    try:
        run_all(name, g, 300, dtype, seed=22)
        pl = plan_args(plan, dtype)
        x, y, h, W, go = inputs(plan, hidden, g, 300, dtype, gen)
        first = [OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out),
                 *OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, True)]
        again = [OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out),
                 *OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, True)]
    finally:
        _cuda.set_fused(previous)
    for a, b in zip(first, again):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["mace_mp0_medium", "sevennet_0", "nequip_l3_h32"])  # plans offering the rows
def test_chunked_rows_in_grad_w(name, dtype, monkeypatch):
    """The edge chunks' backward with each chunk's grad_x rows in its grad_w slice (set_rows_in_grad_w, session
    39): bitwise the backward with per-chunk scratch rows, on a graph cut into about 7 chunks."""
    from md_accel.ops import set_deterministic, set_rows_in_grad_w

    problem, hidden = CONFIGS[name]
    plan = problem().lower()
    gen = torch.Generator().manual_seed(23)
    g = random_graph(300, 4000, gen, hub=3, hub_degree=900)
    elem = 8 if dtype == torch.float64 else 4
    monkeypatch.setenv("MD_ACCEL_WEIGHT_CHUNK_MIB", str(g.src.numel() / 7 * plan.weight_numel * elem / 2**20))
    pl = plan_args(plan, dtype)
    x, y, h, W, go = inputs(plan, hidden, g, 300, dtype, gen)
    previous = _cuda.set_fused(False), set_deterministic(True), set_rows_in_grad_w(False)
    try:
        results = []
        for rows in (False, True):
            set_rows_in_grad_w(rows)
            results.append(OPS.tp_conv_fused_bwd(go, x, y, h, W, *graph_args(g), *pl, True))
    finally:
        _cuda.set_fused(previous[0])
        set_deterministic(previous[1])
        set_rows_in_grad_w(previous[2])
    for what, a, b in zip(("grad_x", "grad_y", "grad_h", "grad_W"), *results):
        assert torch.isfinite(a).all() and torch.equal(a, b), what


def _leaves(x, y, h, W, train_W):
    """x, y, h (and W where train_W) as autograd leaves; an MD step's W is frozen."""
    return [t.detach().requires_grad_() for t in (x, y, h)] + [W.detach().requires_grad_(train_W)]


def _autograd_grads(plan, g, x, y, h, W, go, pl, create_graph=False, train_W=False):
    leaves = _leaves(x, y, h, W, train_W)
    out = OPS.tp_conv_fused_fwd(*leaves, *graph_args(g), *pl, plan.dim_out)
    wrt = leaves if train_W else leaves[:3]
    return [out.detach(), *torch.autograd.grad(out, wrt, go, create_graph=create_graph)]


def _w_gemms_in_backward(plan, g, x, y, h, W, go, pl, train_W=False):
    """Launches of the float32 last-layer GEMM's split kernel (one per w_c computed) in a backward."""
    leaves = _leaves(x, y, h, W, train_W)
    out = OPS.tp_conv_fused_fwd(*leaves, *graph_args(g), *pl, plan.dim_out)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.autograd.grad(out, leaves if train_W else leaves[:3], go)
        torch.cuda.synchronize()
    return sum("split3_a_kernel" in e.name for e in prof.events())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_kept_weight_chunks(dtype, monkeypatch):
    """The chunked path's forward keeps w chunks for the backward up to MD_ACCEL_KEEP_WEIGHTS_MIB
    (W frozen, as in MD): all, some or none kept give bit-identical gradients (also with
    create_graph, which recomputes), equal to the reference; kept chunks are not recomputed
    (float32: counted GEMM launches); with W trained nothing is kept."""
    problem, hidden = CONFIGS["mace_mp0_medium"]
    plan = problem().lower()
    gen = torch.Generator().manual_seed(31)
    g = random_graph(300, 4000, gen, hub=3, hub_degree=900)
    elem = 8 if dtype == torch.float64 else 4
    chunk_mib = g.src.numel() / 7 * plan.weight_numel * elem / 2**20
    monkeypatch.setenv("MD_ACCEL_WEIGHT_CHUNK_MIB", str(chunk_mib))
    monkeypatch.delenv("MD_ACCEL_GEMM_CUBLAS", raising=False)  # the launches counted are the cuBLAS route's
    monkeypatch.delenv("MD_ACCEL_GEMM_UNBIASED", raising=False)
    pl = plan_args(plan, dtype)
    x, y, h, W, go = inputs(plan, hidden, g, 300, dtype, gen)
    previous = _cuda.set_fused(False)
    try:
        results, launches = {}, {}
        for label, keep_mib in (("none", 0), ("some", 3.5 * chunk_mib), ("all", 100 * chunk_mib)):
            monkeypatch.setenv("MD_ACCEL_KEEP_WEIGHTS_MIB", str(keep_mib))
            results[label] = _autograd_grads(plan, g, x, y, h, W, go, pl)
            if dtype == torch.float32:
                launches[label] = _w_gemms_in_backward(plan, g, x, y, h, W, go, pl)
        results["create_graph"] = _autograd_grads(plan, g, x, y, h, W, go, pl, create_graph=True)
        trained = _autograd_grads(plan, g, x, y, h, W, go, pl, train_W=True)
        if dtype == torch.float32:
            launches["trained"] = _w_gemms_in_backward(plan, g, x, y, h, W, go, pl, train_W=True)
    finally:
        _cuda.set_fused(previous)
    for label in ("some", "all", "create_graph"):
        for a, b in zip(results["none"], results[label]):
            assert torch.equal(a, b.detach()), label
    for a, b in zip(results["none"], trained):
        assert torch.equal(a, b.detach()), "trained"
    ref_out, ref_grads = reference(plan, g, 300, x, y, h, W, go)
    assert rel_err(results["all"][0], ref_out) <= TOL[dtype]
    for a, b in zip(results["all"][1:], ref_grads[:3]):
        assert rel_err(a, b) <= TOL[dtype]
    assert rel_err(trained[4], ref_grads[3]) <= TOL[dtype]  # grad W
    if dtype == torch.float32:
        chunks = launches["none"]  # 7 or 8 (edges per chunk rounded down)
        assert chunks >= 7 and launches == {"none": chunks, "some": chunks - 3, "all": 0, "trained": chunks}, launches


def _tiny():
    problem, hidden = CONFIGS["tiny"]
    plan = problem().lower()
    gen = torch.Generator().manual_seed(9)
    g = random_graph(5, 9, gen, hub=1, hub_degree=3)
    x, y, h, W, _ = inputs(plan, hidden, g, 5, torch.float64, gen)
    pl = plan_args(plan, torch.float64)
    fn = lambda x, y, h, W: OPS.tp_conv_fused_fwd(x, y, h, W, *graph_args(g), *pl, plan.dim_out)  # noqa: E731
    return fn, [t.requires_grad_() for t in (x, y, h, W)]


def test_gradcheck(fused_specs):
    fn, args = _tiny()
    assert torch.autograd.gradcheck(fn, args)


def test_gradgradcheck(fused_specs):
    """The C++ double backward (composed from the unfused ops), W_last trainable and frozen."""
    fn, args = _tiny()
    assert torch.autograd.gradgradcheck(fn, args)
    frozen = args[3].detach()
    assert torch.autograd.gradgradcheck(lambda x, y, h: fn(x, y, h, frozen), args[:3])


def test_torchscript_forces_and_double_backward(fused_specs):
    """A scripted function using the fused op differentiates twice through the C++ autograd."""
    problem, hidden = CONFIGS["sevennet_0"]
    plan = problem().lower()
    gen = torch.Generator().manual_seed(10)
    g = random_graph(30, 200, gen)
    x, y, h, W, _ = inputs(plan, hidden, g, 30, torch.float64, gen)
    pl = plan_args(plan, torch.float64)

    @torch.jit.script
    def energy(x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, W: torch.Tensor, src: torch.Tensor,
               dst: torch.Tensor, dst_ptr: torch.Tensor, src_perm: torch.Tensor, src_ptr: torch.Tensor,
               paths: torch.Tensor, cg_ptr: torch.Tensor, cg_idx: torch.Tensor, cg_val: torch.Tensor,
               dim_out: int) -> torch.Tensor:
        out = torch.ops.md_accel.tp_conv_fused_fwd(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
                                                   cg_idx, cg_val, dim_out)
        return (out * out).sum()

    def grads(fwd):
        hh = h.clone().requires_grad_()
        WW = W.clone().requires_grad_()
        e = fwd(hh, WW)
        gh, gW = torch.autograd.grad(e, (hh, WW), create_graph=True)
        hess = torch.autograd.grad((gh * gh).sum() + (gW * gW).sum(), (hh, WW))
        return (e.detach(), gh.detach(), gW.detach()) + hess

    got = grads(lambda hh, WW: energy(x, y, hh, WW, *graph_args(g), *pl, plan.dim_out))
    dense = [c.to(DEV) for c in plan.dense]
    want = grads(lambda hh, WW: (tp_conv_fused_fwd_ref(x, y, hh, WW, g.src, g.dst, 30, plan.paths.tolist(), dense,
                                                       plan.dim_out) ** 2).sum())
    for a, b in zip(got, want):
        assert rel_err(a.reshape(-1), b.reshape(-1)) <= 1e-10


@pytest.mark.skipif(SKIP_FUSED, reason="fused-radial kernel tests off (MD_ACCEL_SKIP_FUSED_KERNEL_TESTS=1)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("model", ["sevennet-0", "sevennet-l3i5"])
def test_sevennet_model_fused_equals_unfused(monkeypatch, dtype, model):
    """A whole SevenNet model on CUDA: the layers' fused branch (opt-in) against materialised weights."""
    pytest.importorskip("sevenn")
    from md_accel.convert.sevenn import resolve_checkpoint

    try:
        resolve_checkpoint(model)
    except FileNotFoundError as e:  # trimmed sevenn bundles ship one checkpoint
        pytest.skip(str(e))
    from md_accel.ops.tp_conv import FUSED_RADIAL_ENV

    monkeypatch.setenv(FUSED_RADIAL_ENV, "1")
    from ase.build import bulk

    from md_accel.convert.sevenn import convert_sevenn
    from md_accel.model import energy_forces_virial
    from md_accel.neighbors import neighbor_list

    flag = "fused_f32" if dtype == torch.float32 else "fused_f64"
    pot = convert_sevenn(model, dtype=dtype).to(DEV)
    assert all(getattr(layer.conv, flag) for layer in pot.layers), "fused kernels not built for the model"
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    atoms.rattle(0.05, seed=0)
    pos = torch.tensor(atoms.positions, device=DEV, dtype=torch.float64)
    cell = torch.tensor(atoms.cell.array, device=DEV, dtype=torch.float64)
    edges = neighbor_list(pos, cell, atoms.pbc, pot.cutoff)
    species = torch.full((len(atoms),), pot.elements.index("Cu"), device=DEV)

    def run():
        out = energy_forces_virial(pot, species, edges.vec.to(dtype), edges.src, edges.dst)
        return out["energy"].detach(), out["forces"].detach()

    e1, f1 = run()
    for layer in pot.layers:
        setattr(layer.conv, flag, False)
    e0, f0 = run()
    # float32: differences of near-equal sums; float64: the same arithmetic up to summation order
    tol_e, tol_f = (1e-5, 1e-4) if dtype == torch.float32 else (1e-12, 1e-10)
    assert abs(e1.item() - e0.item()) <= tol_e * abs(e0.item())
    assert rel_err(f1, f0) <= tol_f


# --- md_accel::tp_conv_pair_fwd: edges sharing weight rows (the two directions of a pair) ---------
def paired_graph(num_nodes, num_pairs, gen):
    """Edges in pairs (a -> b, b -> a; self-pairs included), built unsorted with their partners."""
    active = max(1, (3 * num_nodes) // 4)
    a = torch.randint(0, active, (num_pairs,), generator=gen)
    b = torch.randint(0, active, (num_pairs,), generator=gen)
    b[:3] = a[:3]
    partner = torch.cat([torch.arange(num_pairs) + num_pairs, torch.arange(num_pairs)])
    return build_graph(torch.cat([a, b]).to(DEV), torch.cat([b, a]).to(DEV), num_nodes, False, partner.to(DEV))


def pair_problem(name, chunks, dtype, seed, monkeypatch):
    """(plan, paired graph of 300 nodes and 4,000 edges, plan_args, (x, y, W, grad_out, hidden's P rows)) of a
    CONFIGS entry, with the backward run in one chunk keeping the rows ("whole"), in 7 edge chunks
    ("chunked") or as small graphs run it ("lean": no kept rows, MD_ACCEL_LEAN_CHUNKS chunks)."""
    problem, hidden = CONFIGS[name]
    plan = problem().lower()
    assert _cuda.specialise(plan) is not None  # the generated kernels serve the pair op
    gen = torch.Generator().manual_seed(seed)
    g = paired_graph(300, 2000, gen)
    e = g.src.numel()
    if chunks != "lean":
        monkeypatch.setenv("MD_ACCEL_LEAN_WEIGHTS_MIB", "0")
    if chunks == "chunked":
        elem = 8 if dtype == torch.float64 else 4
        monkeypatch.setenv("MD_ACCEL_WEIGHT_CHUNK_MIB", str(e / 7 * plan.weight_numel * elem / 2**20))
    x, y, _, W, go = inputs(plan, hidden, g, 300, dtype, gen)
    h_rows = torch.randn((e // 2, hidden), generator=gen, dtype=torch.float64).to(DEV, dtype)
    return plan, g, plan_args(plan, dtype), (x, y, W, go, h_rows)


def _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl, train_W=False, create_graph=False):
    """(pair op, fused op on h_rows expanded per edge): output and gradients w.r.t. x, y, h_rows (and W)."""
    runs = []
    for pair in (True, False):
        xs, ys, hs = (t.detach().requires_grad_() for t in (x, y, h_rows))
        Ws = W.detach().requires_grad_(train_W)
        if pair:
            out = OPS.tp_conv_pair_fwd(xs, ys, hs, Ws, g.w_row, *graph_args(g), *pl, plan.dim_out)
        else:
            out = OPS.tp_conv_fused_fwd(xs, ys, hs.index_select(0, g.w_row), Ws, *graph_args(g), *pl, plan.dim_out)
        wrt = [xs, ys, hs] + ([Ws] if train_W else [])
        runs.append([out, *torch.autograd.grad(out, wrt, go, create_graph=create_graph)])
    return runs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("chunks", ["whole", "chunked", "lean"])
@pytest.mark.parametrize("name", ["mace_mp0_medium", "sevennet_l3i5", "tiny"])
def test_pair_rows_equal_expanded_rows(name, chunks, dtype, monkeypatch):
    """The pair op (P = E / 2 weight rows computed once, the generated kernels reading row w_row[e])
    equals the fused op on the rows expanded per edge, forward and gradients (hidden's summed over
    each pair), W frozen and trained, against the float64 reference too; bit-identical run to run.
    Backward in one chunk with the rows kept, in 7 chunks, and as small graphs run it (lean: no
    kept rows, MD_ACCEL_LEAN_CHUNKS chunks)."""
    plan, g, pl, (x, y, W, go, h_rows) = pair_problem(name, chunks, dtype, 41, monkeypatch)
    e, hidden = g.src.numel(), h_rows.shape[1]
    previous = _cuda.set_fused(False)
    try:
        pair, expanded = _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl)
        again, _ = _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl)
        trained, trained_ref = _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl, train_W=True)
    finally:
        _cuda.set_fused(previous)
    for what, a, b in zip(("out", "grad_x", "grad_y", "grad_h"), pair, expanded):
        assert rel_err(a, b) <= TOL[dtype], what
    for a, b in zip(pair, again):
        assert torch.equal(a, b)
    for what, a, b in zip(("out", "grad_x", "grad_y", "grad_h", "grad_W"), trained, trained_ref):
        assert rel_err(a, b) <= TOL[dtype], what
    ref_out, ref_grads = reference(plan, g, 300, x, y, h_rows.index_select(0, g.w_row), W, go)
    ref_gh = torch.zeros(e // 2, hidden, dtype=torch.float64).index_add_(0, g.w_row.cpu(), ref_grads[2])
    for what, a, b in zip(("out", "grad_x", "grad_y", "grad_h"), pair, (ref_out, ref_grads[0], ref_grads[1], ref_gh)):
        assert rel_err(a, b) <= TOL[dtype], what


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("chunks", ["whole", "chunked", "lean"])
def test_pair_atomic_grad_x(chunks, dtype, monkeypatch):
    """set_deterministic(False) on the paths the Calculator and LAMMPS run (the pair op, and the fused op
    through edge chunks): the kernels add grad_x atomically, no per-sender sum runs, and the outputs and
    gradients are the deterministic ones up to summation order, and the float64 reference's."""
    from md_accel.ops import set_deterministic

    plan, g, pl, (x, y, W, go, h_rows) = pair_problem("mace_mp0_medium", chunks, dtype, 47, monkeypatch)
    previous, det_previous = _cuda.set_fused(False), set_deterministic(True)
    sums = {}
    try:
        for label in ("deterministic", "atomic"):
            set_deterministic(label == "deterministic")
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                runs = _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl)
                torch.cuda.synchronize()
            sums[label] = sum("gx_sum_kernel" in ev.name for ev in prof.events())
            if label == "deterministic":
                det = runs
    finally:
        set_deterministic(det_previous)
        _cuda.set_fused(previous)
    assert sums["deterministic"] > 0 and sums["atomic"] == 0, sums
    for op, got, want in zip(("pair", "expanded"), runs, det):
        for what, a, b in zip(("out", "grad_x", "grad_y", "grad_h"), got, want):
            assert rel_err(a, b) <= TOL[dtype], (op, what)
    _, ref_grads = reference(plan, g, 300, x, y, h_rows.index_select(0, g.w_row), W, go)
    for op, got in zip(("pair", "expanded"), runs):
        assert rel_err(got[1], ref_grads[0]) <= TOL[dtype], (op, "grad_x")


def test_pair_rows_computed_once(monkeypatch):
    """float32, 7 edge chunks: the pair path computes the P rows once in the forward and, unless
    kept, once more in the backward (split kernel launches of the last-layer GEMM), not per chunk;
    kept rows (W frozen) are not recomputed."""
    problem, hidden = CONFIGS["mace_mp0_medium"]
    plan = problem().lower()
    gen = torch.Generator().manual_seed(43)
    g = paired_graph(300, 2000, gen)
    e = g.src.numel()
    monkeypatch.setenv("MD_ACCEL_WEIGHT_CHUNK_MIB", str(e / 7 * plan.weight_numel * 4 / 2**20))
    monkeypatch.delenv("MD_ACCEL_GEMM_CUBLAS", raising=False)
    monkeypatch.delenv("MD_ACCEL_GEMM_UNBIASED", raising=False)
    monkeypatch.setenv("MD_ACCEL_LEAN_WEIGHTS_MIB", "0")  # the keep budget decides (small graphs keep none)
    pl = plan_args(plan, torch.float32)
    x, y, _, W, go = inputs(plan, hidden, g, 300, torch.float32, gen)
    h = torch.randn((e // 2, hidden), generator=gen).to(DEV).requires_grad_()
    x.requires_grad_()
    counts = {}
    previous = _cuda.set_fused(False)
    try:
        for label, keep_mib in (("none", 0), ("all", 1000)):
            monkeypatch.setenv("MD_ACCEL_KEEP_WEIGHTS_MIB", str(keep_mib))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                out = OPS.tp_conv_pair_fwd(x, y, h, W, g.w_row, *graph_args(g), *pl, plan.dim_out)
                torch.autograd.grad(out, [x, h], go)
                torch.cuda.synchronize()
            counts[label] = sum("split3_a_kernel" in ev.name for ev in prof.events())
    finally:
        _cuda.set_fused(previous)
    assert counts == {"none": 2, "all": 1}, counts


def test_pair_double_backward():
    """With create_graph the pair op's backward is composed (index_select, the fused ops): the same
    first derivatives, and gradgradcheck in float64 on a small problem."""
    problem, hidden = CONFIGS["tiny"]
    plan = problem().lower()
    gen = torch.Generator().manual_seed(45)
    g = paired_graph(12, 20, gen)
    pl = plan_args(plan, torch.float64)
    x, y, _, W, go = inputs(plan, hidden, g, 12, torch.float64, gen)
    h_rows = torch.randn((g.src.numel() // 2, hidden), generator=gen, dtype=torch.float64).to(DEV)
    first, _ = _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl)
    composed, _ = _pair_and_expanded(plan, g, x, y, h_rows, W, go, pl, create_graph=True)
    for a, b in zip(first, composed):
        assert rel_err(a, b) <= 1e-12

    def f(x_, y_, h_, W_):
        return OPS.tp_conv_pair_fwd(x_, y_, h_, W_, g.w_row, *graph_args(g), *pl, plan.dim_out)

    leaves = [t.detach().requires_grad_() for t in (x, y, h_rows, W)]
    assert torch.autograd.gradgradcheck(f, leaves, atol=1e-7, rtol=1e-6)
