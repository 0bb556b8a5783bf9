"""md_accel.o3 against e3nn (independent implementation of the same conventions) and against
the defining properties (orthonormality, equivariance, invariance of the CG tensors)."""
import math

import pytest
import torch

e3nn_o3 = pytest.importorskip("e3nn.o3")

from md_accel.o3 import Irreps, SphericalHarmonics, spherical_harmonics  # noqa: E402
from md_accel.o3.wigner import wigner_3j  # noqa: E402


def _random_rotation(gen):
    q, r = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64, generator=gen))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


@pytest.mark.parametrize("normalization", ["component", "integral", "norm"])
@pytest.mark.parametrize("normalize", [True, False])
def test_spherical_harmonics_equal_e3nn(normalization, normalize):
    gen = torch.Generator().manual_seed(1)
    vec = torch.randn(500, 3, dtype=torch.float64, generator=gen) * 2.0
    ours = spherical_harmonics(vec, 8, normalize, normalization)
    ref = e3nn_o3.spherical_harmonics(list(range(9)), vec, normalize, normalization=normalization)
    assert ours.shape == ref.shape
    assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-12 * ref.abs().max().item())


def test_spherical_harmonics_gradients_equal_e3nn_second_order():
    gen = torch.Generator().manual_seed(2)
    vec = torch.randn(40, 3, dtype=torch.float64, generator=gen).requires_grad_()
    w = torch.randn(40, 49, dtype=torch.float64, generator=gen)
    grads = []
    for fn in (lambda v: spherical_harmonics(v, 6, True, "component"),
               lambda v: e3nn_o3.spherical_harmonics(list(range(7)), v, True, normalization="component")):
        (g,) = torch.autograd.grad((fn(vec) * w).sum(), vec, create_graph=True)
        (h,) = torch.autograd.grad(g.pow(2).sum(), vec)
        grads.append((g.detach(), h))
    assert torch.allclose(grads[0][0], grads[1][0], rtol=1e-10, atol=1e-10)
    assert torch.allclose(grads[0][1], grads[1][1], rtol=1e-9, atol=1e-9)


def test_spherical_harmonics_orthonormal_integral():
    # Lebedev-free check: Monte Carlo is too noisy; use a Gauss-Legendre x uniform-phi grid (exact for these degrees)
    lmax = 6
    nodes, weights = torch.tensor([0.0]), None
    import numpy as np

    xs, ws = np.polynomial.legendre.leggauss(lmax + 2)
    phis = torch.arange(2 * lmax + 3, dtype=torch.float64) * 2 * math.pi / (2 * lmax + 3)
    ct = torch.tensor(xs).repeat_interleave(len(phis))
    wt = torch.tensor(ws).repeat_interleave(len(phis)) * 2 * math.pi / len(phis)
    ph = phis.repeat(len(xs))
    st = torch.sqrt(1 - ct**2)
    vec = torch.stack([st * torch.cos(ph), st * torch.sin(ph), ct], dim=-1)
    y = spherical_harmonics(vec, lmax, True, "integral")
    gram = (y * wt[:, None]).T @ y
    assert torch.allclose(gram, torch.eye(gram.shape[0], dtype=torch.float64), atol=1e-12)
    del nodes, weights


def test_spherical_harmonics_equivariant():
    gen = torch.Generator().manual_seed(3)
    vec = torch.randn(64, 3, dtype=torch.float64, generator=gen)
    rot = _random_rotation(gen)
    for l in range(7):
        y = spherical_harmonics(vec, l)[:, l * l:]
        y_rot = spherical_harmonics(vec @ rot.T, l)[:, l * l:]
        # D(R) from least squares; it must be orthogonal and map y -> y_rot exactly
        d = torch.linalg.lstsq(y, y_rot).solution.T
        assert torch.allclose(d @ d.T, torch.eye(2 * l + 1, dtype=torch.float64), atol=1e-10)
        assert torch.allclose(y @ d.T, y_rot, atol=1e-10)


def test_module_matches_function_and_scripts():
    m = torch.jit.script(SphericalHarmonics(4, normalize=True, normalization="norm"))
    v = torch.randn(10, 3, dtype=torch.float64)
    assert torch.equal(m(v), spherical_harmonics(v, 4, True, "norm"))
    with pytest.raises(ValueError):
        spherical_harmonics(torch.randn(4, 2), 2)
    with pytest.raises(ValueError):
        SphericalHarmonics(2, normalization="bogus")


def test_wigner_3j_equal_e3nn():
    for l1 in range(7):
        for l2 in range(7):
            for l3 in range(abs(l1 - l2), min(l1 + l2, 8) + 1):
                ours = wigner_3j(l1, l2, l3)
                ref = e3nn_o3.wigner_3j(l1, l2, l3, dtype=torch.float64)
                assert torch.allclose(ours, ref, atol=1e-13), (l1, l2, l3)


def test_wigner_3j_is_invariant():
    gen = torch.Generator().manual_seed(4)
    vec = torch.randn(200, 3, dtype=torch.float64, generator=gen)
    rot = _random_rotation(gen)

    def wigner_d(l):
        y = spherical_harmonics(vec, l)[:, l * l:]
        return torch.linalg.lstsq(y, spherical_harmonics(vec @ rot.T, l)[:, l * l:]).solution.T

    for l1, l2, l3 in [(1, 1, 1), (1, 2, 3), (2, 2, 2), (3, 3, 4), (2, 4, 6)]:
        c = wigner_3j(l1, l2, l3)
        rotated = torch.einsum("ijk,ai,bj,ck->abc", c, wigner_d(l1), wigner_d(l2), wigner_d(l3))
        assert torch.allclose(rotated, c, atol=1e-10)
        assert abs(torch.linalg.norm(c).item() - 1.0) < 1e-14
    with pytest.raises(ValueError):
        wigner_3j(1, 1, 3)


def test_irreps_parsing():
    ir = Irreps("16x0e + 8x1o+2e")
    assert ir.dim == 16 + 24 + 5 and ir.num_irreps == 25 and ir.lmax == 2
    assert str(ir) == "16x0e+8x1o+1x2e"
    assert ir.offsets() == [0, 16, 40, 45]
    assert Irreps.spherical_harmonics(3) == Irreps("0e+1o+2e+3o")
    assert Irreps("2x0e+3x0e+0x1o").simplify() == Irreps("5x0e")
    assert str(e3nn_o3.Irreps(str(ir))) == str(ir)
    for bad in ["3x", "1q", "x1o", "2x1e+"]:
        with pytest.raises(ValueError):
            Irreps(bad)
