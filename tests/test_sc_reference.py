"""MACE's symmetric contraction: the sparse term list (md_accel/ops/sc_reference.py, the
specification) against the dense U-tensor contraction (mace's Horner form, written out here),
the explicit backward / double backward against autograd, the custom ops (gradcheck), the
module (state dict, loading, dtype, TorchScript, md_accel.io), and the generated and generic
kernels run on the host (csrc/sc_kernels.cuh's emulation, compiled with g++). The comparison
with mace-torch itself is in tests/mace/test_sc_mace.py."""
import shutil
from typing import Dict, List, Optional

import pytest
import torch

from md_accel.model import Potential, register
from md_accel.ops import Graph
from md_accel.ops.sc_reference import (components, lower, reference_tables, sc_bwd_ref, sc_dbwd_ref,
                                       sc_fwd_ref)
from md_accel.ops.symmetric_contraction import SymmetricContraction

from sc_testing import HostKernels, random_coupling, random_weights, rel_err

OPS = torch.ops.md_accel


# --- helpers ------------------------------------------------------------------------------------

def dense_reference(u, w, x, species, in_dims):
    """The dense contraction (md_accel's former implementation = mace's Horner form): per irrep,
    ``out = sum_i1 x_i1 (B_1 + sum_i2 x_i2 (B_2 + ..))``, ``B_nu = U_nu . W_nu[species]``,
    the last U index contracted first; top order as one GEMM."""
    xs = components(x, in_dims)
    n, c, i = xs.shape
    outs = []
    for ur, wr in zip(u, w):
        out = None
        for ut, wt in zip(reversed(ur), reversed(wr)):  # highest order first
            k = wt.shape[1]
            wsel = wt.index_select(0, species).transpose(1, 2)  # [N, C, K]
            z = (xs.unsqueeze(-1) * wsel.unsqueeze(2)).reshape(n, c, i * k)
            t = torch.matmul(z, ut.reshape(-1, i * k).t())
            if out is not None:
                t = t + torch.matmul(out.reshape(n, c, -1, i), xs.unsqueeze(-1)).squeeze(-1)
            out = t
        outs.append(out.reshape(n, -1))
    return torch.cat(outs, dim=1)


MP0 = dict(in_dims=[1, 3, 5, 7], out_dims=[1, 3], num_params=[[1, 4, 23], [1, 6, 51]],
           nnz=[[1, 16, 353], [3, 70, 2846]])  # MACE-MP-0 medium's layer-1 shape and sparsity
CASES = {
    "mp0_like": MP0,
    "l2_corr2": dict(in_dims=[1, 3, 5], out_dims=[1, 3, 5], num_params=[[1, 3], [1, 4], [1, 4]],
                     nnz=[[1, 9], [3, 28], [5, 46]]),
    "mixed_correlation": dict(in_dims=[1, 3], out_dims=[1, 3, 1], num_params=[[2, 3, 4], [2], [1, 2]],
                              nnz=[[2, 10, 40], [4], [1, 6]]),
    "dense_u": dict(in_dims=[1, 3], out_dims=[3], num_params=[[2, 2, 2]], nnz=[[None, None, None]]),
}


def module_for(case, channels=3, num_elements=3, seed=0):
    cfg = CASES[case]
    u = random_coupling(cfg["in_dims"], cfg["out_dims"], cfg["num_params"], cfg["nnz"], seed)
    w = random_weights(u, num_elements, channels, seed + 1)
    return SymmetricContraction.from_tensors(cfg["in_dims"], u, w), u, w


def inputs(module, n=8, num_elements=3, seed=2, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, module.channels * sum(module.in_dims), generator=gen, dtype=dtype)
    species = torch.randint(num_elements, (n,), generator=gen)
    species[:num_elements] = torch.arange(num_elements)
    return x, species


def tables(m: SymmetricContraction):
    return (m.ref_mono, m.ref_coeff, m.ref_group_k, m.ref_group_sel)


