"""md_accel's symmetric contraction against mace-torch's own ``SymmetricContraction`` (float64):
outputs, first and second derivatives, TorchScript. Runs where mace-torch 0.3.16 is installed
(``.venv-mace``); skipped elsewhere."""
from pathlib import Path

import pytest
import torch

mace_sc = pytest.importorskip("mace.modules.symmetric_contraction")
from e3nn import o3  # noqa: E402  (after mace: it sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD)

from md_accel.ops.symmetric_contraction import SymmetricContraction  # noqa: E402

TOL = 1e-12
CU_MODEL = Path(__file__).resolve().parents[2] / "models" / "mace_cu" / "mace_cu.model"


def extract(sc):
    """(in_dims, u, w) from a mace SymmetricContraction: what a converter copies."""
    in_dims = [ir.dim for _, ir in sc.irreps_in]
    u, w = [], []
    for c in sc.contractions:
        u.append([getattr(c, f"U_matrix_{nu}") for nu in range(1, c.correlation + 1)])
        # c.weights[j] belongs to order correlation - 1 - j; weights_max to the top order
        w.append([c.weights[c.correlation - 1 - nu] for nu in range(1, c.correlation)]
                 + [c.weights_max])
    return in_dims, u, w


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _inputs(irreps_in, num_elements, n=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    irreps_in = o3.Irreps(irreps_in)
    c = irreps_in[0].mul
    x = torch.randn(n, c, sum(ir.dim for _, ir in irreps_in), generator=g, dtype=torch.float64)
    species = torch.randint(num_elements, (n,), generator=g)
    species[:num_elements] = torch.arange(num_elements)
    return x, species


def _flatten(x, in_dims):
    """[N, C, I] -> [N, C*I] in e3nn block layout (block-major, channel, component)."""
    n, c, _ = x.shape
    return torch.cat([b.reshape(n, c * b.shape[-1]) for b in torch.split(x, in_dims, dim=2)], 1)


CASES = [  # (irreps_in, irreps_out, correlation, num_elements)
    ("6x0e+6x1o+6x2e+6x3o", "6x0e+6x1o", 3, 3),  # MACE-MP-0 medium's layer 1 shape
    ("5x0e+5x1o+5x2e", "5x0e+5x1o+5x2e", 2, 2),
    ("4x0e+4x1o+4x1e+4x0o", "4x0e+4x1o+4x0o", 3, 2),  # mixed parities
    ("3x0e+3x1o", "3x0e+3x1e", 1, 2),  # 1e unreachable at nu = 1: mace zeroes it
]


@pytest.mark.parametrize("irreps_in,irreps_out,correlation,num_elements", CASES)
def test_matches_mace(float64, irreps_in, irreps_out, correlation, num_elements):
    ref = mace_sc.SymmetricContraction(irreps_in, irreps_out, correlation,
                                       num_elements=num_elements, use_reduced_cg=False)
    in_dims, u, w = extract(ref)
    ours = SymmetricContraction.from_tensors(in_dims, u, w)
    x, species = _inputs(irreps_in, num_elements)
    onehot = torch.nn.functional.one_hot(species, num_elements).double()

    xr = x.clone().requires_grad_(True)
    xo = _flatten(x, in_dims).requires_grad_(True)
    out_ref = ref(xr, onehot)
    out = ours(xo, species)
    assert out.shape == out_ref.shape
    assert rel_err(out, out_ref) <= TOL

    # first derivatives (w.r.t. input and weights) with a random cotangent
    # (mace freezes the weights of orders that cannot reach an output irrep: U = 0 there)
    pairs = [(o.w, p) for c, ps in zip(ours.contractions, w)
             for o, p in zip(reversed(list(c.orders)), ps) if p.requires_grad]
    w_our, w_ref = [a for a, _ in pairs], [b for _, b in pairs]
    g = torch.randn_like(out_ref)
    gx_ref, *gw_ref = torch.autograd.grad(out_ref, [xr] + w_ref, g, create_graph=True)
    gx, *gw = torch.autograd.grad(out, [xo] + w_our, g, create_graph=True)
    assert rel_err(gx, _flatten(gx_ref, in_dims)) <= TOL
    for a, b in zip(gw, gw_ref):
        assert rel_err(a, b) <= TOL

    if correlation == 1:  # linear in x: no second derivative
        return
    # second derivatives: d<grad_x, v>/d(x, W)
    v = torch.randn_like(x)
    ggx_ref, *ggw_ref = torch.autograd.grad((gx_ref * v).sum(), [xr] + w_ref, allow_unused=True)
    ggx, *ggw = torch.autograd.grad((gx * _flatten(v, in_dims)).sum(), [xo] + w_our,
                                    allow_unused=True)
    assert rel_err(ggx, _flatten(ggx_ref, in_dims)) <= TOL
    for a, b in zip(ggw, ggw_ref):
        assert rel_err(a, b) <= TOL


def test_torchscript_and_rebuild(float64, tmp_path):
    ref = mace_sc.SymmetricContraction("4x0e+4x1o+4x2e", "4x0e+4x1o", 3, num_elements=2,
                                       use_reduced_cg=False)
    in_dims, u, w = extract(ref)
    ours = SymmetricContraction.from_tensors(in_dims, u, w)
    # rebuilt from shapes alone + state_dict (what loading a converted model does)
    again = SymmetricContraction(ours.in_dims, ours.out_dims, ours.channels, 2,
                                 [[t.shape[-1] for t in ur] for ur in u])
    again.load_state_dict(ours.state_dict())
    scripted = torch.jit.script(again)
    path = tmp_path / "sc.pt"
    scripted.save(str(path))
    loaded = torch.jit.load(str(path))
    x, species = _inputs("4x0e+4x1o+4x2e", 2)
    onehot = torch.nn.functional.one_hot(species, 2).double()
    expected = ref(x, onehot)
    assert rel_err(loaded(_flatten(x, in_dims), species), expected) <= TOL


@pytest.mark.skipif(not CU_MODEL.exists(), reason="models/mace_cu/mace_cu.model not built")
def test_trained_cu_model_products(float64):
    model = torch.load(CU_MODEL, weights_only=False, map_location="cpu")
    for product in model.products:
        ref = product.symmetric_contractions
        in_dims, u, w = extract(ref)
        ours = SymmetricContraction.from_tensors(in_dims, u, w)
        x, species = _inputs(ref.irreps_in, 1, n=5, seed=3)
        expected = ref(x, torch.ones(len(species), 1))
        assert rel_err(ours(_flatten(x, in_dims), species), expected) <= TOL
