"""``Linear`` on CUDA against the same module on the CPU (tests/test_model_blocks.py checks that
one against e3nn), in float64 and float32 on fresh random inputs: output, the gradients of x,
weight and bias, and a second derivative (force training / Hessians); float32 with plain products
(the default) and with the opt-in 3xTF32 tensor cores (``MD_ACCEL_LINEAR_TF32X3=1``,
``md_accel::linear_tf32x3``). The default's float32 errors carry no systematic bias. Skipped
without CUDA."""
from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from md_accel.model.linear import Linear  # noqa: E402
from md_accel.ops import _cuda  # noqa: E402

if not _cuda.load(verbose=True):
    pytest.fail(f"md_accel CUDA library did not load: {_cuda.load_error()}", pytrace=False)
DEV = torch.device("cuda")
TOL = {torch.float64: 1e-10, torch.float32: 2e-5}

CONFIGS = {  # irreps_in, irreps_out, biases, explicit path weights
    "mace_interaction": ("128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o+128x2e+128x3o", False, False),
    "mace_first": ("128x0e", "128x0e+128x1o", False, False),  # 1o fed by nothing: zeros
    "sevennet_l3i5": ("64x0e+32x1o+32x2e+32x3o", "128x0e+32x1o+32x2e+32x3o", True, False),
    # repeated irreps (several instructions per output block), biases on two 0e blocks, odd sizes
    "mixed_bias": ("3x0e+5x1o+2x0e+2x2o+4x2e+130x0e", "7x0e+2x1e+3x1o+5x2e+130x0e", True, True),
}


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().to(torch.float64), b.detach().cpu().to(torch.float64)
    assert a.shape == b.shape
    assert torch.isfinite(a).all()
    scale = b.abs().max().item()
    diff = (a - b).abs().max().item()
    return diff / scale if scale > 0 else diff


def pair(name: str, dtype: torch.dtype, seed: int, tensor_cores: bool = False):
    """The same Linear on the CPU and on CUDA, random weights and biases."""
    i, o, biases, explicit = CONFIGS[name]
    gen = torch.Generator().manual_seed(seed)
    probe = Linear(i, o, biases)
    pw = (torch.rand(len(probe.ins), generator=gen, dtype=torch.float64) + 0.5).tolist() if explicit else None
    cpu = Linear(i, o, biases, pw).to(dtype)
    with torch.no_grad():
        cpu.weight.copy_(torch.randn(cpu.weight_numel, generator=gen, dtype=torch.float64))
        cpu.bias.copy_(torch.randn(cpu.bias_numel, generator=gen, dtype=torch.float64))
    gpu = Linear(i, o, biases, pw).to(dtype)
    gpu.load_state_dict(cpu.state_dict())
    gpu.tensor_cores = tensor_cores
    return cpu, gpu.to(DEV), gen


@pytest.mark.parametrize("dtype,tensor_cores", [(torch.float64, False), (torch.float32, False), (torch.float32, True)],
                         ids=["float64", "float32", "float32-tf32x3"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_forward_and_gradients(name, dtype, tensor_cores):
    cpu, gpu, gen = pair(name, dtype, seed=list(CONFIGS).index(name), tensor_cores=tensor_cores)
    for n in (1, 37, 1000):
        x = torch.randn(n, cpu.dim_in, generator=gen, dtype=torch.float64).to(dtype)
        g = torch.randn(n, cpu.dim_out, generator=gen, dtype=torch.float64).to(dtype)
        results = []
        for m, dev in ((cpu, "cpu"), (gpu, DEV)):
            xd = x.to(dev).requires_grad_(True)
            out = m(xd)
            params = [xd, m.weight] + ([m.bias] if m.bias_numel else [])
            grads = torch.autograd.grad((out * g.to(dev)).sum(), params)
            results.append((out, grads))
        (o_ref, g_ref), (o_gpu, g_gpu) = results
        assert rel_err(o_gpu, o_ref) < TOL[dtype], f"{name} n={n} forward"
        for what, a, b in zip(("x", "weight", "bias"), g_gpu, g_ref):
            assert rel_err(a, b) < TOL[dtype], f"{name} n={n} grad {what}"


def test_float32_errors_unbiased(monkeypatch):
    """The default float32 products round to nearest: over 2M outputs of positive inputs and
    weights (where truncation would shift every output the same way) the mean signed error is
    far below one output's rounding error (~6e-8 relative). The path weights are float32 numbers
    (a rounded 1/sqrt(fan_in) would scale every output alike)."""
    monkeypatch.delenv("MD_ACCEL_LINEAR_TF32X3", raising=False)  # the default, whatever the caller set
    irreps = CONFIGS["mace_interaction"][0]
    gen = torch.Generator().manual_seed(11)
    pw = torch.tensor(Linear(irreps, irreps).path_weights, dtype=torch.float32).double().tolist()
    ref_linear = Linear(irreps, irreps, path_weights=pw).double()
    with torch.no_grad():
        ref_linear.weight.copy_(torch.rand(ref_linear.weight_numel, generator=gen, dtype=torch.float64).float().double())
    gpu = Linear(irreps, irreps, path_weights=pw).float().to(DEV)
    gpu.load_state_dict(ref_linear.state_dict())
    x = torch.rand(1000, ref_linear.dim_in, generator=gen, dtype=torch.float64).float()
    ref = ref_linear(x.double())
    out = gpu(x.to(DEV)).double().cpu()
    err = (out - ref) / ref.abs().clamp_min(1e-30)
    assert err.abs().max().item() < 2e-6  # a working product
    assert abs(err.mean().item()) < 1e-8, f"mean signed relative error {err.mean().item():.2e}"


@pytest.mark.parametrize("name", ["mace_interaction", "mixed_bias"])
def test_second_derivative(name):
    """d/d(weight, x) of <grad_x <out, g>, h>: what training on forces differentiates."""
    cpu, gpu, gen = pair(name, torch.float64, seed=7)
    n = 53
    x = torch.randn(n, cpu.dim_in, generator=gen, dtype=torch.float64)
    g = torch.randn(n, cpu.dim_out, generator=gen, dtype=torch.float64)
    h = torch.randn(n, cpu.dim_in, generator=gen, dtype=torch.float64)
    results = []
    for m, dev in ((cpu, "cpu"), (gpu, DEV)):
        xd = x.to(dev).requires_grad_(True)
        (gx,) = torch.autograd.grad((m(xd) * g.to(dev)).sum(), xd, create_graph=True)
        results.append(torch.autograd.grad((gx * h.to(dev)).sum(), [m.weight]))
    assert rel_err(results[1][0], results[0][0]) < 1e-10


def test_leading_dims_and_empty():
    cpu, gpu, gen = pair("sevennet_l3i5", torch.float64, seed=3)
    x = torch.randn(4, 5, cpu.dim_in, generator=gen, dtype=torch.float64)
    assert rel_err(gpu(x.to(DEV)), cpu(x)) < 1e-10
    empty = gpu(torch.zeros(0, cpu.dim_in, dtype=torch.float64, device=DEV))
    assert empty.shape == (0, cpu.dim_out)
