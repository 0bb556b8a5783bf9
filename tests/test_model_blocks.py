"""md_accel.model building blocks against e3nn / sevenn, in float64."""
import math

import pytest
import torch

e3nn = pytest.importorskip("e3nn")
from e3nn import o3  # noqa: E402
from e3nn.math import normalize2mom  # noqa: E402
from e3nn.nn import FullyConnectedNet  # noqa: E402
from e3nn.nn import Gate as E3Gate  # noqa: E402

from md_accel.model import (  # noqa: E402
    BesselBasis, Gate, Linear, PolynomialCutoff, RadialMLP, ScaleShift, SpeciesEmbedding, XPLORCutoff)
from md_accel.model.activations import second_moment_constant  # noqa: E402

FUNCS = {
    "silu": torch.nn.functional.silu,
    "tanh": torch.tanh,
    "abs": torch.abs,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "elu": torch.nn.functional.elu,
    "ssp": lambda x: torch.nn.functional.softplus(x) - math.log(2.0),
}


@pytest.fixture(autouse=True)
def _float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.parametrize("name", sorted(FUNCS))
def test_activation_constant_matches_e3nn(name):
    ref = normalize2mom(FUNCS[name])
    expected = 1.0 if ref._is_id else ref.cst
    assert second_moment_constant(name) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("biases", [False, True])
