"""md_accel::linear_tf32x3 on CUDA: float32 through the 3xTF32 tensor-core GEMM keeps float32
accuracy (against float64), forward and first/second-order gradients; float64 is exact mm."""
import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.ops import _cuda  # noqa: E402
from md_accel.ops._op_registry import defined_in_cpp  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
if not defined_in_cpp("linear_tf32x3"):
    pytest.fail("the loaded md_accel library has no linear_tf32x3 op", pytrace=False)
OP = torch.ops.md_accel.linear_tf32x3
DEV = torch.device("cuda")


def rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.detach().double() - ref).abs().max() / ref.abs().max())


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 -> nearest TF32 value (low 13 mantissa bits cleared, round half away from zero)."""
    bits = x.view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


@pytest.mark.parametrize("m,k,n", [(1, 64, 1280), (4099, 64, 1280), (20000, 64, 512), (3001, 64, 1760)])
def test_float32_accuracy_and_gradients(m, k, n):
    gen = torch.Generator(device="cpu").manual_seed(m)
    a64 = torch.randn(m, k, generator=gen, dtype=torch.float64).to(DEV)
    b64 = (torch.randn(k, n, generator=gen, dtype=torch.float64) / k ** 0.5).to(DEV)
    g64 = torch.randn(m, n, generator=gen, dtype=torch.float64).to(DEV)
    a, b = a64.float().requires_grad_(), b64.float().requires_grad_()
    out = OP(a, b)
    ref = a.detach().double() @ b.detach().double()
    assert rel(out, ref) < 2e-6
    ga, gb = torch.autograd.grad(out, (a, b), g64.float())
    assert rel(ga, g64 @ b.detach().double().t()) < 2e-6
    assert rel(gb, a.detach().double().t() @ g64) < 2e-6
    # the bound has power: operands rounded to TF32 (10-bit mantissa), as one TF32 pass does, fail it
    coarse = _tf32(a.detach()).double() @ _tf32(b.detach()).double()
    assert rel(coarse, ref) > 2e-6


def test_float64_is_plain_matmul_and_deterministic():
    gen = torch.Generator(device="cpu").manual_seed(5)
    a = torch.randn(1000, 64, generator=gen, dtype=torch.float64).to(DEV)
    b = torch.randn(64, 512, generator=gen, dtype=torch.float64).to(DEV)
    assert rel(OP(a, b), a @ b) < 1e-14
    a32, b32 = a.float(), b.float()
    assert torch.equal(OP(a32, b32), OP(a32, b32))


def test_second_order_matches_float64():
    gen = torch.Generator(device="cpu").manual_seed(6)
    a64 = torch.randn(513, 64, generator=gen, dtype=torch.float64).to(DEV)
    b64 = (torch.randn(64, 256, generator=gen, dtype=torch.float64) / 8).to(DEV)
    res = []
    for dt in (torch.float32, torch.float64):
        a, b = a64.to(dt).requires_grad_(), b64.to(dt).requires_grad_()
        (ga,) = torch.autograd.grad(OP(a, b).sin().sum(), (a,), create_graph=True)
        res.append(torch.autograd.grad((ga ** 2).sum(), (a, b)))
    for x, y in zip(*res):
        assert rel(x, y) < 1e-5


@pytest.mark.parametrize("groups,k,n,d", [(1, 64, 64, 3), (4001, 480, 64, 7), (3000, 544, 64, 5), (777, 64, 128, 3)])
def test_grouped_blocks_accuracy_gradients_and_layout(groups, k, n, d):
    """a [G, K, d] as an equivariant linear passes an l > 0 block (a strided view of wider feature
    rows): out[g, :, m] = a[g, :, m] @ b and both gradients at float32 accuracy against float64, every
    element written, deterministic, computed on that layout (no transposed copy of a)."""
    gen = torch.Generator(device="cpu").manual_seed(groups + k + d)
    wide64 = torch.randn(groups, k * d + 9, generator=gen, dtype=torch.float64).to(DEV)
    b64 = (torch.randn(k, n, generator=gen, dtype=torch.float64) / k ** 0.5).to(DEV)
    g64 = torch.randn(groups, n, d, generator=gen, dtype=torch.float64).to(DEV)
    wide = wide64.float().requires_grad_()
    b = b64.float().requires_grad_()
    a = wide[:, 4:4 + k * d].view(groups, k, d)
    torch.cuda.empty_cache()
    torch.full((groups * n * d,), float("nan"), device=DEV)  # poison the allocator's next block
    out = OP(a, b)
    assert out.shape == (groups, n, d) and out.is_contiguous() and not out.isnan().any()
    a_ref = a.detach().double()
    per_m = lambda x, y: torch.einsum("gkm,kn->gnm", x, y)  # noqa: E731
    assert rel(out, per_m(a_ref, b64.float().double())) < 2e-6
    gw, gb = torch.autograd.grad(out, (wide, b), g64.float())
    ga_ref = torch.einsum("gnm,kn->gkm", g64, b64.float().double())
    assert rel(gw[:, 4:4 + k * d].view(groups, k, d), ga_ref) < 2e-6
    assert gw[:, :4].abs().max() == 0 and gw[:, 4 + k * d:].abs().max() == 0
    assert rel(gb, torch.einsum("gkm,gnm->kn", a_ref, g64)) < 2e-6
    assert torch.equal(out, OP(a, b))
    # on the grouped layout: no copy kernel of a before the GEMM
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        OP(a.detach(), b.detach())
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert not any("copy" in x.lower() for x in names), names


def test_grouped_expanded_block():
    """A block whose groups share storage (expanded, stride 0) is copied, not misread."""
    gen = torch.Generator(device="cpu").manual_seed(8)
    a = torch.randn(1, 64, 3, generator=gen).to(DEV).expand(6, 64, 3)
    b = (torch.randn(64, 64, generator=gen) / 8).to(DEV)
    out = OP(a, b)
    assert rel(out, torch.einsum("gkm,kn->gnm", a.double(), b.double())) < 2e-6
