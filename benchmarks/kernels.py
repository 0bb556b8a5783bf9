"""Convolution tensor product + neighbour sum alone: md_accel vs e3nn, cuEquivariance and
OpenEquivariance on the same graph, inputs and weight layout.

For each workload (benchmarks/workloads.py) and dtype: a correctness check of every
implementation against e3nn in float64 on a small subgraph (forward output, first gradients,
double-backward gradients; max relative error), then timings on the full graph of
forward, forward+backward (grads to x, y, w) and double backward (loss = sum of the squared
first gradients, backpropagated to x, y, w), each with its peak memory. The double-backward pass
also reports the implementation's own share ("op"): the pass minus that loss timed alone on
tensors of the first gradients' shapes (the same work for every implementation). Every implementation
runs inside try/except: a failure is recorded with its reason and the run goes on. md_accel and oeq_det
are deterministic (bit-identical results run after run); cueq, oeq_atomic and md_accel_atomic (md_accel with
``set_deterministic(False)``: atomic adds into grad_x) are not. md_accel_scratch and md_accel_gwrows are the
deterministic md_accel with each edge's grad_x row always in a scratch buffer or always in grad_w
(``set_rows_in_grad_w(False / True)``); md_accel_keep_ggw is the default but for the double backward's grad_w,
not written into the memory of its incoming gradient (``set_dbwd_in_gg_w(False)``: the rows then go into grad_w
there). The variants keep their meaning of the sessions before that (session 50): none writes grad_w into gg_w.
md_accel alone runs the process's settings (the defaults: deterministic; the double-backward pass's double backward
writes its grad_w into the incoming gg_w, its rows in the scratch; the forward + backward pass's backward keeps its
rows in grad_w; the double-backward pass's first backward, under create_graph, in the scratch).

    python benchmarks/kernels.py [--workloads mace_mp0_medium,...] [--dtypes float32,float64]
        [--graph cu:4000:6.0 | random:NODES:EDGES | random_sym:NODES:EDGES]
        [--impls md_accel,md_accel_atomic,md_accel_scratch,md_accel_gwrows,md_accel_keep_ggw,e3nn,cueq,oeq_det,
                 oeq_atomic]
        [--passes fwd,fwd_bwd,dbwd]
        [--repeats 20] [--min-seconds S] [--warmup 3] [--budget SECONDS] [--check-nodes N] [--reference-cache DIR]
        [--out DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import math
import os
import sys
import time
from typing import Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from workloads import WORKLOADS, Workload, byte_floor, parse_irreps  # noqa: E402

PASSES = ("fwd", "fwd_bwd", "dbwd")
IMPLS = ("md_accel", "md_accel_atomic", "e3nn", "cueq", "oeq_det", "oeq_atomic")


class GraphT:
    """A graph's index tensors on the device (edges sorted by receiver) plus md_accel's CSR."""

    def __init__(self, g: Dict, device):
        self.num_nodes = int(g["num_nodes"])
        self.src = torch.as_tensor(g["src"], dtype=torch.int64, device=device)
        self.dst = torch.as_tensor(g["dst"], dtype=torch.int64, device=device)
        self.vec = torch.as_tensor(g["vec"], dtype=torch.float64, device=device)
        self.num_edges = int(self.src.numel())
        # edges are sorted by (dst, src): a stable sort by sender gives the transposed order
        self.src_perm = torch.argsort(self.src, stable=True)
        self._md = None

    def md_graph(self):
        if self._md is None:
            from md_accel.ops import build_graph

            self._md = build_graph(self.src, self.dst, self.num_nodes)
            assert bool((self._md.perm == torch.arange(self.num_edges, device=self.src.device)).all()), \
                "benchmark graphs are sorted by receiver"
        return self._md


def layout_perm(irreps: str, to_ir_mul: bool) -> torch.Tensor:
    """Index map between e3nn's mul_ir layout and cuEquivariance's ir_mul layout (per block)."""
    idx, off = [], 0
    for mul, (l, _) in parse_irreps(irreps):
        d = 2 * l + 1
        block = torch.arange(off, off + mul * d).view(mul, d)
        idx.append((block.t() if to_ir_mul else block.reshape(d, mul).t().reshape(mul, d)).reshape(-1))
        off += mul * d
    return torch.cat(idx)


# --- implementations: prepare (layout, outside timing) / run (timed) / to_e3nn (output) ---------
class Impl:
    name = ""
    g: GraphT

    def with_graph(self, g: GraphT) -> "Impl":
        """The same compiled product on another graph (no rebuild: e3nn codegen and OEQ/cuEq
        kernel compilation happen once per workload and dtype)."""
        other = copy.copy(self)
        other.g = g
        return other

    def prepare(self, x, y, w):
        return x, y, w

    def run(self, x, y, w):
        raise NotImplementedError

    def to_e3nn(self, out):
        return out

    def settings(self) -> ContextManager:
        """This implementation's process-wide settings, held while it is checked and timed."""
        return contextlib.nullcontext()


