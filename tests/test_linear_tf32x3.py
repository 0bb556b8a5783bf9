"""md_accel::linear_tf32x3 (the radial MLPs' last layer) on the CPU: it is ``a @ b`` and its
gradients are those of ``a @ b`` to every order (it is differentiated through itself)."""
import torch

import md_accel.ops  # noqa: F401  (registers the op)

OP = torch.ops.md_accel.linear_tf32x3


def test_equals_matmul():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(37, 16, generator=gen, dtype=torch.float64)
    b = torch.randn(16, 24, generator=gen, dtype=torch.float64)
    assert torch.allclose(OP(a, b), a @ b, rtol=1e-14, atol=1e-14)
    assert OP(a[:0], b).shape == (0, 24)


def test_gradients_first_and_second_order():
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(7, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, 16, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(OP, (a, b))
    assert torch.autograd.gradgradcheck(OP, (a, b))


def test_matches_matmul_gradients_with_a_nonlinear_loss():
    """A loss whose second derivative mixes both operands (as force training does)."""
    gen = torch.Generator().manual_seed(2)
    a0 = torch.randn(9, 8, generator=gen, dtype=torch.float64)
    b0 = torch.randn(8, 8, generator=gen, dtype=torch.float64)
    res = []
    for f in (OP, torch.mm):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        (ga,) = torch.autograd.grad(f(a, b).sin().sum(), (a,), create_graph=True)
        loss = (ga ** 2).sum()
        res.append(torch.autograd.grad(loss, (a, b)))
    for x, y in zip(*res):
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-12)


def _per_component(a, b):
    """The specification of the 3-D form: out[g, :, m] = a[g, :, m] @ b, one component at a time."""
    return torch.stack([a[:, :, m] @ b for m in range(a.shape[2])], dim=2)


def test_grouped_equals_per_component_products():
    """a [G, K, d] (an equivariant linear's l > 0 block, here a strided view of wider rows)."""
    gen = torch.Generator().manual_seed(3)
    wide = torch.randn(11, 40, generator=gen, dtype=torch.float64)
    a = wide[:, 5:5 + 8 * 3].view(11, 8, 3)  # rows 40 apart, as a block split off a feature row
    b = torch.randn(8, 16, generator=gen, dtype=torch.float64)
    out = OP(a, b)
    assert out.shape == (11, 16, 3) and out.is_contiguous()
    assert torch.allclose(out, _per_component(a, b), rtol=1e-14, atol=1e-14)
    assert OP(a[:0], b).shape == (0, 16, 3)


def test_grouped_gradients_first_and_second_order():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(5, 8, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(8, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(OP, (a, b))
    assert torch.autograd.gradgradcheck(OP, (a, b))