# --- the term list equals the dense contraction ---------------------------------------------------

@pytest.mark.parametrize("case", list(CASES))
def test_sparse_equals_dense(case):
    m, u, w = module_for(case)
    x, species = inputs(m)
    xr = x.clone().requires_grad_(True)
    xd = x.clone().requires_grad_(True)
    wd = [[t.clone().requires_grad_(True) for t in wr] for wr in w]
    out = m(xr, species)
    ref = dense_reference(u, wd, xd, species, m.in_dims)
    assert rel_err(out, ref) <= 1e-12

    # first derivatives (x and every weight), second derivative d<grad_x, v>/d(x, W)
    g = torch.randn_like(ref)
    ours_w = [o.w for c in m.contractions for o in reversed(list(c.orders))]
    ref_w = [t for wr in wd for t in wr]
    gx, *gw = torch.autograd.grad(out, [xr] + ours_w, g, create_graph=True)
    gx_ref, *gw_ref = torch.autograd.grad(ref, [xd] + ref_w, g, create_graph=True)
    assert rel_err(gx, gx_ref) <= 1e-12
    for a, b in zip(gw, gw_ref):
        assert rel_err(a, b) <= 1e-12
    v = torch.randn_like(x)
    hx, *hw = torch.autograd.grad((gx * v).sum(), [xr] + ours_w, allow_unused=True)
    hx_ref, *hw_ref = torch.autograd.grad((gx_ref * v).sum(), [xd] + ref_w, allow_unused=True)
    assert rel_err(hx, hx_ref) <= 1e-12
    for a, b in zip(hw, hw_ref):
        assert (a is None) == (b is None) and (a is None or rel_err(a, b) <= 1e-12)


def test_term_list_is_symmetrised_and_sparse():
    m, u, _ = module_for("mp0_like")
    terms, values = m.sc_terms, m.sc_values
    idx = terms[:, 2:]
    assert terms.dtype == torch.int32 and values.dtype == torch.float64
    # sorted monomials, -1 padding after the indices, unique (o, k, monomial), sorted by k
    for row in idx.tolist():
        used = [i for i in row if i >= 0]
        assert row[:len(used)] == sorted(used) and all(i == -1 for i in row[len(used):])
    assert torch.unique(terms, dim=0).shape[0] == terms.shape[0]
    assert bool((terms[1:, 1] >= terms[:-1, 1]).all())
    # at most the non-zeros of U (permutations merged), far fewer than U's entries
    nnz = sum(int((t != 0).sum()) for ur in u for t in ur)
    dense = sum(t.numel() for ur in u for t in ur)
    assert terms.shape[0] <= nnz and terms.shape[0] < 0.005 * dense


def test_cancelling_permutations_are_dropped():
    """An antisymmetric U contributes nothing to a symmetric product: no terms, zero output."""
    u = torch.randn(1, 4, 4, 2, dtype=torch.float64)
    u = u - u.transpose(1, 2)
    terms, values = lower([1, 3], [[u]])
    assert terms.shape == (0, 4) and values.shape == (0,)
    us = [[torch.zeros(1, 4, 1, dtype=torch.float64), u]]
    m = SymmetricContraction.from_tensors([1, 3], us, random_weights(us, 2, 3))
    assert m.sc_terms.shape[0] == 0
    x = torch.randn(5, 12, dtype=torch.float64)
    assert torch.equal(m(x, torch.zeros(5, dtype=torch.int64)), torch.zeros(5, 3, dtype=torch.float64))


# --- explicit gradients and the custom ops ---------------------------------------------------------

