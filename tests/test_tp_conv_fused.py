"""The radial MLP's last layer fused into the tensor-product convolution (``forward_fused``,
``md_accel::tp_conv_fused_{fwd,bwd}``) on the CPU: the reference path against e3nn, the ops'
autograd to second order, the MLP split, the kernel generator's group partition, and the model
layers' fused branch against their plain one. Kernels: test_tp_conv_fused_emulated.py (CPU) and
tests/gpu/test_tp_conv_fused_cuda.py."""
import random
import sys
from pathlib import Path

import pytest
import torch

import md_accel.ops  # noqa: F401  (registers the ops)
from md_accel.model.radial import RadialMLP
from md_accel.model.scalar_mlp import ScalarMLP
from md_accel.ops import TensorProductConv, _codegen, _codegen_fused, build_graph
from md_accel.ops.tp_problem import TPProblem
from md_accel.ops.tp_reference import tp_conv_fwd_ref

OPS = torch.ops.md_accel


@pytest.fixture(autouse=True)
def _float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _conv_and_inputs(seed, n=7, e=30, hidden=5):
    """A random 'uvu' problem (irreps up to l=2) and inputs; w = hidden @ W."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    in1 = [(rng.randint(1, 4), l, p) for l in range(3) for p in (1, -1) if rng.random() < 0.6] or [(2, 0, 1)]
    irreps_in1 = "+".join(f"{m}x{l}{'e' if p == 1 else 'o'}" for m, l, p in in1)
    outs, ins = [], []
    for a, (m, l1, p1) in enumerate(in1):
        for b, l2 in enumerate(range(3)):
            for l3 in range(abs(l1 - l2), min(l1 + l2, 2) + 1):
                if rng.random() < 0.8:
                    ins.append((a, b, len(outs), "uvu", True))
                    outs.append(f"{m}x{l3}{'e' if p1 * (-1) ** l2 == 1 else 'o'}")
    if not ins:
        ins, outs = [(0, 0, 0, "uvu", True)], [f"{in1[0][0]}x{in1[0][1]}{'e' if in1[0][2] == 1 else 'o'}"]
    conv = TensorProductConv(irreps_in1, "1x0e+1x1o+1x2e", "+".join(outs), ins)
    x = torch.randn(n, conv.dim_in1, generator=gen)
    y = torch.randn(e, conv.dim_in2, generator=gen)
    h = torch.randn(e, hidden, generator=gen)
    W = torch.randn(hidden, conv.weight_numel, generator=gen)
    src, dst = torch.randint(0, n, (e,), generator=gen), torch.randint(0, n, (e,), generator=gen)
    return conv, (x, y, h, W), src, dst, n


@pytest.mark.parametrize("seed", range(4))
def test_forward_fused_matches_e3nn(seed):
    """Values and gradients (hidden, W_last included) of the CPU path against e3nn's product."""
    o3 = pytest.importorskip("e3nn.o3")
    conv, inputs, src, dst, n = _conv_and_inputs(seed)
    ins = [(i.i_in1, i.i_in2, i.i_out, "uvu", True) for i in conv.problem.instructions]
    tp = o3.TensorProduct(str(conv.irreps_in1), str(conv.irreps_in2), str(conv.irreps_out), ins,
                          shared_weights=False, internal_weights=False)
    a = [t.clone().requires_grad_() for t in inputs]
    b = [t.clone().requires_grad_() for t in inputs]
    ours = conv.forward_fused(*a, src, dst, n)
    ref = torch.zeros(n, tp.irreps_out.dim).index_add(0, dst, tp(b[0][src], b[1], b[2] @ b[3]))
    assert (ours - ref).abs().max() <= 1e-12 * ref.abs().max()
    probe = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed))
    for ga, gb in zip(torch.autograd.grad((ours * probe).sum(), a), torch.autograd.grad((ref * probe).sum(), b)):
        assert (ga - gb).abs().max() <= 1e-11 * gb.abs().max()