class E3nnImpl(Impl):
    name = "e3nn"

    def __init__(self, wl: Workload, g: GraphT, dtype, device):
        from e3nn import o3

        # e3nn computes its Clebsch-Gordan buffers in the default dtype: build in the target
        # dtype, or a float64 product carries float32-rounded coefficients (~1e-8 errors)
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            self.tp = o3.TensorProduct(wl.irreps_in1, wl.irreps_in2, wl.irreps_out, wl.instructions,
                                       shared_weights=False, internal_weights=False).to(device=device)
        finally:
            torch.set_default_dtype(default)
        self.g = g

    def run(self, x, y, w):
        msg = self.tp(x.index_select(0, self.g.src), y, w)
        return torch.zeros((self.g.num_nodes, msg.shape[1]), dtype=msg.dtype, device=msg.device).index_add(
            0, self.g.dst, msg)


class MdAccelImpl(Impl):
    """md_accel's TensorProductConv with the process's settings (``md_accel``) or with those of a variant
    (VARIANTS: grad_x by atomic adds, or deterministic with the per-edge rows in scratch or in grad_w, or the
    double backward's grad_w in a buffer of its own)."""

    # name -> (set_deterministic, set_rows_in_grad_w, set_dbwd_in_gg_w)
    VARIANTS = {"md_accel_atomic": (False, False, False), "md_accel_scratch": (True, False, False),
                "md_accel_gwrows": (True, True, False), "md_accel_keep_ggw": (True, "auto", False)}

    def __init__(self, wl: Workload, g: GraphT, dtype, device, name: str = "md_accel"):
        from md_accel.ops import TensorProductConv

        self.conv = TensorProductConv(wl.irreps_in1, wl.irreps_in2, wl.irreps_out, wl.instructions).to(
            device=device, dtype=dtype)
        self.g, self.name = g, name

    def run(self, x, y, w):
        return self.conv(x, y, w, self.g.src, self.g.dst, self.g.num_nodes, graph=self.g.md_graph())

    @contextlib.contextmanager
    def settings(self) -> Iterator[None]:
        from md_accel.ops import set_dbwd_in_gg_w, set_deterministic, set_rows_in_grad_w

        if self.name not in self.VARIANTS:
            yield
            return
        deterministic, gw_rows, in_gg_w = self.VARIANTS[self.name]
        previous = set_deterministic(deterministic), set_rows_in_grad_w(gw_rows), set_dbwd_in_gg_w(in_gg_w)
        try:
            yield
        finally:
            set_deterministic(previous[0])
            set_rows_in_grad_w(previous[1])
            set_dbwd_in_gg_w(previous[2])


def _cue_group():
    """e3nn's basis for cuEquivariance (mace's ``O3_e3nn``), so outputs are comparable; without
    mace the native basis (same cost, no correctness check)."""
    import cuequivariance as cue

    try:
        from mace.tools.cg import O3_e3nn

        return O3_e3nn, True
    except Exception:  # noqa: BLE001
        return cue.O3, False