@pytest.mark.parametrize("case", ["mp0_like", "mixed_correlation"])
def test_explicit_gradients_equal_autograd(case):
    m, _, _ = module_for(case)
    x, species = inputs(m)
    w = m.weights().detach()
    t = tables(m)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    out = sc_fwd_ref(xr, species, wr, *t, m.in_dims, m.out_dims)
    g = torch.randn_like(out).requires_grad_(True)
    gx, gw = torch.autograd.grad(out, [xr, wr], g, create_graph=True)
    ex, ew = sc_bwd_ref(g.detach(), x, species, w, *t, m.in_dims, m.out_dims, True)
    assert rel_err(ex, gx) <= 1e-13 and rel_err(ew, gw) <= 1e-13
    assert torch.equal(sc_bwd_ref(g.detach(), x, species, w, *t, m.in_dims, m.out_dims, False)[1],
                       torch.zeros_like(w))
    hx, hw = torch.randn_like(x), torch.randn_like(w)
    want = torch.autograd.grad((gx * hx).sum() + (gw * hw).sum(), [g, xr, wr])
    got = sc_dbwd_ref(hx, hw, g.detach(), x, species, w, *t, m.in_dims, m.out_dims)
    for a, b in zip(got, want):
        assert rel_err(a, b) <= 1e-13


def test_ops_cpu_equal_reference_and_gradcheck():
    m, _, _ = module_for("mixed_correlation")
    x, species = inputs(m)
    w = m.weights().detach()
    args = (m.sc_terms, m.sc_values, m.in_dims, m.out_dims)
    assert torch.equal(OPS.symmetric_contraction_fwd(x, species, w, *args),
                       sc_fwd_ref(x, species, w, *tables(m), m.in_dims, m.out_dims))
    # a small case for the finite differences
    u = random_coupling([1, 3], [1, 3], [[1, 2, 2], [1, 2]], [[1, 5, 12], [3, 9]], seed=3)
    small = SymmetricContraction.from_tensors([1, 3], u, random_weights(u, 2, 2))
    x, species = inputs(small, n=3, num_elements=2)
    args = (small.sc_terms, small.sc_values, small.in_dims, small.out_dims)
    fn = lambda x, w: OPS.symmetric_contraction_fwd(x, species, w, *args)  # noqa: E731
    xr, wr = x.clone().requires_grad_(True), small.weights().detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (xr, wr))
    assert torch.autograd.gradgradcheck(fn, (xr, wr), fast_mode=True)
    # weights that need no gradient get none (the op skips their reduction)
    out = fn(xr, wr.detach())
    assert torch.autograd.grad(out.sum(), [xr])[0].shape == x.shape


def test_ops_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    m, _, _ = module_for("l2_corr2")
    x, species = inputs(m)
    w = m.weights().detach()
    with FakeTensorMode() as mode:
        fx, fs, fw = (mode.from_tensor(t) for t in (x, species, w))
        ft, fv = mode.from_tensor(m.sc_terms), mode.from_tensor(m.sc_values)
        out = OPS.symmetric_contraction_fwd(fx, fs, fw, ft, fv, m.in_dims, m.out_dims)
        assert out.shape == (x.shape[0], m.channels * sum(m.out_dims))
        gx, gw = OPS.symmetric_contraction_bwd(out, fx, fs, fw, ft, fv, m.in_dims, m.out_dims, True)
        assert gx.shape == x.shape and gw.shape == w.shape


def test_zero_nodes():
    m, _, _ = module_for("l2_corr2")
    x = torch.zeros(0, m.channels * 9, dtype=torch.float64, requires_grad=True)
    species = torch.zeros(0, dtype=torch.int64)
    out = m(x, species)
    assert out.shape == (0, m.channels * 9)
    gx, gw = OPS.symmetric_contraction_bwd(out.detach(), x.detach(), species, m.weights().detach(), m.sc_terms,
                                           m.sc_values, m.in_dims, m.out_dims, True)
    assert gx.shape == (0, m.channels * 9) and torch.equal(gw, torch.zeros_like(gw))


# --- the module ------------------------------------------------------------------------------------

