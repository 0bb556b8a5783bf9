"""The generic CUDA kernels of the tensor-product convolution (csrc/tp_conv_kernels.cu: the plan read from
shared memory, the path of configurations without a generated library) compiled for the host with
tests/cuda_emu, against the plain-torch reference: forward, backward and double backward (with and without
g_grad_out), float64 and float32, every output poisoned with NaN first; the emulated tests' hub graph (nodes that
neither send nor receive, a receiver of 60 edges), blocks of different multiplicities and several paths into one
output block; bit-identical outputs on a second run. The GPU side: tests/gpu/test_tp_conv_cuda.py (the ``generic``
kernels)."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402
from tp_testing import rel_err, second_order_problem  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

from md_accel.ops.tp_problem import TPProblem  # noqa: E402
from md_accel.ops.tp_reference import tp_conv_bwd_ref, tp_conv_dbwd_ref, tp_conv_fwd_ref  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOL = {torch.float64: 1e-13, torch.float32: 2e-6}

_WRAPPER = r"""
// kind: 0 forward, 1 backward, 2 double backward
template <typename T>
const char* emu_run(int kind, const void* t, const md_accel::TPGraph* g, const md_accel::TPPlan* p,
                    const md_accel::TPDims* d) {
  const auto& a = *static_cast<const md_accel::TPTensors<T>*>(t);
  if (kind == 0) return md_accel::tp_conv_fwd_launch<T>(a, *g, *p, *d, nullptr);
  if (kind == 1) return md_accel::tp_conv_bwd_launch<T>(a, *g, *p, *d, nullptr);
  return md_accel::tp_conv_dbwd_launch<T>(a, *g, *p, *d, nullptr);
}
extern "C" const char* emu_generic(int kind, int f64, const void* t, const md_accel::TPGraph* g,
                                   const md_accel::TPPlan* p, const md_accel::TPDims* d) {
  return f64 ? emu_run<double>(kind, t, g, p, d) : emu_run<float>(kind, t, g, p, d);
}
"""


class Plan(ctypes.Structure):  # csrc/tp_conv.h: TPPlan
    _fields_ = [(n, ctypes.c_void_p) for n in ("paths", "cg_ptr", "cg_ijk", "cg_val")] + [
        (n, ctypes.c_int) for n in ("num_paths", "nnz", "max_mul")]


@pytest.fixture(scope="module")
def lib():
    src = (ROOT / "csrc" / "tp_conv_kernels.cu").read_text() + _WRAPPER
    so = ctypes.CDLL(emulate.build(src))
    so.emu_generic.restype = ctypes.c_char_p
    so.emu_generic.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.c_void_p] * 4
    return so


def problem():
    """Multiplicities 4 and 2 (threads past a block's channels idle), three paths into the 0e / 1o output blocks."""
    return TPProblem.create(
        "4x0e+4x1o+2x2e", "1x0e+1x1o+1x2e", "4x0e+4x1o+4x1e+2x2e",
        [(0, 0, 0, "uvu", True), (1, 1, 0, "uvu", True), (0, 1, 1, "uvu", True), (1, 0, 1, "uvu", True),
         (1, 2, 1, "uvu", True), (1, 1, 2, "uvu", True), (2, 0, 3, "uvu", True), (2, 2, 3, "uvu", True)])


class Generic:
    """The emulated generic kernels on one lowered plan in one dtype: the plan's tables as the op library
    packs them (csrc/tp_conv_cuda.cpp: (i, j, k) as i | j << 8 | k << 16), outputs returned."""

    def __init__(self, lib, plan, dtype):
        self.lib, self.plan, self.dtype = lib, plan, dtype
        ijk = plan.cg_idx.to(torch.int64)
        self._tables = (plan.paths.contiguous(), plan.cg_ptr.contiguous(),
                        (ijk[:, 0] | ijk[:, 1] << 8 | ijk[:, 2] << 16).to(torch.int32).contiguous(),
                        plan.cg_val.to(dtype).contiguous())
        self.c_plan = Plan(*(t.data_ptr() for t in self._tables), plan.paths.shape[0], ijk.shape[0],
                           int(plan.paths[:, 1].max()))

    def run(self, kind: int, graph, n: int, **tensors):
        names = ("x", "y", "w", "g", "ggx", "ggy", "ggw", "out", "gx", "gy", "gw")
        t = emulate.Tensors(*(tensors[k].data_ptr() if tensors.get(k) is not None else None for k in names))
        c_graph = emulate.Graph(*(v.data_ptr() for v in (graph.src, graph.dst, graph.dst_ptr, graph.src_perm,
                                                          graph.src_ptr)), n, graph.src.numel(), None)
        x = tensors["x"]
        d = emulate.Dims(x.shape[1], tensors["y"].shape[1], tensors["w"].shape[1], self.plan.dim_out)
        err = self.lib.emu_generic(kind, int(self.dtype == torch.float64), ctypes.addressof(t),
                                   ctypes.addressof(c_graph), ctypes.addressof(self.c_plan), ctypes.addressof(d))
        assert err is None, err


def nan_like(t):
    return torch.full_like(t, float("nan"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_generic_kernels_match_reference(lib, dtype):
    plan = problem().lower()
    gk = Generic(lib, plan, dtype)
    n, g, (x, y, w, go, ggx, ggy, ggw), dense = second_order_problem(plan, 5)
    paths = plan.paths.tolist()
    ref_out = tp_conv_fwd_ref(x, y, w, g.src, g.dst, n, paths, dense, plan.dim_out)
    ref_bwd = tp_conv_bwd_ref(go, x, y, w, g.src, g.dst, paths, dense)
    ref_dbwd = tp_conv_dbwd_ref(ggx, ggy, ggw, go, x, y, w, g.src, g.dst, paths, dense)
    xs, ys, ws, gos, ggxs, ggys, ggws = (t.to(dtype).contiguous() for t in (x, y, w, go, ggx, ggy, ggw))

    def forward():
        out = nan_like(gos)
        gk.run(0, g, n, x=xs, y=ys, w=ws, out=out)
        return [out]

    def backward():
        gx, gy, gw = nan_like(xs), nan_like(ys), nan_like(ws)
        gk.run(1, g, n, x=xs, y=ys, w=ws, g=gos, gx=gx, gy=gy, gw=gw)
        return [gx, gy, gw]

    def double_backward(with_g_out=True):
        outs = [nan_like(gos) if with_g_out else None, nan_like(xs), nan_like(ys), nan_like(ws)]
        gk.run(2, g, n, x=xs, y=ys, w=ws, g=gos, ggx=ggxs, ggy=ggys, ggw=ggws, out=outs[0], gx=outs[1],
               gy=outs[2], gw=outs[3])
        return outs if with_g_out else outs[1:]

    checks = (("fwd", forward, [ref_out]), ("bwd", backward, list(ref_bwd)),
              ("dbwd", double_backward, list(ref_dbwd)),
              ("dbwd without g_grad_out", lambda: double_backward(False), list(ref_dbwd[1:])))
    for what, run, refs in checks:
        got = run()
        for i, (a, b) in enumerate(zip(got, refs)):
            assert rel_err(a, b) <= TOL[dtype], (what, i, rel_err(a, b))
        for i, (a, b) in enumerate(zip(got, run())):
            assert torch.equal(a, b), (what, i, "not bit-identical on a second run")
