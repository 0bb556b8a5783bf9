"""TensorProductConv (reference path and the md_accel::tp_conv_* custom ops) against e3nn's
TensorProduct + scatter, on random irreps configurations and random graphs."""
import random

import pytest
import torch

e3nn_o3 = pytest.importorskip("e3nn.o3")

import md_accel.ops as ops  # noqa: E402
from md_accel.ops import TensorProductConv, build_graph  # noqa: E402


@pytest.fixture(autouse=True)
def _float64_default():
    """e3nn bakes its Clebsch-Gordan constants in the default dtype at construction."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _random_problem(rng: random.Random, lmax_in=3, lmax_sh=3, lmax_out=3, max_mul=6, mul2=1):
    blocks = []
    for l in range(lmax_in + 1):
        for p in (1, -1):
            if rng.random() < 0.6:
                blocks.append((rng.randint(1, max_mul), (l, p)))
    if not blocks:
        blocks = [(rng.randint(1, max_mul), (0, 1))]
    ir1 = e3nn_o3.Irreps(blocks)
    ir2 = e3nn_o3.Irreps([(mul2, (l, (-1) ** l)) for l in range(lmax_sh + 1)])
    outs, ins = [], []
    for a, (m1, r1) in enumerate(ir1):
        for b, (_, r2) in enumerate(ir2):
            for r3 in r1 * r2:
                if r3.l <= lmax_out and rng.random() < 0.8:
                    ins.append((a, b, len(outs), "uvu", True))
                    outs.append((m1, r3))
    if not ins:
        ins = [(0, 0, 0, "uvu", True)]
        outs = [(ir1[0].mul, ir1[0].ir)]
    return ir1, ir2, e3nn_o3.Irreps(outs), ins


def _random_graph(gen, n, e):
    src = torch.randint(0, n, (e,), generator=gen)
    dst = torch.randint(0, n, (e,), generator=gen)
    return src, dst


def _random_case(conv, seed, n, e):
    """(src, dst, [x, y, w]): a random n-node, e-edge graph and float64 inputs for ``conv``."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = _random_graph(gen, n, e)
    args = [torch.randn(*s, dtype=torch.float64, generator=gen)
            for s in ((n, conv.dim_in1), (e, conv.dim_in2), (e, conv.weight_numel))]
    return src, dst, args


def _e3nn_conv(ir1, ir2, iro, ins, x, y, w, src, dst, n, **kw):
    tp = e3nn_o3.TensorProduct(ir1, ir2, iro, ins, shared_weights=False, internal_weights=False, **kw)
    assert tp.weight_numel == w.shape[1]
    return torch.zeros(n, iro.dim, dtype=x.dtype).index_add(0, dst, tp(x[src], y, w))


@pytest.mark.parametrize("seed", range(12))
def test_matches_e3nn_random_configurations(seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    kw = {}
    if seed % 3 == 1:
        kw = {"irrep_normalization": "norm", "path_normalization": "path"}
    elif seed % 3 == 2:
        kw = {"irrep_normalization": "none", "path_normalization": "none"}
    lmax = [1, 2, 3, 4, 6][seed % 5]
    # keep e3nn's side affordable: wide inputs with low lmax, narrow inputs with high lmax
    ir1, ir2, iro, ins = _random_problem(rng, lmax_in=min(lmax, 3 if lmax <= 3 else 1), lmax_sh=lmax,
                                         lmax_out=lmax, max_mul=6 if lmax <= 3 else 2, mul2=2 if seed == 7 else 1)
    conv = TensorProductConv(str(ir1), str(ir2), str(iro), ins, **kw)
    n, e = 9, 40
    x = torch.randn(n, ir1.dim, dtype=torch.float64, generator=gen)
    y = torch.randn(e, ir2.dim, dtype=torch.float64, generator=gen)
    w = torch.randn(e, conv.weight_numel, dtype=torch.float64, generator=gen)
    src, dst = _random_graph(gen, n, e)
    ref = _e3nn_conv(ir1, ir2, iro, ins, x, y, w, src, dst, n, **kw)
    out = conv(x, y, w, src, dst, n)
    scale = ref.abs().max()
    assert (out - ref).abs().max() <= 1e-12 * scale

    # the custom op (edges sorted by receiver) equals the module, first and second derivatives too
    g = build_graph(src, dst, n)
    xs, ys, ws = (t.clone().requires_grad_() for t in (x, y[g.perm], w[g.perm]))
    op_out = torch.ops.md_accel.tp_conv_fwd(xs, ys, ws, g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr,
                                            conv.paths, conv.cg_ptr, conv.cg_idx, conv.cg_val, conv.dim_out)
    assert (op_out - ref).abs().max() <= 1e-12 * scale
    xr, yr, wr = (t.clone().requires_grad_() for t in (x, y, w))
    tp = e3nn_o3.TensorProduct(ir1, ir2, iro, ins, shared_weights=False, internal_weights=False, **kw)
    ref_out = torch.zeros(n, iro.dim, dtype=x.dtype).index_add(0, dst, tp(xr[src], yr, wr))
    probe = torch.randn(n, iro.dim, dtype=torch.float64, generator=gen)
    grads_op = torch.autograd.grad((op_out * probe).sum(), (xs, ys, ws), create_graph=True)
    grads_ref = torch.autograd.grad((ref_out * probe).sum(), (xr, yr, wr), create_graph=True)
    for a, b in zip(grads_op, (grads_ref[0], grads_ref[1][g.perm], grads_ref[2][g.perm])):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12 * b.abs().max().item())
    if lmax > 3:
        return  # second order at high l is covered by gradgradcheck below; e3nn is slow there
    probes2 = [torch.randn_like(t) for t in grads_op]
    second_op = torch.autograd.grad(sum((a * p).sum() for a, p in zip(grads_op, probes2)), (xs, ys, ws))
    p_ref = [probes2[0], torch.zeros_like(y).index_copy(0, g.perm, probes2[1]),
             torch.zeros_like(w).index_copy(0, g.perm, probes2[2])]
    second_ref = torch.autograd.grad(sum((a * p).sum() for a, p in zip(grads_ref, p_ref)), (xr, yr, wr))
    for a, b in zip(second_op, (second_ref[0], second_ref[1][g.perm], second_ref[2][g.perm])):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-11 * max(b.abs().max().item(), 1e-30))