def test_state_dict_keys_and_load_rebuilds_tables():
    m, u, _ = module_for("mixed_correlation")
    keys = set(m.state_dict())
    assert keys == {f"contractions.{r}.orders.{j}.{p}" for r, ur in enumerate(u) for j in range(len(ur))
                    for p in ("u", "w")}
    again = SymmetricContraction(m.in_dims, m.out_dims, m.channels, 3,
                                 [[t.shape[-1] for t in ur] for ur in u]).double()
    assert again.sc_terms.shape[0] == 0
    again.load_state_dict(m.state_dict())
    assert torch.equal(again.sc_terms, m.sc_terms) and torch.equal(again.sc_values, m.sc_values)
    x, species = inputs(m)
    assert torch.equal(again(x, species), m(x, species))
    fresh = SymmetricContraction(m.in_dims, m.out_dims, m.channels, 3, [[t.shape[-1] for t in ur] for ur in u])
    fresh.load_state_dict(m.state_dict(), assign=True)  # what md_accel.io.load does
    assert torch.equal(fresh(x, species), m(x, species))


def test_float32_module_keeps_float64_values():
    m, _, _ = module_for("mp0_like")
    x, species = inputs(m)
    ref = m(x, species)
    m32 = m.to(torch.float32)
    assert m32.sc_values.dtype == torch.float64 and m32.ref_coeff.dtype == torch.float32
    assert rel_err(m32(x.float(), species), ref) <= 1e-5


def test_torchscript_round_trip(tmp_path):
    m, _, _ = module_for("l2_corr2")
    x, species = inputs(m)
    path = tmp_path / "sc.pt"
    torch.jit.script(m).save(str(path))
    loaded = torch.jit.load(str(path))
    assert torch.equal(loaded(x, species), m(x, species))


@register("test_symmetric_contraction")
class _SCPotential(Potential):
    """Test-only potential: node features = per-receiver sum of ``edge_vec @ proj``, energy =
    sum of the symmetric contraction's outputs."""
    elements: List[str]
    cutoff: float
    num_layers: int

    def __init__(self, spec: Dict):
        super().__init__()
        self._spec = dict(spec)
        self.elements: List[str] = list(spec["elements"])
        self.cutoff = float(spec["cutoff"])
        self.num_layers = 1
        self.product = SymmetricContraction(spec["in_dims"], spec["out_dims"], spec["channels"],
                                            len(self.elements), spec["num_params"])
        self.register_buffer("proj", torch.zeros(3, spec["channels"] * sum(spec["in_dims"])))

    @classmethod
    def from_spec(cls, spec: Dict) -> "_SCPotential":
        return cls(spec)

    def spec(self) -> Dict:
        return dict(self._spec, type="test_symmetric_contraction")

    def node_energies(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor, graph: Optional[Graph] = None) -> torch.Tensor:
        feats = torch.zeros(species.shape[0], self.proj.shape[1], dtype=edge_vec.dtype, device=edge_vec.device)
        feats = feats.index_add(0, edge_dst, torch.matmul(edge_vec, self.proj))
        return self.product(feats, species).sum(1)


def test_io_round_trip(tmp_path):
    from md_accel import io as mio

    m, u, w = module_for("l2_corr2", num_elements=2)
    spec = {"elements": ["H", "O"], "cutoff": 3.0, "in_dims": m.in_dims, "out_dims": m.out_dims,
            "channels": m.channels, "num_params": [[t.shape[-1] for t in ur] for ur in u]}
    pot = _SCPotential(spec).double()
    pot.product.load_state_dict(m.state_dict())
    with torch.no_grad():
        pot.proj.copy_(torch.randn(pot.proj.shape, generator=torch.Generator().manual_seed(5)))
    path = tmp_path / "sc.mdx"
    mio.save(pot, path)
    loaded = mio.load(path)
    assert torch.equal(loaded.product.sc_terms, m.sc_terms)
    species = torch.tensor([0, 1, 1, 0])
    pos = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    src, dst = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    vec = pos[src] - pos[dst]
    expected = pot.node_energies(species, vec, src, dst)
    assert torch.equal(loaded.node_energies(species, vec, src, dst), expected)
    scripted = torch.jit.load(str(path))  # what the LAMMPS plugin runs
    assert torch.equal(scripted.node_energies(species, vec, src, dst), expected)


