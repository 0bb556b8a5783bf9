"""CUDA kernels of md_accel::symmetric_contraction_{fwd,bwd,dbwd} against the plain-torch reference
(md_accel/ops/sc_reference.py, the specification) evaluated in float64 on the CPU. Skipped without a
CUDA device.

Tests taking the ``kernels`` fixture run twice: with the generic kernels (term list read at run
time) and with the generated ones (md_accel/ops/_sc_codegen.py, built for every config at module
start, in parallel). Outputs are poisoned (freed allocator blocks filled with NaN) before each
call, so unwritten elements fail."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.ops import _cuda, _sc_codegen  # noqa: E402
from md_accel.ops.sc_reference import sc_bwd_ref, sc_dbwd_ref, sc_fwd_ref  # noqa: E402
from md_accel.ops.symmetric_contraction import SymmetricContraction  # noqa: E402
from sc_testing import CONFIGS, random_weights, rel_err  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
OPS = torch.ops.md_accel
DEV = torch.device("cuda")
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


_MODULES = {}


def module(name) -> SymmetricContraction:
    if name not in _MODULES:
        try:
            _MODULES[name] = CONFIGS[name]()
        except ImportError as e:  # mace-torch for the config with mace's own coupling tensors
            pytest.skip(f"{name}: {e}")
    return _MODULES[name]


@pytest.fixture(scope="module")
def specs():
    """Build (nvcc, in parallel) and load the generated kernels of every config."""
    from concurrent.futures import ThreadPoolExecutor

    def build(name):
        try:
            m = module(name)
        except pytest.skip.Exception:
            return "skip"
        return _sc_codegen.specialise(m.in_dims, m.out_dims, m.num_k, m.sc_terms, m.sc_values)

    with ThreadPoolExecutor(max_workers=len(CONFIGS)) as ex:
        return dict(zip(CONFIGS, ex.map(build, CONFIGS)))


@pytest.fixture(params=["generic", "specialised"])
def kernels(request, specs):
    previous = _sc_codegen.set_specialised(request.param == "specialised")
    yield request.param
    _sc_codegen.set_specialised(previous)


def poison(*shapes, dtype):
    """Fill freed allocator blocks of the outputs' sizes with NaN, so unwritten elements show."""
    blocks = [torch.full(s, float("nan"), dtype=dtype, device=DEV) for s in shapes]
    del blocks


def op_args(m, device=DEV):
    return (m.sc_terms.to(device), m.sc_values.to(device), m.in_dims, m.out_dims)


def ref_tables(m):
    return (m.ref_mono, m.ref_coeff.double(), m.ref_group_k, m.ref_group_sel.double())


def random_inputs(m, n, seed, num_elements=None):
    """Float64 on the CPU (the reference's inputs; each test casts them to the dtype it runs)."""
    gen = torch.Generator().manual_seed(seed)
    e = m.contractions[0].orders[0].w.shape[0] if num_elements is None else num_elements
    x = torch.randn(n, m.channels * sum(m.in_dims), generator=gen, dtype=torch.float64)
    species = torch.randint(e, (n,), generator=gen)
    species[: min(n, e)] = torch.arange(min(n, e))
    w = torch.randn(m.weights().shape, generator=gen, dtype=torch.float64)
    g = torch.randn(n, m.channels * sum(m.out_dims), generator=gen, dtype=torch.float64)
    hx, hw = torch.randn(x.shape, generator=gen, dtype=torch.float64), torch.randn(w.shape, generator=gen,
                                                                                   dtype=torch.float64)
    return x, species, w, g, hx, hw


_REFERENCES = {}


def reference(m, n, seed, num_elements=None):
    """Float64 inputs and the reference's outputs, computed once per case: the float32 and float64
    runs and both kernel variants compare with the same float64 reference (~45 s for 3000 nodes)."""
    key = (id(m), n, seed, num_elements)
    if key not in _REFERENCES:
        x, species, w, g, hx, hw = inputs = random_inputs(m, n, seed, num_elements)
        t = ref_tables(m)
        _REFERENCES[key] = inputs, (
            sc_fwd_ref(x, species, w, *t, m.in_dims, m.out_dims),
            sc_bwd_ref(g, x, species, w, *t, m.in_dims, m.out_dims, True),
            sc_dbwd_ref(hx, hw, g, x, species, w, *t, m.in_dims, m.out_dims))
    return _REFERENCES[key]


