"""Helpers of the symmetric-contraction tests (tests/test_sc_reference.py, tests/mace/test_sc_mace.py,
tests/gpu/test_symmetric_contraction_cuda.py): random U-like coupling tensors, relative errors, and
the kernels of csrc/sc_kernels.cuh + one generated library compiled for the host (g++) and called
through ctypes with NaN-poisoned outputs."""
import ctypes
import subprocess
from pathlib import Path

import torch

from md_accel.ops import _sc_codegen
from md_accel.ops.symmetric_contraction import SymmetricContraction

CSRC = Path(__file__).resolve().parents[1] / "csrc"


def random_coupling(in_dims, out_dims, num_params, nnz, seed=0, dtype=torch.float64):
    """U-like tensors ``u[r][nu-1]`` ``[D, I.., K]`` with ``nnz[r][nu-1]`` random non-zeros
    (``None``: dense)."""
    gen = torch.Generator().manual_seed(seed)
    i = sum(in_dims)
    out = []
    for d, ks, zs in zip(out_dims, num_params, nnz):
        ur = []
        for nu, (k, z) in enumerate(zip(ks, zs), start=1):
            shape = [d] + [i] * nu + [k]
            if z is None:
                ur.append(torch.randn(shape, generator=gen, dtype=dtype))
                continue
            flat = torch.zeros(torch.Size(shape).numel(), dtype=dtype)
            pos = torch.randperm(flat.numel(), generator=gen)[:z]
            flat[pos] = torch.randn(z, generator=gen, dtype=dtype)
            ur.append(flat.reshape(shape))
        out.append(ur)
    return out


def random_weights(u, num_elements, channels, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(num_elements, t.shape[-1], channels, generator=gen, dtype=t.dtype) for t in ur] for ur in u]


def rel_err(a, b):
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape
    assert torch.isfinite(a).all(), "non-finite values (unwritten output?)"
    scale = b.abs().max().item() if b.numel() else 0.0
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    return diff / scale if scale > 0 else diff


_FIELDS = ["N", "C", "E", "K", "x", "species", "w", "g", "ggx", "ggw", "out", "gx", "gw", "perm", "sorted_species",
           "bucket_off", "chunk_off", "partial", "nb", "num_chunks", "terms", "values", "in_map", "out_map",
           "num_terms", "term_width", "num_in", "num_out"]
_INTS = {"N", "C", "E", "K", "nb", "num_chunks", "num_terms", "term_width", "num_in", "num_out"}


class _SCArgs(ctypes.Structure):
    """ctypes mirror of md_accel::SCArgs (csrc/sc_abi.h)."""
    _fields_ = [(f, ctypes.c_int64 if f in _INTS else ctypes.c_void_p) for f in _FIELDS]


_HARNESS = r"""
#define MD_ACCEL_SC_HOST 1
#include "generated.cu"
#include "sc_kernels.cu"
extern "C" {
const char* host_f64(int mode, const md_accel::SCArgs<double>* a, int generic) {
  return generic ? md_accel::sc_generic_launch<double>(mode, a, nullptr) : md_accel_sc_spec_v1()->launch_f64(mode, a, nullptr);
}
const char* host_f32(int mode, const md_accel::SCArgs<float>* a, int generic) {
  return generic ? md_accel::sc_generic_launch<float>(mode, a, nullptr) : md_accel_sc_spec_v1()->launch_f32(mode, a, nullptr);
}
void host_chunking(int64_t n, int64_t c, int64_t e, int64_t* nb, int64_t* nc) { md_accel::sc_chunking(n, c, e, nb, nc); }
}
"""


def _component_map(dims):
    rows, off = [], 0
    for d in dims:
        rows += [(off, d, m) for m in range(d)]
        off += d
    return torch.tensor(rows, dtype=torch.int32)