def _op_args(seed):
    """A small fixed problem (gradcheck cost grows with the input size) and receiver-sorted inputs."""
    conv = TensorProductConv("2x0e+2x1o", "1x0e+1x1o+1x2e", "2x0e+2x1e+2x2e+2x1o",
                             [(0, 0, 0, "uvu", True), (1, 1, 1, "uvu", True), (0, 2, 2, "uvu", True),
                              (1, 2, 3, "uvu", True)])
    gen = torch.Generator().manual_seed(seed)
    n, e, hidden = 4, 7, 3
    x, y, h, W = (torch.randn(*s, generator=gen) for s in ((n, conv.dim_in1), (e, conv.dim_in2), (e, hidden),
                                                          (hidden, conv.weight_numel)))
    src, dst = torch.randint(0, n, (e,), generator=gen), torch.randint(0, n, (e,), generator=gen)
    g = build_graph(src, dst, n)
    y, h = y[g.perm], h[g.perm]  # the ops take receiver-sorted edges
    rest = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr, conv.paths, conv.cg_ptr, conv.cg_idx, conv.cg_val)
    return conv, (x, y, h, W), rest


@pytest.mark.parametrize("seed", [0, 1])
def test_fused_op_gradients_to_second_order(seed):
    """The op's autograd (fused backward, composed double backward) by finite differences, with
    W_last trainable and frozen (the backward then skips grad_W_last)."""
    conv, (x, y, h, W), rest = _op_args(seed)
    fwd = lambda x, y, h, W: OPS.tp_conv_fused_fwd(x, y, h, W, *rest, conv.dim_out)  # noqa: E731
    args = [t.clone().requires_grad_() for t in (x, y, h, W)]
    assert torch.autograd.gradcheck(fwd, args)
    assert torch.autograd.gradgradcheck(fwd, args)
    frozen = W.clone()
    assert torch.autograd.gradgradcheck(lambda x, y, h: fwd(x, y, h, frozen), args[:3])


def test_fused_op_second_order_with_a_constant_probe():
    """Second order with a grad_out that needs no gradient (a Hessian-vector product of a fixed readout):
    the composed double backward then skips g_grad_out; equal to autograd through the reference."""
    conv, (x, y, h, W), rest = _op_args(4)
    a = [t.clone().requires_grad_() for t in (x, y, h, W)]
    b = [t.clone().requires_grad_() for t in (x, y, h, W)]
    g = rest[:5]
    ours = OPS.tp_conv_fused_fwd(*a, *rest, conv.dim_out)
    ref = tp_conv_fwd_ref(b[0], b[1], b[2] @ b[3], g[0], g[1], x.shape[0], conv.path_list, conv.cg_dense,
                          conv.dim_out)
    gen = torch.Generator().manual_seed(5)
    probe = torch.randn(ours.shape, generator=gen)
    first_a = torch.autograd.grad((ours * probe).sum(), a, create_graph=True)
    first_b = torch.autograd.grad((ref * probe).sum(), b, create_graph=True)
    probes2 = [torch.randn(t.shape, generator=gen) for t in first_a]
    second_a = torch.autograd.grad(sum((f * q).sum() for f, q in zip(first_a, probes2)), a)
    second_b = torch.autograd.grad(sum((f * q).sum() for f, q in zip(first_b, probes2)), b)
    for sa, sb in zip(second_a, second_b):
        assert (sa - sb).abs().max() <= 1e-11 * sb.abs().max()


def test_fused_bwd_op_equals_autograd_of_reference():
    conv, (x, y, h, W), rest = _op_args(2)
    args = [t.clone().requires_grad_() for t in (x, y, h, W)]
    g = rest[:5]
    out = tp_conv_fwd_ref(args[0], args[1], args[2] @ args[3], g[0], g[1], x.shape[0], conv.path_list,
                          conv.cg_dense, conv.dim_out)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    want = torch.autograd.grad((out * go).sum(), args)
    got = OPS.tp_conv_fused_bwd(go, x, y, h, W, *rest, True)
    for a, b in zip(got, want):
        assert (a - b).abs().max() <= 1e-12 * b.abs().max()
    assert OPS.tp_conv_fused_bwd(go, x, y, h, W, *rest, False)[3].shape == (0, W.shape[1])


@pytest.mark.parametrize("make", [lambda: RadialMLP([8, 16, 16, 24], "silu"), lambda: RadialMLP([8, 12], "silu"),
                                  lambda: ScalarMLP([8, 16, 24], [0.5, 0.25], "silu")],
                         ids=["radial", "one_layer", "scalar"])
