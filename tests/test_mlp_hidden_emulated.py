"""The fused CUDA kernels of md_accel::mlp_hidden_* (csrc/mlp_hidden_kernels.cu) run on the CPU
through the host emulation of CUDA (tests/cuda_emu: a thread per CUDA thread, shared memory
starting as NaN), against the plain-torch reference: both dtypes, the register and the
chunked (shared-memory staged) layer paths, the tensor-core kernels (mlp_hidden_mma.cuh, float32
3xTF32 and float64 DMMA, their mma emulated from the PTX ISA fragment layouts), zero padding, and the same bits for any
grid size.
Needs g++; the GPU itself: tests/gpu/test_mlp_hidden_cuda.py."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

from md_accel.ops.mlp_reference import mlp_hidden_bwd_ref, mlp_hidden_fwd_ref  # noqa: E402
from mlp_testing import PATHS, use_path  # noqa: E402

CSRC = Path(__file__).resolve().parent.parent / "csrc"
TOL = {torch.float64: 1e-13, torch.float32: 2e-6}
CST = 1.6791767923989418

# extern "C" entry calling the kernels' launch functions with the op's problem struct
_ENTRY = r'''
extern "C" const char* emu_mlp_hidden(int bwd, int dbl, const void* x, int64_t num_edges, int num_layers,
                                      const int* widths, const void* const* w, double cst, const void* grad_h,
                                      void* out) {
  auto run = [&](auto* tag) -> const char* {
    using T = std::remove_pointer_t<decltype(tag)>;
    md_accel::MLPHiddenProblem<T> p{};
    p.x = static_cast<const T*>(x);
    p.num_edges = num_edges;
    p.num_layers = num_layers;
    p.cst = T(cst);
    for (int l = 0; l <= num_layers; ++l) p.width[l] = widths[l];
    for (int l = 0; l < num_layers; ++l) p.w[l] = static_cast<const T*>(w[l]);
    if (!md_accel::mlp_hidden_has_kernel(p, bwd != 0)) return "no kernel";
    return bwd ? md_accel::mlp_hidden_bwd_launch<T>(p, static_cast<const T*>(grad_h), static_cast<T*>(out), nullptr)
               : md_accel::mlp_hidden_fwd_launch<T>(p, static_cast<T*>(out), nullptr);
  };
  return dbl ? run(static_cast<double*>(nullptr)) : run(static_cast<float*>(nullptr));
}
'''
_LIB = []


def lib():
    if not _LIB:
        so = ctypes.CDLL(emulate.build((CSRC / "mlp_hidden_kernels.cu").read_text() + _ENTRY))
        so.emu_mlp_hidden.restype = ctypes.c_char_p
        _LIB.append(so)
    return _LIB[0]


def call(x, ws, grad_h=None):
    """fwd (grad_h None) or bwd through the emulated kernels; outputs start as NaN."""
    bwd = grad_h is not None
    num = len(ws)
    widths = (ctypes.c_int * (num + 1))(x.shape[1], *[w.shape[1] for w in ws])
    ptrs = (ctypes.c_void_p * num)(*[w.data_ptr() for w in ws])
    out = torch.full((x.shape[0], x.shape[1] if bwd else ws[-1].shape[1]), float("nan"), dtype=x.dtype)
    err = lib().emu_mlp_hidden(int(bwd), int(x.dtype == torch.float64), ctypes.c_void_p(x.data_ptr()), x.shape[0],
                               num, widths, ptrs, ctypes.c_double(CST),
                               ctypes.c_void_p(grad_h.data_ptr() if bwd else None), ctypes.c_void_p(out.data_ptr()))
    assert err is None, err.decode()
    return out


def inputs(widths, e: int, dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(e, widths[0], generator=gen, dtype=torch.float64)
    ws = [torch.randn(a, b, generator=gen, dtype=torch.float64) / a ** 0.5 for a, b in zip(widths, widths[1:])]
    g = torch.randn(e, widths[-1], generator=gen, dtype=torch.float64)
    return x, ws, g


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape and torch.isfinite(a).all(), "non-finite values (unwritten output?)"
    if a.numel() == 0:
        return 0.0
    return ((a.double() - b).abs().max() / b.abs().max()).item()


WIDTHS = {
    "mace": (8, 64, 64, 64),
    "mace_mp0": (10, 64, 64, 64),  # MACE-MP-0's 10 Bessel functions: two input k8 steps
    "sevennet": (8, 64, 64),
    "padded": (5, 48, 30, 64),
    "k0_16": (12, 64, 64),
    "tiny": (3, 7),
    "wide": (8, 128, 100),  # no kernel (hidden width > 64): the caller composes ATen ops
}




@pytest.mark.parametrize("e", [0, 1, 300])
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", list(WIDTHS))
def test_matches_reference(name, path, e, monkeypatch):
    dtype = use_path(path, monkeypatch)
    x, ws, g = inputs(WIDTHS[name], e, dtype, seed=e)
    if name == "wide":
        with pytest.raises(AssertionError, match="no kernel"):
            call(x.to(dtype), [w.to(dtype) for w in ws])
        return
    xd, wd, gd = x.to(dtype), [w.to(dtype) for w in ws], g.to(dtype)
    assert rel_err(call(xd, wd), mlp_hidden_fwd_ref(x, ws, CST)) <= TOL[dtype]
    assert rel_err(call(xd, wd, gd), mlp_hidden_bwd_ref(x, g, ws, CST)) <= TOL[dtype]


@pytest.mark.parametrize("path", list(PATHS))
def test_grid_independence(path, monkeypatch):
    """Edges are spread over blocks by a grid-stride loop; every grid gives the same bits."""
    dtype = use_path(path, monkeypatch)
    x, ws, g = (t.to(dtype) if isinstance(t, torch.Tensor) else [w.to(dtype) for w in t]
                for t in inputs(WIDTHS["mace"], 700, dtype, seed=3))
    runs = []
    for sms, per_sm in ((1, 1), (3, 2), (7, 1)):
        monkeypatch.setenv("EMU_SMS", str(sms))
        monkeypatch.setenv("EMU_PER_SM", str(per_sm))
        runs.append((call(x, ws), call(x, ws, g)))
    for got in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(got, runs[0]))


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("name", ["mace", "mace_mp0", "sevennet"])
def test_radial_shapes_run_tensor_cores(name, dtype, monkeypatch):
    """The radial-MLP shapes take the tensor-core path where it is on: its results are not the
    CUDA-core kernel's bits (both within the tolerance of the reference, test_matches_reference)."""
    on, off = {"f32": ("f32", "f32_cuda_cores"), "f64": ("f64", "f64_cuda_cores")}[dtype]
    x, ws, g = inputs(WIDTHS[name], 64, PATHS[on][0], seed=5)
    runs = {}
    for path in (on, off):
        t = use_path(path, monkeypatch)
        xt, wt, gt = x.to(t), [w.to(t) for w in ws], g.to(t)
        runs[path] = (call(xt, wt), call(xt, wt, gt))
    assert not torch.equal(runs[on][0], runs[off][0]) and not torch.equal(runs[on][1], runs[off][1])