class CueqImpl(Impl):
    """cuEquivariance's fused conv as mace-torch builds it: channel-wise tensor product
    polynomial, sender gather and receiver scatter done inside the kernel (uniform_1d)."""

    name = "cueq"

    def __init__(self, wl: Workload, g: GraphT, dtype, device):
        import cuequivariance as cue
        import cuequivariance_torch as cuet

        group, self.comparable = _cue_group()
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # O3_e3nn takes its coefficients from e3nn in the default dtype
        try:
            desc = cue.descriptors.channelwise_tensor_product(
                cue.Irreps(group, wl.irreps_in1), cue.Irreps(group, wl.irreps_in2), cue.Irreps(group, wl.irreps_out))
        finally:
            torch.set_default_dtype(default)
        muls = [mul for mul, _ in parse_irreps(wl.irreps_in1)]
        if len(set(muls)) == 1:
            poly = desc.flatten_coefficient_modes().squeeze_modes().polynomial
        else:
            # uniform_1d needs one segment extent per operand: mixed multiplicities (SevenNet's
            # 128x0e+64x1e+32x2e) split into channel blocks of their gcd, as sevenn builds it
            gcd = math.gcd(*muls)
            poly = desc.polynomial.flatten_modes("ijk").squeeze_modes("v")
            poly = poly.apply_fn(lambda op, stp: (op, stp.split_mode("u", gcd)))
        method = "uniform_1d" if torch.device(device).type == "cuda" else "naive"
        self.m = cuet.SegmentedPolynomial(poly, method=method, math_dtype=dtype).to(device)
        self.method = self.m.method
        if torch.device(device).type == "cuda" and self.method != "uniform_1d":
            raise RuntimeError(f"cuEquivariance fell back to method {self.method!r} (cuequivariance_ops missing?)")
        if poly.inputs[0].size != wl.weight_numel:
            raise RuntimeError(f"weight count {poly.inputs[0].size} != {wl.weight_numel}")
        self.g = g
        self.p_in = layout_perm(wl.irreps_in1, True).to(device)
        self.p_out = layout_perm(wl.irreps_out, False).to(device)

    def prepare(self, x, y, w):
        return x.index_select(1, self.p_in), y, w

    def run(self, x, y, w):
        return self.m([w, x, y], {1: self.g.src}, {0: x}, {0: self.g.dst})[0]

    def to_e3nn(self, out):
        return out.index_select(1, self.p_out)


class OeqImpl(Impl):
    """OpenEquivariance's fused TensorProductConv: atomic, or deterministic (receiver-sorted
    edges + the by-sender permutation)."""

    def __init__(self, wl: Workload, g: GraphT, dtype, device, deterministic: bool):
        if torch.device(device).type != "cuda":
            raise RuntimeError("OpenEquivariance needs CUDA")
        import openequivariance as oeq

        self.name = "oeq_det" if deterministic else "oeq_atomic"
        npd = np.float64 if dtype == torch.float64 else np.float32
        tpp = oeq.TPProblem(wl.irreps_in1, wl.irreps_in2, wl.irreps_out, wl.instructions,
                            shared_weights=False, internal_weights=False, irrep_dtype=npd, weight_dtype=npd)
        self.conv = oeq.TensorProductConv(tpp, deterministic=deterministic)
        self.g, self.deterministic = g, deterministic

    def prepare(self, x, y, w):
        return x, y, self.conv.reorder_weights_from_e3nn(w, has_batch_dim=True)

    def run(self, x, y, w):
        if self.deterministic:
            return self.conv(x, y, w, self.g.dst, self.g.src, self.g.src_perm)
        return self.conv(x, y, w, self.g.dst, self.g.src)


def make_impl(name: str, wl: Workload, g: GraphT, dtype, device) -> Impl:
    if name == "e3nn":
        return E3nnImpl(wl, g, dtype, device)
    if name == "md_accel" or name in MdAccelImpl.VARIANTS:
        return MdAccelImpl(wl, g, dtype, device, name)
    if name == "cueq":
        return CueqImpl(wl, g, dtype, device)
    if name in ("oeq_det", "oeq_atomic"):
        return OeqImpl(wl, g, dtype, device, deterministic=name == "oeq_det")
    raise ValueError(f"unknown implementation {name!r}")