def run_all(m, n, dtype, seed, num_elements=None):
    (x, species, w, g, hx, hw), (want_fwd, want_bwd, want_dbwd) = reference(m, n, seed, num_elements)
    X, S, W, G, HX, HW = (v.to(DEV, dtype) if v.is_floating_point() else v.to(DEV) for v in (x, species, w, g, hx, hw))
    args = op_args(m)
    tol = TOL[dtype]

    poison(g.shape, dtype=dtype)
    out = OPS.symmetric_contraction_fwd(X, S, W, *args)
    assert rel_err(out.cpu(), want_fwd) <= tol, ("fwd", rel_err(out.cpu(), want_fwd))

    poison(x.shape, w.shape, dtype=dtype)
    gx, gw = OPS.symmetric_contraction_bwd(G, X, S, W, *args, True)
    assert rel_err(gx.cpu(), want_bwd[0]) <= tol, ("grad_x", rel_err(gx.cpu(), want_bwd[0]))
    assert rel_err(gw.cpu(), want_bwd[1]) <= tol, ("grad_w", rel_err(gw.cpu(), want_bwd[1]))
    poison(x.shape, dtype=dtype)
    gx_only, gw_zero = OPS.symmetric_contraction_bwd(G, X, S, W, *args, False)
    assert torch.equal(gx_only, gx) and not gw_zero.any()

    poison(g.shape, x.shape, w.shape, dtype=dtype)
    got = OPS.symmetric_contraction_dbwd(HX, HW, G, X, S, W, *args)
    for name, a, b in zip(("g_grad_out", "g_x", "g_w"), got, want_dbwd):
        assert rel_err(a.cpu(), b) <= tol, (name, rel_err(a.cpu(), b))