def test_tensor_cores_without_truncation_bias(monkeypatch):
    """The float32 tensor-core forward adds each k8 step's truncation mean back (mma.cuh): over 64k
    outputs of positive inputs and weights its mean signed error against float64 is the CUDA-core
    kernel's (both +2.5e-8 of the mean output: the float32 activation); without the mean added it
    was -1.2e-7."""
    gen = torch.Generator().manual_seed(1)
    widths = WIDTHS["mace"]
    x = torch.rand(1024, widths[0], generator=gen, dtype=torch.float64).float()
    ws = [(torch.rand(a, b, generator=gen, dtype=torch.float64) / a).float() for a, b in zip(widths, widths[1:])]
    ref = mlp_hidden_fwd_ref(x.double(), [w.double() for w in ws], CST)
    bias = {}
    for path in ("f32", "f32_cuda_cores"):
        use_path(path, monkeypatch)
        out = call(x, ws).double()
        bias[path] = (((out - ref) * ref.sign()).mean() / ref.abs().mean()).item()
    assert abs(bias["f32"] - bias["f32_cuda_cores"]) < 3e-8, bias


def test_small_shared_memory_falls_back_to_cuda_cores(monkeypatch):
    """On a GPU with 99 KiB of shared memory per block (sm_86/89) the tensor-core backward of a
    3-layer MLP (~136 KiB of tables) does not fit: the CUDA-core kernel serves it, same bits as
    when the tensor cores are switched off; the forward (68 KiB) still runs on the tensor cores."""
    x, ws, g = inputs(WIDTHS["mace"], 64, torch.float32, seed=6)
    xf, wf, gf = x.float(), [w.float() for w in ws], g.float()
    monkeypatch.setenv("EMU_SMEM_KIB", "99")
    monkeypatch.setenv("MD_ACCEL_MLP_MMA", "0")
    cuda_cores = (call(xf, wf), call(xf, wf, gf))
    monkeypatch.setenv("MD_ACCEL_MLP_MMA", "1")
    small = (call(xf, wf), call(xf, wf, gf))
    assert torch.equal(small[1], cuda_cores[1])
    assert not torch.equal(small[0], cuda_cores[0])
