"""md_accel::species_linear_* ops (CPU reference implementation + autograd) against the gather +
einsum formulation of ``SpeciesLinear``, e3nn's ``Linear`` with per-node weights, e3nn's
``FullyConnectedTensorProduct`` with one-hot species (MACE's skip connection), and finite
differences."""
import sys

import pytest
import torch

e3nn_o3 = pytest.importorskip("e3nn.o3")

from md_accel.model.species_linear import SpeciesLinear  # noqa: E402

OPS = torch.ops.md_accel

CONFIGS = {
    # several input blocks of one irrep (several terms per output block), an unused input block
    # (2x2o), an output block no instruction feeds (2x1e -> zeros), multiplicities not multiple of 8
    "mixed": ("3x0e+5x1o+2x0e+2x2o+4x2e", "7x0e+2x1e+3x1o+5x2e"),
    "mace_like": ("16x0e+16x1o+16x2e+16x3o", "16x0e+16x1o+16x2e+16x3o"),
    "mace_to_hidden": ("16x0e+16x1o+16x2e+16x3o", "16x0e+16x1o"),
    "sevennet_like": ("32x0e+16x1e+8x2e", "32x0e+16x1e+8x2e"),
    "l5": ("3x5o+2x0e", "4x5o+1x0e"),
    "tiny": ("2x0e+1x1o+1x0e+1x2o", "2x0e+1x1e+2x1o"),  # same features as "mixed", few numbers
}