# --- inputs, passes, checks ---------------------------------------------------------------------
def inputs(wl: Workload, g: GraphT, dtype, device, seed: int = 0):
    """x [N, dim1] ~ N(0,1); y = real spherical harmonics (component normalised) of the edge
    vectors, or N(0,1) when e3nn is missing; w [E, weights] ~ N(0,1). Drawn on ``device`` in ``dtype``
    (the same seed gives the same values on one kind of device): mace_large's float64 weights, 679M
    numbers, took ~11 s on a CPU core, the better part of a workload's setup in a tuning sweep."""
    gen = torch.Generator(device=device).manual_seed(seed)
    d1, d2, _ = wl.dims

    def normal(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype, device=device)

    x = normal(g.num_nodes, d1)
    w = normal(g.num_edges, wl.weight_numel)
    try:
        from e3nn import o3

        y = o3.spherical_harmonics(wl.irreps_in2, g.vec.cpu(), normalize=True,
                                   normalization="component").to(device=device, dtype=dtype)
    except ImportError:
        y = normal(g.num_edges, d2)
    return x, y, w


class SumOfSquares(torch.autograd.Function):
    """sum(f * f) with the least memory traffic autograd allows: one read of f forward, one read and one
    write backward. Written as ``(f * f).sum()``, autograd runs nine passes over f (the product, its sum,
    and the product's two gradients and their sum; session 27: 6.0 of the 11.0 ms double-backward pass of
    mace_mp0_medium float32 on an H100, 2.2 this way), the same work for every implementation, which
    hid their differences."""

    @staticmethod
    def forward(ctx, f: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(f)
        flat = f.reshape(-1)
        return torch.dot(flat, flat)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (f,) = ctx.saved_tensors
        return f * (2 * grad)


def dbwd_loss(first: Sequence[torch.Tensor]) -> torch.Tensor:
    """The double-backward pass's loss: the sum of the squares of the first gradients."""
    return sum(SumOfSquares.apply(f) for f in first)


def run_pass(impl: Impl, kind: str, args: Sequence[torch.Tensor], grad_out: torch.Tensor) -> Callable[[], object]:
    """A closure computing one pass on prepared leaf tensors."""
    if kind == "fwd":
        plain = [a.detach() for a in args]

        def fwd():
            with torch.no_grad():
                return impl.run(*plain)

        return fwd
    leaves = [a.detach().requires_grad_(True) for a in args]
    if kind == "fwd_bwd":
        return lambda: torch.autograd.grad(impl.run(*leaves), leaves, grad_out)

    def dbwd():
        first = torch.autograd.grad(impl.run(*leaves), leaves, grad_out, create_graph=True)
        return torch.autograd.grad(dbwd_loss(first), leaves)

    return dbwd


def loss_alone(shapes: Sequence[Tuple[int, ...]], dtype, device) -> Callable[[], object]:
    """The double-backward pass's loss (dbwd_loss) without any convolution, on three leaves shaped
    like the first gradients, and its gradient back to them."""
    firsts = [torch.randn(s, dtype=dtype, device=device).requires_grad_(True) for s in shapes]

    def fn():
        return torch.autograd.grad(dbwd_loss(firsts), firsts)

    return fn


def through_layouts(impl: Impl, x, y, w, grad_out) -> Tuple[torch.Tensor, ...]:
    """Forward output, first gradients and double-backward gradients w.r.t. e3nn-layout inputs."""
    leaves = [t.detach().requires_grad_(True) for t in (x, y, w)]
    out = impl.to_e3nn(impl.run(*impl.prepare(*leaves)))
    first = torch.autograd.grad(out, leaves, grad_out, create_graph=True)
    second = torch.autograd.grad(dbwd_loss(first), leaves)
    return (out.detach(),) + tuple(f.detach() for f in first) + tuple(second)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def make_graph(spec: str) -> Dict:
    kind, *rest = spec.split(":")
    if kind == "cu":
        n = int(rest[0]) if rest else 4000
        r = float(rest[1]) if len(rest) > 1 else 6.0
        return common.copper_graph(n, r)
    if kind in ("random", "random_sym"):
        return common.random_graph(int(rest[0]), int(rest[1]), symmetric=kind == "random_sym")
    raise ValueError(f"graph spec must be cu:ATOMS:RCUT, random:NODES:EDGES or random_sym:NODES:EDGES, got {spec!r}")


# --- the run ------------------------------------------------------------------------------------
REFERENCE_FORMAT = 1  # bump when what a cached reference holds changes (through_layouts, dbwd_loss)


def reference(wl: Workload, gc: GraphT, device, cache_dir: Optional[str] = None, log=None) -> Dict:
    """The check's inputs on the check graph and e3nn's float64 outputs and gradients for them (or why
    e3nn failed): one per workload, shared by its dtypes. ``cache_dir``: kept there between runs, keyed by
    the inputs' bytes, the workload, e3nn's version and REFERENCE_FORMAT (tuning sweeps run the same cells
    many times, and e3nn's float64 double backward is most of a cell's setup); a file that does not load
    is recomputed."""
    say = log or (lambda _s: None)
    gen = torch.Generator(device="cpu").manual_seed(2)
    ref = {"inputs": inputs(wl, gc, torch.float64, device, seed=1) + (
        torch.randn(gc.num_nodes, wl.dims[2], generator=gen, dtype=torch.float64).to(device),)}
    path = None
    if cache_dir:
        digest = hashlib.sha256(repr((REFERENCE_FORMAT, wl, common.package_version("e3nn"))).encode())
        for t in (gc.src, gc.dst, *ref["inputs"]):
            digest.update(t.cpu().numpy().tobytes())
        path = os.path.join(cache_dir, f"{wl.name}-{digest.hexdigest()[:20]}.pt")
        try:
            ref["outputs"] = tuple(t.to(device) for t in torch.load(path, weights_only=True))
            say(f"  e3nn reference: {path}")
            return ref
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            say(f"  e3nn reference: {path} did not load ({common.failure(e)}), recomputed")
    try:
        ref["outputs"] = through_layouts(E3nnImpl(wl, gc, torch.float64, device), *ref["inputs"])
        say("  e3nn reference: computed")
    except Exception as e:  # noqa: BLE001
        ref["error"] = common.failure(e)
    if path and "outputs" in ref:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        torch.save([t.cpu() for t in ref["outputs"]], tmp)
        os.replace(tmp, path)
    return ref


def bench_workload(wl: Workload, dtype, impl_names, g: GraphT, gc: GraphT, device, args, budget, bw, log,
                   check_ref: Dict):
    """``check_ref``: ``reference(wl, gc, device)``."""
    dname = str(dtype).removeprefix("torch.")
    x, y, w = inputs(wl, g, dtype, device)
    grad_out = torch.randn(g.num_nodes, wl.dims[2], dtype=dtype, device=device)
    floors = byte_floor(wl, g.num_nodes, g.num_edges, torch.finfo(dtype).bits // 8)
    xc, yc, wc, goc = check_ref["inputs"]
    ref, ref_error = check_ref.get("outputs"), check_ref.get("error")
    loss_ms = None
    if "dbwd" in args.passes:
        try:
            loss_ms = common.time_gpu(loss_alone([t.shape for t in (x, y, w)], dtype, device), device, args.warmup,
                                      args.repeats, min_seconds=args.min_seconds)["median_ms"]
            log(f"  the double backward's loss alone: {loss_ms:.3f} ms")
        except Exception as e:  # noqa: BLE001
            log(f"  the double backward's loss alone: {common.failure(e)}")
    records, checks = [], []
    for name in impl_names:
        base = {"workload": wl.name, "dtype": dname, "impl": name}
        try:
            impl = make_impl(name, wl, g, dtype, device)
        except Exception as e:  # noqa: BLE001
            reason = common.failure(e)
            log(f"  {name:10s} setup failed: {reason}")
            checks.append({**base, "status": reason})
            records += [{**base, "pass": p, "status": reason} for p in args.passes]
            common.release(device)
            continue
        with impl.settings():  # the implementation's global settings, set outside every timed call
            # correctness on the check graph (same dtype as timed, compared with e3nn float64)
            chk = {**base, "status": "ok"}
            try:
                if ref is None:
                    raise RuntimeError(f"no e3nn reference ({ref_error})")
                if getattr(impl, "comparable", True) is False:
                    raise RuntimeError("cuEquivariance basis differs from e3nn (mace's O3_e3nn not importable)")
                impl_c = impl.with_graph(gc)
                got = through_layouts(impl_c, *(t.to(dtype) for t in (xc, yc, wc, goc)))
                errs = [rel_err(a, b) for a, b in zip(got, ref)]
                chk.update(fwd=errs[0], bwd=max(errs[1:4]), dbwd=max(errs[4:7]),
                           bwd_each=errs[1:4], dbwd_each=errs[4:7])
                del impl_c, got
            except Exception as e:  # noqa: BLE001
                chk["status"] = common.failure(e)
            checks.append(chk)
            log(f"  {name:10s} check: " + (f"fwd {chk['fwd']:.1e} bwd {chk['bwd']:.1e} dbwd {chk['dbwd']:.1e}"
                                           if "fwd" in chk else chk["status"]))
            try:
                prepared = impl.prepare(x, y, w)
            except Exception as e:  # noqa: BLE001
                reason = common.failure(e)
                records += [{**base, "pass": p, "status": reason} for p in args.passes]
                continue
            for kind in args.passes:
                rec = {**base, "pass": kind, "status": "ok"}
                try:
                    fn = run_pass(impl, kind, prepared, grad_out)
                    t0 = time.perf_counter()
                    fn()
                    common.sync(device)
                    once = time.perf_counter() - t0
                    timed_s = max(once * args.repeats, args.min_seconds)
                    if not budget.allows(timed_s + once * max(args.warmup, 1) + common.WARMUP_S + 1.0):
                        raise TimeoutError(f"skipped: time budget (one call {once * 1e3:.0f} ms)")
                    window: List[str] = []
                    rec.update(common.time_gpu(fn, device, args.warmup, args.repeats, window=window,
                                               min_seconds=args.min_seconds))
                    rec["timed"] = window  # for smi_join.py: the GPU's clocks meanwhile
                    if args.kernel_times and torch.device(device).type == "cuda":
                        try:
                            rec["kernels"] = common.kernel_times(fn, args.repeats)
                        except Exception as e:  # noqa: BLE001  (the timing above still stands)
                            log(f"  {name:10s} {kind:7s} no kernel times: {common.failure(e)}")
                    rec["peak_bytes"] = common.peak_memory(fn, device)
                    if kind == "dbwd" and loss_ms is not None:
                        rec.update(loss_ms=loss_ms, op_ms=rec["median_ms"] - loss_ms)
                    if kind in floors:
                        rec["bytes_min"] = floors[kind]
                        rec["bytes_min_per_edge"] = floors[kind] / g.num_edges
                        if bw:
                            rec["floor_ms"] = floors[kind] / (bw * 1e9) * 1e3
                            rec["floor_fraction"] = rec["floor_ms"] / rec["median_ms"]
                except Exception as e:  # noqa: BLE001
                    rec["status"] = "budget" if isinstance(e, TimeoutError) else common.failure(e)
                    common.release(device)
                records.append(rec)
                log(f"  {name:10s} {kind:7s} " + (f"{rec['median_ms']:9.3f} ms" if "median_ms" in rec else rec["status"])
                    + (f"  peak {rec['peak_bytes'] / 2**30:.2f} GiB" if rec.get("peak_bytes") else "")
                    + (f"  (op {rec['op_ms']:.3f} ms)" if "op_ms" in rec else ""))
                if rec.get("kernels"):
                    log(kernel_lines(rec["kernels"]))
        del impl, prepared
        common.release(device)
    return records, checks


def kernel_lines(kernels: Dict, top: int = 6, indent: str = " " * 13, width: int = 90) -> str:
    """``--kernel-times`` (and pass_breakdown.py): the GPU's busy time per call (the kernels' sum, against the timed
    median: the rest is the device idle, waiting for the host) and the ``top`` longest kernels, names cut at
    ``width``."""
    busy = sum(k["us"] for k in kernels.values()) / 1e3
    lines = [f"{indent}kernels busy {busy:.3f} ms per call"]
    for kname, k in sorted(kernels.items(), key=lambda kv: -kv[1]["us"])[:top]:
        lines.append(f"{indent}{k['us'] / 1e3:8.3f} ms  x{k['launches']:<4g} {kname[:width]}")
    return "\n".join(lines)


def cell(r: Dict) -> str:
    """A table cell: the median, with the implementation's own share of a double-backward pass."""
    if "median_ms" not in r:
        return r["status"][:40]
    return common.fmt_ms(r["median_ms"]) + (f" (op {common.fmt_ms(r['op_ms'])})" if "op_ms" in r else "")


def table(records: List[Dict], wl: Workload, dtypes: Sequence[str], impls: Sequence[str], floors: Dict) -> str:
    header = ["impl"] + [f"{d} {p}" for d in dtypes for p in PASSES]
    rows = []
    for name in impls:
        row = [name]
        for d in dtypes:
            for p in PASSES:
                r = next((r for r in records if r["workload"] == wl.name and r["dtype"] == d and r["impl"] == name
                          and r["pass"] == p), None)
                row.append("" if r is None else cell(r))
        rows.append(row)
    rows.append(["byte floor"] + [common.fmt_ms(floors.get((d, p))) if (d, p) in floors else "" for d in dtypes
                                   for p in PASSES])
    return common.markdown_table(header, rows)


def plot(records: List[Dict], path: str, workloads, dtypes, impls) -> None:
    plt = common.pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(len(dtypes), len(workloads), figsize=(3.2 * len(workloads), 3.2 * len(dtypes)),
                             squeeze=False)
    for i, d in enumerate(dtypes):
        for j, wl in enumerate(workloads):
            ax = axes[i][j]
            for k, name in enumerate(impls):
                vals = []
                for p in PASSES:
                    r = next((r for r in records if r["workload"] == wl and r["dtype"] == d and r["impl"] == name
                              and r["pass"] == p and "median_ms" in r), None)
                    vals.append(r["median_ms"] if r else np.nan)
                ax.bar(np.arange(len(PASSES)) + k * 0.8 / len(impls), vals, 0.8 / len(impls), label=name)
            ax.set_yscale("log")
            ax.set_xticks(np.arange(len(PASSES)) + 0.4 - 0.4 / len(impls), PASSES)
            ax.set_title(f"{wl} {d}", fontsize=8)
            ax.set_ylabel("ms")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"[bench] wrote {path}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--passes", default=",".join(PASSES), help="a subset of " + ",".join(PASSES))
    ap.add_argument("--graph", default="cu:4000:6.0",
                    help="cu:ATOMS:RCUT, random:NODES:EDGES (directed) or random_sym:NODES:EDGES (both directions)")
    ap.add_argument("--check-nodes", type=int, default=0, help="nodes of the correctness subgraph (default auto)")
    ap.add_argument("--reference-cache", default=None,
                    help="directory keeping e3nn's float64 check results between runs (tuning sweeps)")
    common.add_timing_args(ap, "kernels", "cell")
    ap.add_argument("--kernel-times", action="store_true",
                    help="after each timing, each kernel's device time per call (torch.profiler), logged and recorded")
    args = ap.parse_args(argv)
    args.passes = args.passes.split(",")
    if set(args.passes) - set(PASSES):
        ap.error(f"--passes: a subset of {','.join(PASSES)}")
    budget = common.Budget(args.budget)
    device = torch.device(args.device)
    args.min_seconds = common.min_seconds(args.min_seconds, device)
    out = common.out_dir(args.out)
    log = lambda s: print(s, flush=True)  # noqa: E731

    t0 = time.perf_counter()
    gnp = make_graph(args.graph)
    g = GraphT(gnp, device)
    n_check = args.check_nodes or max(8, min(g.num_nodes, 300))
    gc = GraphT(common.subgraph(gnp, n_check), device)
    log(f"[kernels] graph: {gnp['name']}: {g.num_nodes} nodes, {g.num_edges} edges "
        f"({g.num_edges / g.num_nodes:.1f}/node), built in {time.perf_counter() - t0:.1f} s; "
        f"check subgraph {gc.num_nodes} nodes, {gc.num_edges} edges")
    env = common.environment(device)
    try:
        from md_accel.ops import _cuda

        env["md_accel_cuda_library"] = _cuda.library_path() if device.type == "cuda" else None
        env["md_accel_cuda_error"] = _cuda.load_error()
    except Exception as e:  # noqa: BLE001
        env["md_accel_cuda_error"] = common.failure(e)
    bw = common.copy_bandwidth(device)
    log(f"[kernels] {env['device']}, torch {env['torch']}, copy bandwidth "
        + (f"{bw:.0f} GB/s" if bw else "n/a"))

    workloads = [WORKLOADS[w] for w in args.workloads.split(",") if w]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
    impls = [i for i in args.impls.split(",") if i]
    records, checks = [], []

    def save():  # after every workload and dtype: a run stopped by its time limit keeps what it measured
        result = {"env": env, "copy_bandwidth_gbs": bw, "args": vars(args),
                  "graph": {"name": gnp["name"], "num_nodes": g.num_nodes, "num_edges": g.num_edges,
                            "check_nodes": gc.num_nodes, "check_edges": gc.num_edges},
                  "workloads": {wl.name: {**wl._asdict(), "paths": len(wl.instructions),
                                          "weight_numel": wl.weight_numel, "dims": wl.dims} for wl in workloads},
                  "results": records, "checks": checks}
        common.write_json(os.path.join(out, f"{args.tag}.json"), result)
        return result

    for wl in workloads:
        check_ref = None
        for dtype in dtypes:
            log(f"[kernels] {wl.name} {str(dtype).removeprefix('torch.')}: {wl.irreps_in1} x {wl.irreps_in2} -> "
                f"{len(wl.instructions)} paths, {wl.weight_numel} weights/edge")
            if not budget.allows(5):
                records += [{"workload": wl.name, "dtype": str(dtype).removeprefix("torch."), "impl": i, "pass": p,
                             "status": "budget"} for i in impls for p in args.passes]
                continue
            check_ref = check_ref or reference(wl, gc, device, args.reference_cache, log)
            r, c = bench_workload(wl, dtype, impls, g, gc, device, args, budget, bw, log, check_ref)
            records += r
            checks += c
            save()
    result = save()

    dnames = [str(d).removeprefix("torch.") for d in dtypes]
    md = [f"{gnp['name']} ({g.num_nodes} nodes, {g.num_edges} edges), {env['device']}, "
          f"copy bandwidth {bw:.0f} GB/s, ms (median of {args.repeats} calls or more, over at least "
          f"{args.min_seconds:g} s)" if bw else gnp["name"]]
    for wl in workloads:
        floors = {(r["dtype"], r["pass"]): r["floor_ms"] for r in records
                  if r["workload"] == wl.name and "floor_ms" in r}
        md.append(f"\n**{wl.name}** ({wl.irreps_in1} x {wl.irreps_in2}, {len(wl.instructions)} paths, "
                  f"{wl.weight_numel} weights/edge)\n\n" + table(records, wl, dnames, impls, floors))
    chk_rows = [[c["workload"], c["dtype"], c["impl"]] + ([f"{c['fwd']:.1e}", f"{c['bwd']:.1e}", f"{c['dbwd']:.1e}"]
                if "fwd" in c else [c["status"][:60], "", ""]) for c in checks]
    md.append("\nmax relative error vs e3nn float64 (check subgraph)\n\n"
              + common.markdown_table(["workload", "dtype", "impl", "fwd", "bwd", "dbwd"], chk_rows))
    text = "\n".join(md)
    common.append_markdown(os.path.join(out, "tables.md"), f"Kernels ({args.tag})", text)
    plot(records, os.path.join(out, f"{args.tag}.png"), [wl.name for wl in workloads], dnames, impls)
    print(text, flush=True)
    return result


if __name__ == "__main__":
    main()