class HostKernels:
    """The generated library of ``module`` plus the generic kernels, compiled for the host."""

    def __init__(self, module: SymmetricContraction, workdir: Path, opt: str = "-O1"):
        self.m = module
        struct = _sc_codegen.structure(module.in_dims, module.out_dims, module.num_k, module.sc_terms,
                                       module.sc_values)
        (workdir / "generated.cu").write_text(_sc_codegen.generate(struct))
        (workdir / "harness.cpp").write_text(_HARNESS)
        so = workdir / "harness.so"
        subprocess.run(["g++", "-std=c++17", opt, "-shared", "-fPIC", "-I", str(CSRC), "-I", str(workdir),
                        str(workdir / "harness.cpp"), "-o", str(so)], check=True, capture_output=True)
        self.lib = ctypes.CDLL(str(so))
        for name in ("host_f64", "host_f32"):
            getattr(self.lib, name).restype = ctypes.c_char_p

    def run(self, mode, x, species, w, g=None, ggx=None, ggw=None, need_w=True, generic=False):
        m = self.m
        dt, n = x.dtype, x.shape[0]
        i, o = sum(m.in_dims), sum(m.out_dims)
        c, (e, k) = x.shape[1] // i, w.shape[:2]
        keep = []

        def ptr(t):
            if t is None:
                return None
            t = t.contiguous()
            keep.append(t)
            return t.data_ptr()

        a = _SCArgs(N=n, C=c, E=e, K=k)
        a.x, a.species, a.w, a.g, a.ggx, a.ggw = (ptr(t) for t in (x, species, w, g, ggx, ggw))
        out = torch.full((n, c * o), float("nan"), dtype=dt) if mode != 1 else None
        gx = torch.full_like(x, float("nan")) if mode != 0 else None
        gw = torch.full_like(w, float("nan")) if mode == 2 or (mode == 1 and need_w) else None
        a.out, a.gx, a.gw = ptr(out), ptr(gx), ptr(gw)
        if gw is not None:
            srt, perm = torch.sort(species, stable=True)
            nb, nc = ctypes.c_int64(), ctypes.c_int64()
            self.lib.host_chunking(ctypes.c_int64(n), ctypes.c_int64(c), ctypes.c_int64(e), ctypes.byref(nb),
                                   ctypes.byref(nc))
            a.perm, a.sorted_species = ptr(perm), ptr(srt)
            a.bucket_off = ptr(torch.full((e + 3,), -7, dtype=torch.int64))
            a.chunk_off = ptr(torch.full((e + 3,), -7, dtype=torch.int64))
            a.partial = ptr(torch.full((nc.value * k * c,), float("nan"), dtype=dt))
            a.nb, a.num_chunks = nb.value, nc.value
        a.terms, a.values = ptr(m.sc_terms), ptr(m.sc_values.to(dt))
        a.in_map, a.out_map = ptr(_component_map(m.in_dims)), ptr(_component_map(m.out_dims))
        a.num_terms, a.term_width, a.num_in, a.num_out = m.sc_terms.shape[0], m.sc_terms.shape[1], i, o
        err = (self.lib.host_f64 if dt == torch.float64 else self.lib.host_f32)(mode, ctypes.byref(a), int(generic))
        assert err is None, err
        return out, gx, gw


# --- the configurations of tests/gpu/test_symmetric_contraction_cuda.py (also prebuilt by
# tools/prebuild_gpu_kernels.py) ------------------------------------------------------------------

def _random(in_dims, out_dims, num_params, nnz, channels, num_elements, seed=0):
    u = random_coupling(in_dims, out_dims, num_params, nnz, seed)
    return SymmetricContraction.from_tensors(in_dims, u, random_weights(u, num_elements, channels, seed + 1))


def _mace_mp0():
    """MACE-MP-0 medium's layer-1 contraction with mace's own coupling tensors (mace-torch)."""
    import mace.modules.symmetric_contraction as mace_sc  # an ImportError skips the config
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # mace's coupling tensors in float64
    try:
        ref = mace_sc.SymmetricContraction("128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o", 3, num_elements=4,
                                           use_reduced_cg=False)
    finally:
        torch.set_default_dtype(old)
    u = [[getattr(c, f"U_matrix_{nu}") for nu in range(1, c.correlation + 1)] for c in ref.contractions]
    return SymmetricContraction.from_tensors([1, 3, 5, 7], u, random_weights(u, 4, 128, 3))


CONFIGS = {
    # MACE-MP-0 medium's layer-1 shape: I = 16 (0e+1o+2e+3o), outputs 0e+1o, correlation 3,
    # U sparsity as mace's (random positions)
    "mp0_like": lambda: _random([1, 3, 5, 7], [1, 3], [[1, 4, 23], [1, 6, 51]], [[1, 16, 353], [3, 70, 2846]], 128, 5),
    "mp0_mace": _mace_mp0,
    # L = 2 outputs, correlation 2
    "l2_corr2": lambda: _random([1, 3, 5], [1, 3, 5], [[1, 3], [1, 4], [1, 4]], [[1, 9], [3, 28], [5, 46]], 64, 3),
    # 5 channels (partial warps), mixed correlations
    "small": lambda: _random([1, 3], [1, 3, 1], [[2, 3, 4], [2], [1, 2]], [[2, 10, 40], [4], [1, 6]], 5, 4),
    # 254 weight columns: the float64 weight-gradient accumulators need > 48 KB of shared memory
    "many_weights": lambda: _random([1, 3], [1], [[4, 100, 150]], [[4, 200, 600]], 40, 2),
}