@pytest.fixture(autouse=True)
def _float64_default():
    """e3nn bakes constants in the default dtype at construction."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _setup(name, num_species=5, n=23, seed=0):
    gen = torch.Generator().manual_seed(seed)
    irreps_in, irreps_out = CONFIGS[name]
    m = SpeciesLinear(irreps_in, irreps_out, num_species)
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
    x = torch.randn(n, m.dim_in, generator=gen)
    species = torch.randint(0, num_species, (n,), generator=gen)
    species[0] = num_species - 1  # species num_species - 2 may still be absent: fine
    return m, x, species


def _op(m, x, species, weight=None):
    order = torch.argsort(species, stable=True)
    w = m.weight if weight is None else weight
    return OPS.species_linear_fwd(x, w, species, order, m.op_ins, m.path_weights, m.dim_out)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_fwd_matches_einsum_and_e3nn_linear(name):
    m, x, species = _setup(name)
    out = _op(m, x, species)
    ref = m.forward_species_reference(x, species)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.equal(m.forward_species(x, species), ref)  # on the CPU the module runs the reference
    lin = e3nn_o3.Linear(str(m.irreps_in), str(m.irreps_out), shared_weights=False, internal_weights=False)
    assert lin.weight_numel == m.weight_numel
    torch.testing.assert_close(out, lin(x, m.weight.detach()[species]), rtol=1e-12, atol=1e-12)
    if name == "mixed":
        assert out[:, 7:13].abs().max() == 0  # 2x1e: no input of that irrep
        assert out.abs().min(dim=0).values.max() > 0


def test_fwd_matches_e3nn_fctp_with_one_hot():
    """MACE's skip connection: FullyConnectedTensorProduct(x, one-hot species), converted by the
    MACE converter into a SpeciesLinear (weights and path weights)."""
    from md_accel.convert.mace import _species_linear

    gen = torch.Generator().manual_seed(1)
    s_num = 6
    tp = e3nn_o3.FullyConnectedTensorProduct("8x0e+8x1o+4x2e+4x3o", f"{s_num}x0e", "8x0e+8x1o+2x2e+3x3o")
    with torch.no_grad():
        tp.weight.copy_(torch.randn(tp.weight.shape, generator=gen))
    spec, weight = _species_linear(tp, s_num)
    m = SpeciesLinear(spec["irreps_in"], spec["irreps_out"], spec["num_species"], spec["path_weights"])
    with torch.no_grad():
        m.weight.copy_(weight)
    x = torch.randn(40, m.dim_in, generator=gen)
    species = torch.randint(0, s_num, (40,), generator=gen)
    one_hot = torch.nn.functional.one_hot(species, s_num).to(x.dtype)
    torch.testing.assert_close(_op(m, x, species), tp(x, one_hot), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("name", ["mixed", "mace_like"])
def test_bwd_ops_equal_autograd_of_the_einsum_formulation(name):
    m, x, species = _setup(name, seed=2)
    species = species.clamp(max=m.num_species - 2)  # the last species has no nodes
    order = torch.argsort(species, stable=True)
    g = torch.randn(x.shape[0], m.dim_out, generator=torch.Generator().manual_seed(3))
    xr = x.clone().requires_grad_()
    gx_ref, gw_ref = torch.autograd.grad(m.forward_species_reference(xr, species), (xr, m.weight), g)
    w = m.weight.detach()
    gx = OPS.species_linear_bwd_x(g, w, species, order, m.op_ins, m.path_weights, m.dim_in)
    gw = OPS.species_linear_bwd_w(x, g, species, order, m.op_ins, m.path_weights, m.num_species)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gw, gw_ref, rtol=1e-12, atol=1e-12)
    # an absent species and an unused input block (2x2o at columns 20:30 of "mixed") get zeros
    assert gw[-1].abs().max() == 0 and gw[-2].abs().max() > 0
    if name == "mixed":
        assert gx[:, 20:30].abs().max() == 0


def test_autograd_through_op_matches_reference_to_second_order():
    """Forces (dE/dx) and their derivative with respect to x and W (force training)."""
    m, x, species = _setup("mace_like", seed=4)
    order = torch.argsort(species, stable=True)
    target = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))

    def loss(fwd):
        xr = x.clone().requires_grad_()
        e = (fwd(xr) ** 2).sum() + fwd(xr).sum()
        (gx,) = torch.autograd.grad(e, xr, create_graph=True)
        return torch.autograd.grad(((gx - target) ** 2).sum(), (xr, m.weight))

    got = loss(lambda xr: OPS.species_linear_fwd(xr, m.weight, species, order, m.op_ins, m.path_weights, m.dim_out))
    ref = loss(lambda xr: m.forward_species_reference(xr, species))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


def _tiny():
    m, x, species = _setup("tiny", num_species=3, n=6, seed=6)
    order = torch.argsort(species, stable=True)
    return m, x.requires_grad_(), m.weight.detach().clone().requires_grad_(), species, order


def test_gradcheck_all_ops():
    m, x, w, species, order = _tiny()
    args = (species, order, m.op_ins, m.path_weights)
    g = torch.randn(x.shape[0], m.dim_out, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: OPS.species_linear_fwd(x, w, *args, m.dim_out), (x, w))
    assert torch.autograd.gradcheck(lambda g, w: OPS.species_linear_bwd_x(g, w, *args, m.dim_in), (g, w))
    assert torch.autograd.gradcheck(lambda x, g: OPS.species_linear_bwd_w(x, g, *args, m.num_species), (x, g))


def test_gradgradcheck():
    m, x, w, species, order = _tiny()
    fn = lambda x, w: OPS.species_linear_fwd(x, w, species, order, m.op_ins, m.path_weights, m.dim_out)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (x, w))


def test_opcheck():
    """Schema, fake (meta) implementations and autograd registration are consistent."""
    m, x, w, species, order = _tiny()
    args = (species, order, m.op_ins, m.path_weights)
    g = torch.randn(x.shape[0], m.dim_out)
    torch.library.opcheck(OPS.species_linear_fwd, (x, w, *args, m.dim_out))
    torch.library.opcheck(OPS.species_linear_bwd_x, (g, w, *args, m.dim_in))
    torch.library.opcheck(OPS.species_linear_bwd_w, (x.detach(), g, *args, m.num_species))


def test_empty_and_single_species():
    m, x, species = _setup("mixed")
    empty = x[:0]
    assert _op(m, empty, species[:0]).shape == (0, m.dim_out)
    gw = OPS.species_linear_bwd_w(empty, empty.new_zeros(0, m.dim_out), species[:0], species[:0], m.op_ins,
                                  m.path_weights, m.num_species)
    assert gw.shape == (m.num_species, m.weight_numel) and gw.abs().max() == 0
    one = torch.full_like(species, 2)
    torch.testing.assert_close(_op(m, x, one), m.forward_species_reference(x, one), rtol=1e-12, atol=1e-12)


def test_species_out_of_range_is_refused():
    m, x, species = _setup("mixed")
    species[3] = m.num_species
    with pytest.raises(ValueError, match="species outside"):
        _op(m, x, species)


class _UsesSpeciesLinear(torch.nn.Module):
    def __init__(self, sl: SpeciesLinear):
        super().__init__()
        self.sl = sl

    def forward(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        return self.sl.forward_species(x, species)


def test_torchscript():
    """The scripted module holds the CUDA branch (the op) and runs the reference on the CPU."""
    m, x, species = _setup("sevennet_like")
    scripted = torch.jit.script(_UsesSpeciesLinear(m))
    assert "md_accel::species_linear_fwd" in str(scripted.sl.forward_species.graph)
    torch.testing.assert_close(scripted(x, species), m.forward_species(x, species), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["mixed", "mace_to_hidden", "l5"])
def test_one_species_form_is_linear(name):
    """Empty species and order (one species): ``Linear.forward_node_op`` (how ``Linear`` runs on CUDA)
    equals ``Linear``'s per-block products (checked against e3nn in test_model_blocks.py), biases
    included, to second order (forces and force training)."""
    from md_accel.model.linear import Linear

    gen = torch.Generator().manual_seed(11)
    m = Linear(*CONFIGS[name], biases=True)
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
        m.bias.copy_(torch.randn(m.bias.shape, generator=gen))
    assert name != "mixed" or m.bias_numel > 0
    x = torch.randn(17, m.dim_in, generator=gen)
    target = torch.randn(17, m.dim_in, generator=gen)

    def loss(fwd):
        xr = x.clone().requires_grad_()
        y = fwd(xr)
        (gx,) = torch.autograd.grad((y ** 2).sum() + y.sum(), xr, create_graph=True)
        return (y,) + torch.autograd.grad(((gx - target) ** 2).sum() + y.sum(), (xr, m.weight, m.bias))

    for a, b in zip(loss(m.forward_node_op), loss(m.forward_blocks)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    none = torch.empty(0, dtype=torch.long)
    w = m.weight.detach().view(1, -1).clone().requires_grad_()
    xs = x[:5].clone().requires_grad_()
    fn = lambda x, w: OPS.species_linear_fwd(x, w, none, none, m.op_ins, m.path_weights, m.dim_out)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (xs, w))
    with pytest.raises((ValueError, RuntimeError), match="one row"):
        OPS.species_linear_fwd(x, torch.zeros(2, m.weight_numel), none, none, m.op_ins, m.path_weights, m.dim_out)


def test_linear_registers_its_ops_and_scripts_alone():
    """``Linear`` alone (nothing else of md_accel imported) scripts: its module registers the ops it calls."""
    import subprocess

    code = ("import torch\nfrom md_accel.model.linear import Linear\n"
            "m = torch.jit.script(Linear('4x0e+2x1o', '3x0e+2x1o', biases=True))\n"
            "assert 'md_accel::species_linear_fwd' in str(m.forward_node_op.graph)\n"
            "print(m(torch.randn(5, 10)).shape)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch.Size([5, 9])" in out.stdout


def test_linear_keeps_per_block_products_where_the_op_does_not_fit():
    from md_accel.model.linear import Linear

    assert Linear("4x0e+2x3o", "4x0e+2x3o").op_fits
    assert not Linear("2x8e", "3x8e").op_fits  # irrep dimension 17 > the kernels' 15
    many = "+".join(f"1x{l}e" for l in range(1, 8)) + "+" + "+".join("1x0e" for _ in range(40))
    assert not Linear(many, "2x0e").op_fits  # 40 instructions into one output block > 32