def test_specialised_built(specs):
    for name, path in specs.items():
        assert path is not None, name


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_reference(name, dtype, kernels, specs):
    if specs[name] == "skip":
        pytest.skip("mace-torch not installed")
    run_all(module(name), 70, dtype, seed=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_node_counts(dtype, kernels):
    m = module("mp0_like")
    run_all(m, 1, dtype, seed=2)              # one node, most elements absent
    run_all(m, 3000, dtype, seed=3)           # many chunks per element
    run_all(m, 600, dtype, seed=4, num_elements=1)  # one element only
    x = torch.zeros(0, m.channels * 16, device=DEV, dtype=dtype)
    species = torch.zeros(0, dtype=torch.int64, device=DEV)
    w = m.weights().detach().to(DEV, dtype)
    args = op_args(m)
    assert OPS.symmetric_contraction_fwd(x, species, w, *args).shape == (0, m.channels * 4)
    g = torch.zeros(0, m.channels * 4, device=DEV, dtype=dtype)
    gx, gw = OPS.symmetric_contraction_bwd(g, x, species, w, *args, True)
    assert gx.shape == x.shape and not gw.any()
    ggo, gx, gw = OPS.symmetric_contraction_dbwd(x, w, g, x, species, w, *args)
    assert ggo.shape == g.shape and gx.shape == x.shape and not gw.any()


def test_species_out_of_range_gives_nan(kernels):
    m = module("small")
    x, species, w, g, _, _ = random_inputs(m, 20, seed=5)
    species[3], species[7] = -1, 4
    out = OPS.symmetric_contraction_fwd(x.to(DEV), species.to(DEV), w.to(DEV), *op_args(m)).cpu()
    assert torch.isnan(out[[3, 7]]).all()
    keep = [i for i in range(20) if i not in (3, 7)]
    ok = sc_fwd_ref(x[keep], species[keep], w, *ref_tables(m), m.in_dims, m.out_dims)
    assert rel_err(out[keep], ok) <= 1e-10
    gx, _ = OPS.symmetric_contraction_bwd(g.to(DEV), x.to(DEV), species.to(DEV), w.to(DEV), *op_args(m), True)
    assert torch.isnan(gx[[3, 7]].cpu()).all()


@pytest.mark.parametrize("op", ["fwd", "bwd", "bwd_no_w", "dbwd"])
def test_bitwise_deterministic(op, kernels):
    m = module("mp0_like")
    x, species, w, g, hx, hw = (v.to(DEV, torch.float32) if v.is_floating_point() else v.to(DEV)
                                for v in random_inputs(m, 4000, seed=6))
    args = op_args(m)
    calls = {
        "fwd": lambda: (OPS.symmetric_contraction_fwd(x, species, w, *args),),
        "bwd": lambda: OPS.symmetric_contraction_bwd(g, x, species, w, *args, True),
        "bwd_no_w": lambda: OPS.symmetric_contraction_bwd(g, x, species, w, *args, False),
        "dbwd": lambda: OPS.symmetric_contraction_dbwd(hx, hw, g, x, species, w, *args),
    }
    first = [t.clone() for t in calls[op]()]
    for _ in range(5):
        for a, b in zip(calls[op](), first):
            assert torch.equal(a, b)


def test_gradcheck(kernels):
    m = module("small")
    x, species, w, _, _, _ = random_inputs(m, 4, seed=7)
    x, w = x.to(DEV).requires_grad_(True), w.to(DEV).requires_grad_(True)
    species = species.to(DEV)
    args = op_args(m)
    fn = lambda x, w: OPS.symmetric_contraction_fwd(x, species, w, *args)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w))
    assert torch.autograd.gradgradcheck(fn, (x, w), fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_module_on_cuda_matches_cpu(dtype, specs):
    """The module on CUDA (the op, through the C++ autograd kernel) against itself on the CPU
    (plain-torch reference differentiated by autograd): output, forces-like first derivatives
    and the second derivative; scripted too."""
    cpu = SymmetricContraction.from_tensors(
        [1, 3, 5], [[o.u for o in reversed(list(c.orders))] for c in module("l2_corr2").contractions],
        [[o.w.detach() for o in reversed(list(c.orders))] for c in module("l2_corr2").contractions])
    gpu = SymmetricContraction.from_tensors(
        [1, 3, 5], [[o.u for o in reversed(list(c.orders))] for c in cpu.contractions],
        [[o.w.detach() for o in reversed(list(c.orders))] for c in cpu.contractions]).to(DEV, dtype)
    x, species, _, g, v, _ = random_inputs(cpu, 40, seed=8)
    xc = x.clone().requires_grad_(True)
    out = cpu(xc, species)
    gx_c, = torch.autograd.grad(out, xc, g, create_graph=True)
    hx_c, = torch.autograd.grad((gx_c * v).sum(), xc)
    for model in (gpu, torch.jit.script(gpu)):
        xg = x.to(DEV, dtype).requires_grad_(True)
        og = model(xg, species.to(DEV))
        gx_g, = torch.autograd.grad(og, xg, g.to(DEV, dtype), create_graph=True)
        hx_g, = torch.autograd.grad((gx_g * v.to(DEV, dtype)).sum(), xg)
        for a, b in ((og, out), (gx_g, gx_c), (hx_g, hx_c)):
            assert rel_err(a.cpu(), b) <= TOL[dtype]
    # weight gradients through the module's concatenation
    wg = torch.autograd.grad(gpu(x.to(DEV, dtype), species.to(DEV)), [o.w for c in gpu.contractions for o in c.orders],
                             g.to(DEV, dtype))
    wc = torch.autograd.grad(cpu(x, species), [o.w for c in cpu.contractions for o in c.orders], g)
    for a, b in zip(wg, wc):
        assert rel_err(a.cpu(), b) <= TOL[dtype]


def test_large_forward_backward(specs):
    """60,000 nodes of the MACE-MP-0 shape in float32 (the dense reference needs ~80 GB here):
    rows checked against the reference on a subset (every row depends on its node only)."""
    m = module("mp0_like")
    n = 60_000
    gen = torch.Generator(device=DEV).manual_seed(9)
    x = torch.randn(n, 128 * 16, device=DEV, generator=gen)
    species = torch.randint(5, (n,), device=DEV, generator=gen)
    w = m.weights().detach().to(DEV, torch.float32)
    g = torch.randn(n, 128 * 4, device=DEV, generator=gen)
    args = op_args(m)
    out = OPS.symmetric_contraction_fwd(x, species, w, *args)
    gx, gw = OPS.symmetric_contraction_bwd(g, x, species, w, *args, True)
    rows = torch.arange(0, n, 997, device=DEV)
    t = ref_tables(m)
    xs, ss = x[rows].double().cpu(), species[rows].cpu()
    assert rel_err(out[rows].cpu(), sc_fwd_ref(xs, ss, w.double().cpu(), *t, m.in_dims, m.out_dims)) <= 1e-5
    want_gx = sc_bwd_ref(g[rows].double().cpu(), xs, ss, w.double().cpu(), *t, m.in_dims, m.out_dims, False)[0]
    assert rel_err(gx[rows].cpu(), want_gx) <= 1e-5
    # weight gradient: the reference on the GPU in float64, chunked over nodes
    want_gw = torch.zeros(w.shape, dtype=torch.float64, device=DEV)
    td = tuple(v.to(DEV) for v in t)
    for s in range(0, n, 4000):
        sl = slice(s, s + 4000)
        want_gw += sc_bwd_ref(g[sl].double(), x[sl].double(), species[sl], w.double(), *td, m.in_dims, m.out_dims,
                              True)[1]
    assert rel_err(gw, want_gw) <= 1e-5