def _small_conv():
    ins = [(0, 0, 0, "uvu", True), (0, 1, 1, "uvu", True), (1, 0, 2, "uvu", True), (1, 1, 3, "uvu", True),
           (1, 2, 4, "uvu", True)]
    return TensorProductConv("3x0e+2x1o", "0e+1o+2e", "3x0e+3x1o+2x1o+2x0e+2x2o", ins)


def test_gradcheck_and_gradgradcheck_through_op():
    conv = _small_conv()
    n, e = 4, 9
    src, dst, args = _random_case(conv, 5, n, e)
    g = build_graph(src, dst, n)
    args = tuple(a.requires_grad_() for a in args)

    def f(x, y, w):
        return torch.ops.md_accel.tp_conv_fwd(x, y, w, g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr,
                                              conv.paths, conv.cg_ptr, conv.cg_idx, conv.cg_val, conv.dim_out)

    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)


def test_rotation_equivariance():
    conv = _small_conv()
    gen = torch.Generator().manual_seed(6)
    n, e = 6, 20
    src, dst = _random_graph(gen, n, e)
    vec = torch.randn(e, 3, dtype=torch.float64, generator=gen)
    x = torch.randn(n, conv.dim_in1, dtype=torch.float64, generator=gen)
    w = torch.randn(e, conv.weight_numel, dtype=torch.float64, generator=gen)
    q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64, generator=gen))
    rot = q * torch.sign(torch.det(q))
    d_in1 = e3nn_o3.Irreps(str(conv.irreps_in1)).D_from_matrix(rot)
    d_out = e3nn_o3.Irreps(str(conv.irreps_out)).D_from_matrix(rot)
    out = conv(x, ops.spherical_harmonics(vec, 2), w, src, dst, n)
    out_rot = conv(x @ d_in1.T, ops.spherical_harmonics(vec @ rot.T, 2), w, src, dst, n)
    assert torch.allclose(out @ d_out.T, out_rot, atol=1e-12)


def test_graph_edge_cases():
    conv = _small_conv()
    gen = torch.Generator().manual_seed(7)
    n = 300
    # node 0 receives from everyone (hundreds of neighbours), node 1 has a single edge, others none
    src = torch.cat([torch.arange(1, n), torch.tensor([5])])
    dst = torch.cat([torch.zeros(n - 1, dtype=torch.int64), torch.tensor([1])])
    e = src.numel()
    x = torch.randn(n, conv.dim_in1, dtype=torch.float64, generator=gen)
    y = torch.randn(e, conv.dim_in2, dtype=torch.float64, generator=gen)
    w = torch.randn(e, conv.weight_numel, dtype=torch.float64, generator=gen)
    out = conv(x, y, w, src, dst, n)
    ir1, ir2, iro = (e3nn_o3.Irreps(str(i)) for i in (conv.irreps_in1, conv.irreps_in2, conv.irreps_out))
    ins = [(0, 0, 0, "uvu", True), (0, 1, 1, "uvu", True), (1, 0, 2, "uvu", True), (1, 1, 3, "uvu", True),
           (1, 2, 4, "uvu", True)]
    ref = _e3nn_conv(ir1, ir2, iro, ins, x, y, w, src, dst, n)
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.all(out[2:] == 0)
    # empty graph: zeros, and gradients flow (as zeros)
    empty = torch.zeros(0, dtype=torch.int64)
    xe = x.clone().requires_grad_()
    out0 = conv(xe, y[:0], w[:0], empty, empty, n)
    assert out0.shape == (n, conv.dim_out) and torch.all(out0 == 0)
    (gx,) = torch.autograd.grad(out0.sum(), xe, allow_unused=True)
    assert gx is None or torch.all(gx == 0)