# --- generated and generic kernels, emulated on the host ---------------------------------------

@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    m, _, _ = module_for("mixed_correlation", channels=5, num_elements=3)
    return HostKernels(m, tmp_path_factory.mktemp("sc_host"))


@pytest.mark.parametrize("generic", [False, True], ids=["generated", "generic"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_host_kernels_match_reference(host_kernels, dtype, generic):
    m = host_kernels.m
    x, species = inputs(m, n=11)
    w = m.weights().detach()
    gen = torch.Generator().manual_seed(4)
    g = torch.randn(11, m.channels * sum(m.out_dims), generator=gen, dtype=torch.float64)
    hx, hw = torch.randn(x.shape, generator=gen, dtype=torch.float64), torch.randn(w.shape, generator=gen,
                                                                                   dtype=torch.float64)
    t = tables(m)
    want = [sc_fwd_ref(x, species, w, *t, m.in_dims, m.out_dims),
            *sc_bwd_ref(g, x, species, w, *t, m.in_dims, m.out_dims, True),
            *sc_dbwd_ref(hx, hw, g, x, species, w, *t, m.in_dims, m.out_dims)]
    X, W, G, HX, HW = (v.to(dtype) for v in (x, w, g, hx, hw))
    run = lambda *a, **k: host_kernels.run(*a, generic=generic, **k)  # noqa: E731
    out = run(0, X, species, W)[0]
    _, gx, gw = run(1, X, species, W, g=G)
    gx_only = run(1, X, species, W, g=G, need_w=False)[1]
    got = [out, gx, gw, *run(2, X, species, W, g=G, ggx=HX, ggw=HW)]
    tol = 1e-13 if dtype == torch.float64 else 2e-6
    for name, a, b in zip(("fwd", "grad_x", "grad_w", "g_grad_out", "g_x", "g_w"), got, want):
        assert rel_err(a, b) <= tol, (name, rel_err(a, b))
    assert torch.equal(gx_only, gx)


def test_host_kernels_edge_cases(host_kernels):
    m = host_kernels.m
    w = m.weights().detach()
    # species out of range: NaN rows (the chunked weight-gradient path included), others exact
    x, species = inputs(m, n=6)
    bad = species.clone()
    bad[2], bad[4] = -1, 3
    out = host_kernels.run(0, x, bad, w)[0]
    assert torch.isnan(out[[2, 4]]).all() and torch.equal(out[[0, 1, 3, 5]], host_kernels.run(0, x, species, w)[0][[0, 1, 3, 5]])
    g = torch.ones(6, m.channels * sum(m.out_dims), dtype=torch.float64)
    gx = host_kernels.run(1, x, bad, w, g=g)[1]
    assert torch.isnan(gx[[2, 4]]).all() and torch.isfinite(gx[[0, 1, 3, 5]]).all()
    # no nodes: nothing to compute, weight gradients are zeros
    x0, s0 = torch.zeros(0, x.shape[1], dtype=torch.float64), torch.zeros(0, dtype=torch.int64)
    g0 = torch.zeros(0, g.shape[1], dtype=torch.float64)
    for generic in (False, True):
        _, gx0, gw0 = host_kernels.run(1, x0, s0, w, g=g0, generic=generic)
        assert gx0.shape == x0.shape and torch.equal(gw0, torch.zeros_like(w))
    # an element without nodes gets a zero weight gradient
    one = torch.zeros(6, dtype=torch.int64)
    gw1 = host_kernels.run(1, x, one, w, g=g)[2]
    want = sc_bwd_ref(g, x, one, w, *tables(m), m.in_dims, m.out_dims, True)[1]
    assert torch.equal(gw1[1:], torch.zeros_like(gw1[1:])) and rel_err(gw1, want) <= 1e-13