def test_linear_matches_e3nn(biases):
    # unsimplified input (two 0e blocks) and an output irrep with no input (must be zero)
    irreps_in, irreps_out = "3x0e+2x1o+4x0e+1x2e+2x1o", "5x0e+3x1o+2x2e+1x1e"
    ref = o3.Linear(irreps_in, irreps_out, biases=biases)
    ours = Linear(irreps_in, irreps_out, biases=biases)
    assert ours.weight_numel == ref.weight_numel and ours.bias_numel == ref.bias_numel
    with torch.no_grad():
        ours.weight.copy_(ref.weight)
        if biases:
            ref.bias.normal_()
            ours.bias.copy_(ref.bias)
    x = torch.randn(7, o3.Irreps(irreps_in).dim)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.jit.script(ours)(x), ref(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("scalars, act_s, gates, act_g, gated, in_order", [
    # scalars of two parities and two gate blocks: the sorted input interleaves the groups
    ("4x0e+3x0o", ["silu", "tanh"], "3x0e+2x0e", ["sigmoid", "silu"], "2x1o+2x2e+1x1e", False),
    # SevenNet's layout (scalars, gates, gated already in order: no gather; the gate blocks, one
    # per gated irrep, share their activation: one run)
    ("6x0e", ["silu"], "3x0e+2x0e+1x0e", ["sigmoid"] * 3, "3x1e+2x2e+1x3e", True),
])
def test_gate_matches_e3nn(scalars, act_s, gates, act_g, gated, in_order):
    ref = E3Gate(scalars, [FUNCS[a] for a in act_s], gates, [FUNCS[a] for a in act_g], gated)
    ours = Gate(scalars, act_s, gates, act_g, gated)
    assert str(ours.irreps_in) == str(ref.irreps_in)
    assert ours.in_order == in_order
    x = torch.randn(5, ref.irreps_in.dim, requires_grad=True)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.jit.script(ours)(x), ref(x), rtol=0, atol=1e-12)
    # first and second derivatives (forces, force training) against e3nn's
    v = torch.randn(5, ref.irreps_out.dim)
    u = torch.randn(5, ref.irreps_in.dim)
    derivs = []
    for m in (ours, ref):
        (g,) = torch.autograd.grad((m(x) * v).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad((g * u).sum(), x)
        derivs.append((g.detach(), h))
    torch.testing.assert_close(derivs[0][0], derivs[1][0], rtol=0, atol=1e-12)
    torch.testing.assert_close(derivs[0][1], derivs[1][1], rtol=0, atol=1e-12)


def test_gate_constants_set_after_construction():
    """set_constants (a converted NequIP model's factors): blocks whose factors differ stay apart,
    equal ones are applied as one run, eager and scripted, against the factors applied by hand."""
    gate = Gate("2x0e+3x0e", ["silu", "silu"], "1x0e+1x0e", ["sigmoid", "sigmoid"], "1x1o+1x2e")
    gate.set_constants([1.5, 0.7], [2.0, 2.0])
    assert gate.scalar_runs == [2, 3] and gate.gate_runs == [2]
    x = torch.randn(4, gate.irreps_in.dim)
    s = torch.nn.functional.silu
    g = 2.0 * torch.sigmoid(x[:, 5:7])
    ref = torch.cat([1.5 * s(x[:, :2]), 0.7 * s(x[:, 2:5]), x[:, 7:10] * g[:, :1], x[:, 10:15] * g[:, 1:]], dim=-1)
    torch.testing.assert_close(gate(x), ref, rtol=0, atol=1e-14)
    torch.testing.assert_close(torch.jit.script(gate)(x), ref, rtol=0, atol=1e-14)
    with pytest.raises(ValueError):
        gate.set_constants([1.0], [1.0, 1.0])


def test_gate_scalars_only():
    ref = E3Gate("6x0e", [FUNCS["silu"]], "", [], "")
    ours = Gate("6x0e", ["silu"], "", [], "")
    x = torch.randn(3, 6)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("act", ["silu", "ssp"])
def test_radial_mlp_matches_fully_connected_net(act):
    hs = [8, 16, 16, 12]
    ref = FullyConnectedNet(hs, FUNCS[act])
    ours = RadialMLP(hs, act)
    with torch.no_grad():
        for k, layer in enumerate(ours.layers):
            layer.weight.copy_(getattr(ref, f"layer{k}").weight)
    x = torch.randn(20, 8)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


def test_species_embedding_equals_linear_on_one_hot():
    n, irreps = 7, "16x0e"
    ref = o3.Linear(f"{n}x0e", irreps)
    ours = SpeciesEmbedding(n, 16)
    with torch.no_grad():
        ours.weight.copy_(ref.weight.view(n, 16))
    species = torch.tensor([0, 3, 6, 3, 1])
    onehot = torch.nn.functional.one_hot(species, n).double()
    torch.testing.assert_close(ours(species), ref(onehot), rtol=0, atol=0)


def test_scale_shift():
    ss = ScaleShift(3)
    ss.scale.copy_(torch.tensor([1.0, 2.0, 3.0]))
    ss.shift.copy_(torch.tensor([-1.0, 0.5, 0.0]))
    out = ss(torch.tensor([1.0, 1.0, 2.0, 2.0]), torch.tensor([0, 1, 2, 1]))
    torch.testing.assert_close(out, torch.tensor([0.0, 2.5, 6.0, 4.5]))


def test_radial_functions_match_sevenn():
    sevenn_emb = pytest.importorskip("sevenn.nn.edge_embedding")
    r = torch.linspace(0.5, 4.99, 200)
    ref_b = sevenn_emb.BesselBasis(5.0, 8).double()
    ours_b = BesselBasis(5.0, 8)
    with torch.no_grad():
        ref_b.coeffs.mul_(1.01)  # trained wavenumbers differ from n*pi/rc
        ours_b.coeffs.copy_(ref_b.coeffs)
    torch.testing.assert_close(ours_b(r), ref_b(r), rtol=0, atol=1e-13)
    torch.testing.assert_close(PolynomialCutoff(5.0, 6)(r), sevenn_emb.PolynomialCutoff(5.0, 6)(r), rtol=0, atol=1e-13)
    torch.testing.assert_close(XPLORCutoff(5.0, 4.5)(r), sevenn_emb.XPLORCutoff(5.0, 4.5)(r), rtol=0, atol=1e-13)
    # envelopes go smoothly to zero at the cutoff
    rc = torch.tensor([5.0 - 1e-6])
    assert abs(PolynomialCutoff(5.0, 6)(rc).item()) < 1e-9 and abs(XPLORCutoff(5.0, 4.5)(rc).item()) < 1e-9