def test_cg_values_exact_after_a_float32_round_trip():
    """The CG values (cg_val for the CUDA op and its generated kernels, the dense blocks of the
    reference) follow the module's dtype from the exact float64 ones: after float32 and back they
    equal a fresh module's bit for bit, and so does the output; in float32 they are the rounding."""
    conv, fresh = _small_conv(), _small_conv()
    exact = fresh.cg_val.clone()
    assert exact.dtype == torch.float64 and torch.equal(exact, torch.tensor(conv.cg_values, dtype=torch.float64))
    conv.float()
    assert torch.equal(conv.cg_val, exact.float())
    assert all(c.dtype == torch.float32 for c in conv.cg_dense)
    conv.double()
    assert torch.equal(conv.cg_val, exact)
    assert all(torch.equal(a, b) for a, b in zip(conv.cg_dense, fresh.cg_dense))
    n, e = 12, 60
    src, dst, args = _random_case(conv, 9, n, e)
    assert torch.equal(conv(*args, src, dst, n), fresh(*args, src, dst, n))


def test_float32_matches_float64():
    conv = _small_conv()
    n, e = 20, 120
    src, dst, args64 = _random_case(conv, 8, n, e)
    out64 = conv(*args64, src, dst, n)
    out32 = conv.float()(*[a.float() for a in args64], src, dst, n)
    assert out32.dtype == torch.float32
    assert torch.allclose(out32.double(), out64, rtol=1e-5, atol=1e-5 * out64.abs().max().item())


def test_clear_errors():
    conv = _small_conv()
    n, e = 4, 5
    x = torch.randn(n, conv.dim_in1, dtype=torch.float64)
    y = torch.randn(e, conv.dim_in2, dtype=torch.float64)
    w = torch.randn(e, conv.weight_numel, dtype=torch.float64)
    src = torch.zeros(e, dtype=torch.int64)
    with pytest.raises(ValueError, match="x must be"):
        conv(x[:, :-1], y, w, src, src, n)
    with pytest.raises(ValueError, match="edge_attr"):
        conv(x, y[:, :-1], w, src, src, n)
    with pytest.raises(ValueError, match="edge_weights"):
        conv(x, y, w[:, 1:], src, src, n)
    with pytest.raises(TypeError, match="dtype"):
        conv(x, y.float(), w, src, src, n)
    with pytest.raises(TypeError, match="integer"):
        conv(x, y, w, src.double(), src, n)
    with pytest.raises(ValueError, match="num_nodes"):
        conv(x, y, w, src, src, n + 1)
    with pytest.raises(ValueError, match="does not contain"):
        TensorProductConv("1x1o", "1x1o", "1x2o", [(0, 0, 0, "uvu", True)])
    with pytest.raises(NotImplementedError, match="uvu"):
        TensorProductConv("1x0e", "1x0e", "1x0e", [(0, 0, 0, "uvw", True)])
    with pytest.raises(ValueError, match="mul_out"):
        TensorProductConv("2x0e", "1x0e", "3x0e", [(0, 0, 0, "uvu", True)])


def test_torchscript_and_compile():
    conv = _small_conv()
    scripted = torch.jit.script(conv)
    n, e = 5, 11
    src, dst, args = _random_case(conv, 9, n, e)
    assert torch.equal(scripted(*args, src, dst, n), conv(*args, src, dst, n))
    g = build_graph(src, dst, n)

    def f(x, y, w):
        return torch.ops.md_accel.tp_conv_fwd(x, y, w, g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr,
                                              conv.paths, conv.cg_ptr, conv.cg_idx, conv.cg_val, conv.dim_out)

    y, w = args[1][g.perm], args[2][g.perm]
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(args[0], y, w), f(args[0], y, w), rtol=0, atol=0)
