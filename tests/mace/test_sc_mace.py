"""The sparse symmetric contraction (md_accel/ops/sc_reference.py) and its kernels against mace-torch's
own ``SymmetricContraction`` on mace's real coupling tensors (float64): the explicit backward and
double backward of the custom ops, the sparsity of the term list, and the generated + generic
kernels emulated on the host for the MACE-MP-0-medium shape. Runs where mace-torch 0.3.16 is
installed (``.venv-mace``); skipped elsewhere."""
import shutil

import pytest
import torch

mace_sc = pytest.importorskip("mace.modules.symmetric_contraction")
from e3nn import o3  # noqa: E402  (after mace: it sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD)

import md_accel.ops  # noqa: E402,F401  (registers the custom ops)
from md_accel.ops.symmetric_contraction import SymmetricContraction  # noqa: E402
from sc_testing import HostKernels, rel_err  # noqa: E402
from test_symmetric_contraction import _flatten, extract  # noqa: E402

OPS = torch.ops.md_accel
MP0 = ("4x0e+4x1o+4x2e+4x3o", "4x0e+4x1o", 3, 3)  # MACE-MP-0 medium's layer-1 shape, 4 channels
CASES = [MP0, ("5x0e+5x1o+5x2e", "5x0e+5x1o+5x2e", 2, 2), ("4x0e+4x1o+4x1e+4x0o", "4x0e+4x1o+4x0o", 3, 2)]


@pytest.fixture(scope="module", autouse=True)
def _float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


_PAIRS = {}


def _pair(irreps_in, irreps_out, correlation, num_elements, seed=0):
    """(mace's module with random weights, md_accel's from its tensors); built once per case (mace's
    coupling tensors take seconds)."""
    key = (irreps_in, irreps_out, correlation, num_elements, seed)
    if key not in _PAIRS:
        _PAIRS[key] = _new_pair(*key)
    return _PAIRS[key]


def _new_pair(irreps_in, irreps_out, correlation, num_elements, seed):
    torch.manual_seed(seed)
    ref = mace_sc.SymmetricContraction(irreps_in, irreps_out, correlation, num_elements=num_elements,
                                       use_reduced_cg=False)
    with torch.no_grad():  # mace initialises the weights small; make every order matter
        for c in ref.contractions:
            for p in [c.weights_max, *c.weights]:
                p.normal_()
    in_dims, u, w = extract(ref)
    return ref, SymmetricContraction.from_tensors(in_dims, u, w)


def _inputs(ref, num_elements, n=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    irreps = o3.Irreps(ref.irreps_in)
    x = torch.randn(n, irreps[0].mul, irreps.dim // irreps[0].mul, generator=g)
    species = torch.randint(num_elements, (n,), generator=g)
    species[:num_elements] = torch.arange(num_elements)
    return x, species


def _weights_ref(ref, ours):
    """mace's weight parameters in the order of ``ours.weights()`` columns (irrep, highest order first)."""
    out = []
    for c in ref.contractions:
        out += [c.weights_max] + [c.weights[c.correlation - 1 - nu] for nu in range(c.correlation - 1, 0, -1)]
    return out


def _grad(out, inputs, grad_out=None, create_graph=False):
    """``torch.autograd.grad`` with zeros for inputs that need no gradient (mace's frozen weights of
    orders that cannot reach an output: their U is zero)."""
    live = [t for t in inputs if t.requires_grad]
    got = iter(torch.autograd.grad(out, live, grad_out, create_graph=create_graph, allow_unused=True))
    res = []
    for t in inputs:
        r = next(got) if t.requires_grad else None
        res.append(torch.zeros_like(t) if r is None else r)
    return res


@pytest.mark.parametrize("irreps_in,irreps_out,correlation,num_elements", CASES)
def test_ops_match_mace_derivatives(irreps_in, irreps_out, correlation, num_elements):
    ref, ours = _pair(irreps_in, irreps_out, correlation, num_elements)
    x, species = _inputs(ref, num_elements)
    onehot = torch.nn.functional.one_hot(species, num_elements).double()
    xr = x.clone().requires_grad_(True)
    out_ref = ref(xr, onehot)
    xs, w = _flatten(x, ours.in_dims), ours.weights().detach()
    args = (ours.sc_terms, ours.sc_values, ours.in_dims, ours.out_dims)
    assert rel_err(OPS.symmetric_contraction_fwd(xs, species, w, *args), out_ref) <= 1e-12

    wref = _weights_ref(ref, ours)
    g = torch.randn_like(out_ref).requires_grad_(True)
    gx_ref, *gw_ref = _grad(out_ref, [xr] + wref, g, create_graph=True)
    gx, gw = OPS.symmetric_contraction_bwd(g.detach(), xs, species, w, *args, True)
    assert rel_err(gx, _flatten(gx_ref, ours.in_dims)) <= 1e-12
    assert rel_err(gw, torch.cat(gw_ref, dim=1)) <= 1e-12

    hx = torch.randn_like(x)
    hw = torch.randn_like(w)
    hw_parts = torch.split(hw, [t.shape[1] for t in wref], dim=1)
    loss = (gx_ref * hx).sum() + sum((a * b).sum() for a, b in zip(gw_ref, hw_parts))
    ggo_ref, ggx_ref, *ggw_ref = _grad(loss, [g, xr] + wref)
    ggo, ggx, ggw = OPS.symmetric_contraction_dbwd(_flatten(hx, ours.in_dims), hw, g.detach(), xs, species, w,
                                                    *args)
    assert rel_err(ggo, ggo_ref) <= 1e-12
    assert rel_err(ggx, _flatten(ggx_ref, ours.in_dims)) <= 1e-12
    assert rel_err(ggw, torch.cat(ggw_ref, dim=1)) <= 1e-12


def test_mp0_term_list_is_sparse():
    _, ours = _pair(*MP0)
    dense = sum(o.u.numel() for c in ours.contractions for o in c.orders)
    nnz = sum(int((o.u != 0).sum()) for c in ours.contractions for o in c.orders)
    terms = ours.sc_terms.shape[0]
    # U: 720,896 entries of which 3,289 non-zero; symmetrised: ~1,900 terms
    assert nnz < 0.005 * dense and terms < 0.6 * nnz


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_generated_kernels_on_host_mp0(tmp_path):
    ref, ours = _pair(*MP0)
    kernels = HostKernels(ours, tmp_path, opt="-O0")
    x, species = _inputs(ref, 3, n=7)
    onehot = torch.nn.functional.one_hot(species, 3).double()
    xr = x.clone().requires_grad_(True)
    out_ref = ref(xr, onehot)
    g = torch.randn_like(out_ref)
    wref = _weights_ref(ref, ours)
    gx_ref, *gw_ref = _grad(out_ref, [xr] + wref, g)
    xs, w = _flatten(x, ours.in_dims), ours.weights().detach()
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        for generic in (False, True):
            out = kernels.run(0, xs.to(dtype), species, w.to(dtype), generic=generic)[0]
            _, gx, gw = kernels.run(1, xs.to(dtype), species, w.to(dtype), g=g.to(dtype), generic=generic)
            assert rel_err(out, out_ref) <= tol
            assert rel_err(gx, _flatten(gx_ref, ours.in_dims)) <= tol
            assert rel_err(gw, torch.cat(gw_ref, dim=1)) <= tol
