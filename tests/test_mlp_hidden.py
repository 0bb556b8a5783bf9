"""md_accel::mlp_hidden_* ops (CPU reference + autograd) against the radial MLPs' layer loop
(``RadialMLP`` = e3nn ``FullyConnectedNet``, see test_model_blocks; NequIP's ``ScalarMLP``),
autograd of the reference, and finite differences, in float64."""
import pytest
import torch

from md_accel.model.radial import RadialMLP
from md_accel.model.scalar_mlp import ScalarMLP
from md_accel.ops._op_registry import defined_in_cpp
from md_accel.ops.mlp_reference import mlp_hidden_bwd_ref, mlp_hidden_fwd_ref

OPS = torch.ops.md_accel
F64 = torch.float64

MLPS = {
    "mace": lambda: RadialMLP([8, 64, 64, 64, 40], "silu"),
    "sevennet": lambda: RadialMLP([8, 64, 64, 30], "silu"),
    "one_hidden": lambda: RadialMLP([5, 24, 7], "silu"),
    "nequip_scalar": lambda: ScalarMLP([8, 16, 16, 12], [0.5, 0.25, 0.125], "silu"),
}


def mlp(name: str, seed: int = 0):
    torch.manual_seed(seed)
    return MLPS[name]().double()


def hidden_weights(m):
    return [layer.scaled_weight() for layer in list(m.layers)[:-1]]


def layer_loop(m, x):
    for layer in list(m.layers)[:-1]:
        x = layer(x)
    return x


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    if a.numel() == 0:
        return 0.0
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


@pytest.mark.parametrize("name", list(MLPS))
def test_op_and_reference_equal_layer_loop(name):
    m = mlp(name)
    x = torch.randn(37, m.hs[0], dtype=F64)
    want = layer_loop(m, x)
    ws = hidden_weights(m)
    assert rel_err(mlp_hidden_fwd_ref(x, ws, m.hidden_cst), want) <= 1e-14
    assert rel_err(OPS.mlp_hidden_fwd(x, ws, m.hidden_cst), want) <= 1e-14
    assert rel_err(m.hidden(x), want) <= 1e-14


@pytest.mark.parametrize("name", list(MLPS))
def test_bwd_is_gradient_of_fwd(name):
    m = mlp(name, seed=1)
    x = torch.randn(29, m.hs[0], dtype=F64, requires_grad=True)
    ws = [w.detach() for w in hidden_weights(m)]
    g = torch.randn(29, m.hs[-2], dtype=F64)
    (want,) = torch.autograd.grad(layer_loop(m, x), x, g)
    assert rel_err(mlp_hidden_bwd_ref(x.detach(), g, ws, m.hidden_cst), want) <= 1e-13
    assert rel_err(OPS.mlp_hidden_bwd(x.detach(), g, ws, m.hidden_cst), want) <= 1e-13


def test_gradcheck_and_gradgradcheck():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(6, 5, dtype=F64, generator=gen, requires_grad=True)
    ws = [torch.randn(5, 7, dtype=F64, generator=gen, requires_grad=True),
          torch.randn(7, 4, dtype=F64, generator=gen, requires_grad=True)]
    g = torch.randn(6, 4, dtype=F64, generator=gen, requires_grad=True)
    fwd = lambda x, *w: OPS.mlp_hidden_fwd(x, list(w), 1.3)  # noqa: E731
    bwd = lambda x, g, *w: OPS.mlp_hidden_bwd(x, g, list(w), 1.3)  # noqa: E731
    assert torch.autograd.gradcheck(fwd, (x, *ws))
    assert torch.autograd.gradgradcheck(fwd, (x, *ws))
    assert torch.autograd.gradcheck(bwd, (x, g, *ws))
    # only some inputs need gradients
    assert torch.autograd.gradcheck(fwd, (x.detach(), ws[0], ws[1].detach()))
    assert torch.autograd.gradgradcheck(fwd, (x, ws[0].detach(), ws[1]))