def test_mlp_is_hidden_times_last_weight(make):
    mlp = make()

    class Split(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, r):
            return self.m(r) - self.m.hidden(r) @ self.m.last_weight()

    r = torch.randn(11, 8, generator=torch.Generator().manual_seed(4))
    assert torch.equal(Split(mlp)(r), torch.zeros(11, mlp.hs[-1]))
    assert torch.equal(torch.jit.script(Split(mlp))(r), torch.zeros(11, mlp.hs[-1]))


def _workloads():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from workloads import WORKLOADS

    return WORKLOADS


@pytest.mark.parametrize("name", ["mace_mp0_medium", "sevennet_0", "sevennet_l3i5", "nequip_l3"])
def test_fused_partition(name):
    """Each live path in one group of one multiplicity; output and weight blocks never split;
    float32 W tiles and backward shared memory within their budgets; the source generates."""
    w = _workloads()[name]
    plan = TPProblem.create(w.irreps_in1, w.irreps_in2, w.irreps_out, w.instructions).lower()
    struct = _codegen.plan_structure(plan)
    _, live, _, nnz = _codegen._analyse(struct)
    for esize in (4, 8):
        groups = _codegen_fused.partition(live, esize, 64, nnz)
        assert sorted(p.idx for g in groups for p in g.paths) == sorted(p.idx for p in live)
        for g in groups:
            assert len({p.mul for p in g.paths}) == 1
            for other in groups:
                if other is not g:
                    assert not {p.out_key for p in g.paths} & {p.out_key for p in other.paths}
                    assert not {p.w_key for p in g.paths} & {p.w_key for p in other.paths}
        if esize == 4:
            assert all(_codegen_fused._w_tile(g, 64, 4) * 4 <= _codegen_fused.W_TILE_BYTES for g in groups)
            _codegen_fused._layout(groups, nnz, 64, 4, bwd=True)
            assert _codegen_fused._smem_bytes(groups, nnz, 64, 4, True) <= _codegen_fused.BWD_SMEM_TARGET
    src = _codegen_fused.generate_fused(struct, 64)
    assert "fwd_s, fwd_d, bwd_s, bwd_d" in src
    for hidden in (8, 200):
        with pytest.raises(_codegen.Unsupported):
            _codegen_fused.generate_fused(struct, hidden)


def _fused_everywhere(pot):
    for layer in pot.layers:
        layer.conv.use_fused = lambda x, num_edges, graph=None: True  # the CPU path of forward_fused (the reference)


def test_sevennet_layers_fused_branch():
    """The NequIP-style layers give the same energies and forces through the fused branch."""
    pytest.importorskip("sevenn")
    from ase.build import bulk

    from md_accel.convert.sevenn import convert_sevenn
    from md_accel.convert.verify import evaluate_potential

    torch.set_default_dtype(torch.float32)  # sevenn's checkpoint loading expects it (the fixture restores)
    pot = convert_sevenn("sevennet-0", dtype=torch.float64)
    assert all(layer.conv.fused_hidden == layer.radial_mlp.hs[-2] for layer in pot.layers)
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 1, 1))
    atoms.rattle(0.05, seed=0)
    plain = evaluate_potential(pot, atoms)
    _fused_everywhere(pot)
    fused = evaluate_potential(pot, atoms)
    for q in ("energy", "forces", "stress"):
        assert abs(fused[q] - plain[q]).max() <= 1e-10 * max(abs(plain[q]).max(), 1.0), q


def test_mace_layers_fused_branch(tmp_path):
    """MACE layers (apply_cutoff False: the envelope scales the hidden rows) through the fused branch."""
    pytest.importorskip("mace.modules")
    import importlib.util

    from md_accel.convert.mace import convert_mace
    from md_accel.convert.structures import cluster
    from md_accel.convert.verify import evaluate_potential

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("build_mace", root / "models" / "build_mace_mp0_medium_shape.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    pot = convert_mace(builder.build("small", seed=3, apply_cutoff=False, max_ell=2))  # float64 default: as mace
    assert all(layer.cutoff_weights for layer in pot.layers)
    atoms = cluster(["Cu", "O", "H"], __import__("numpy").random.default_rng(5), n=6)
    plain = evaluate_potential(pot, atoms)
    _fused_everywhere(pot)
    fused = evaluate_potential(pot, atoms)
    for q in ("energy", "forces"):
        assert abs(fused[q] - plain[q]).max() <= 1e-10 * max(abs(plain[q]).max(), 1.0), q