@pytest.mark.parametrize("name", ["mace", "nequip_scalar"])
def test_weight_gradients(name):
    """Gradients reach the modules' parameters through the op as through the layer loop."""
    m = mlp(name, seed=3)
    x = torch.randn(40, m.hs[0], dtype=F64)
    c = torch.randn(40, m.hs[-2], dtype=F64)
    params = [layer.weight for layer in list(m.layers)[:-1]]
    want = torch.autograd.grad((layer_loop(m, x) * c).sum(), params)
    got = torch.autograd.grad((OPS.mlp_hidden_fwd(x, hidden_weights(m), m.hidden_cst) * c).sum(), params)
    for a, b in zip(got, want):
        assert rel_err(a, b) <= 1e-13


def test_force_training_double_backward():
    """E = <c, h(x)>; F = dE/dx (create_graph); loss(F) differentiated with respect to x and the
    weights: second derivatives through both ops' backward."""
    m = mlp("sevennet", seed=4)
    gen = torch.Generator().manual_seed(5)
    x0 = torch.randn(50, m.hs[0], dtype=F64, generator=gen)
    c = torch.randn(50, m.hs[-2], dtype=F64, generator=gen)
    target = torch.randn(x0.shape, dtype=F64, generator=gen)
    params = [layer.weight for layer in list(m.layers)[:-1]]

    def grads(hidden):
        x = x0.clone().requires_grad_()
        e = (hidden(x) * c).sum()
        (f,) = torch.autograd.grad(e, x, create_graph=True)
        return torch.autograd.grad(((f - target) ** 2).sum(), [x, *params])

    got = grads(lambda x: OPS.mlp_hidden_fwd(x, hidden_weights(m), m.hidden_cst))
    want = grads(lambda x: layer_loop(m, x))
    for a, b in zip(got, want):
        assert rel_err(a, b) <= 1e-12


def test_no_edges():
    m = mlp("mace")
    ws = hidden_weights(m)
    x = torch.zeros(0, 8, dtype=F64, requires_grad=True)
    h = OPS.mlp_hidden_fwd(x, ws, m.hidden_cst)
    assert h.shape == (0, 64)
    gx, *gw = torch.autograd.grad(h.sum(), [x, *[layer.weight for layer in list(m.layers)[:-1]]])
    assert gx.shape == (0, 8)
    assert all(g.abs().max().item() == 0 for g in gw)
    assert OPS.mlp_hidden_bwd(x.detach(), torch.zeros(0, 64, dtype=F64), ws, m.hidden_cst).shape == (0, 8)


def test_module_uses_op_only_where_it_applies():
    """hidden_op: all hidden layers SiLU with one constant, at least one hidden layer, and the op
    from the C++ library (else the layer loop runs; it is the same function)."""
    served = defined_in_cpp("mlp_hidden_fwd")
    assert RadialMLP([8, 64, 64, 10], "silu").hidden_op == served
    assert ScalarMLP([8, 16, 12], [0.5, 0.25], "silu").hidden_op == served
    assert ScalarMLP([8, 16, 12], [0.5, 0.25], "silu").hidden_cst == 1.0
    assert RadialMLP([8, 64, 10], "silu").hidden_cst != 1.0  # e3nn's normalize2mom constant
    assert not RadialMLP([8, 64, 10], "ssp").hidden_op
    assert not RadialMLP([8, 10], "silu").hidden_op  # no hidden layer


@pytest.mark.parametrize("name", ["mace", "nequip_scalar"])
def test_torchscript(name):
    m = mlp(name, seed=6)
    x = torch.randn(13, m.hs[0], dtype=F64)
    scripted = torch.jit.script(m)
    assert torch.equal(scripted(x), m(x))
    assert torch.equal(scripted.hidden(x), layer_loop(m, x))
    want = x
    for layer in m.layers:
        want = layer(want)
    assert torch.equal(m(x), want)  # forward = hidden @ last_weight is the layer loop
