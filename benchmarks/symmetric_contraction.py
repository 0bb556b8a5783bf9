"""MACE's symmetric contraction alone, MACE-MP-0-medium layer-1 shape (input 128x(0e+1o+2e+3o),
outputs 128x0e+128x1o, correlation 3, 89 elements): md_accel (generated kernels, and the generic
ones) vs the dense U-tensor contraction (md_accel's former implementation), mace-torch's
``SymmetricContraction`` (e3nn) and cuEquivariance's (``cuequivariance_torch``, mace's own
arguments; with mace's original basis and with the reduced one mace uses by default).

Coupling tensors: mace's (``U_matrix_real``, float64) when mace-torch imports, else random ones
with the same shapes and sparsity (recorded as ``coupling``). Each implementation gets its input
in its native layout (not timed) and the weights need no gradient (MD); passes: ``fwd``,
``fwd_bwd`` (gradient to the input), ``fwd_bwd_w`` (input and weights: training). A correctness
check of md_accel (float64 reference on the CPU, and mace when available) precedes the timings.
Every implementation runs inside try/except: failures (OOM, missing package) are recorded.

    python benchmarks/symmetric_contraction.py [--nodes 4000,32000] [--dtypes float32,float64]
        [--impls md_accel,md_accel_generic,dense,mace_e3nn,cueq,cueq_reduced] [--repeats 20] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from md_accel.ops import _cuda, _sc_codegen  # noqa: E402
from md_accel.ops.sc_reference import components, sc_fwd_ref  # noqa: E402
from md_accel.ops.symmetric_contraction import SymmetricContraction  # noqa: E402

IRREPS_IN, IRREPS_OUT, CORRELATION, ELEMENTS, CHANNELS = "128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o", 3, 89, 128
IN_DIMS, OUT_DIMS, NUM_PARAMS = [1, 3, 5, 7], [1, 3], [[1, 4, 23], [1, 6, 51]]
NNZ = [[1, 16, 353], [3, 70, 2846]]  # of mace's U tensors
IMPLS = ("md_accel", "md_accel_generic", "dense", "mace_e3nn", "cueq", "cueq_reduced")
PASSES = ("fwd", "fwd_bwd", "fwd_bwd_w")


def coupling_tensors():
    """``(u[r][nu-1] float64, source)``: mace's tensors, or random ones of the same sparsity."""
    try:
        from mace.modules.symmetric_contraction import SymmetricContraction as MaceSC

        old = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            sc = MaceSC(IRREPS_IN, IRREPS_OUT, CORRELATION, num_elements=1, use_reduced_cg=False)
        finally:
            torch.set_default_dtype(old)
        return [[getattr(c, f"U_matrix_{nu}").double() for nu in range(1, c.correlation + 1)]
                for c in sc.contractions], "mace"
    except Exception as e:  # noqa: BLE001
        print(f"[bench] mace coupling tensors unavailable ({common.failure(e)}); random ones", flush=True)
    gen = torch.Generator().manual_seed(0)
    out = []
    for d, ks, zs in zip(OUT_DIMS, NUM_PARAMS, NNZ):
        ur = []
        for nu, (k, z) in enumerate(zip(ks, zs), start=1):
            shape = [d] + [16] * nu + [k]
            flat = torch.zeros(torch.Size(shape).numel(), dtype=torch.float64)
            flat[torch.randperm(flat.numel(), generator=gen)[:z]] = torch.randn(z, generator=gen, dtype=torch.float64)
            ur.append(flat.reshape(shape))
        out.append(ur)
    return out, "random"


def dense_contraction(u: List[List[torch.Tensor]], w: List[List[torch.Tensor]], xs: torch.Tensor,
                      species: torch.Tensor) -> torch.Tensor:
    """The dense contraction (md_accel's former implementation, mace's Horner form): ``xs [N, C, I]``,
    ``u[r][j]`` / ``w[r][j]`` highest order first; top order as one GEMM."""
    n, c, i = xs.shape
    outs = []
    for ur, wr in zip(u, w):
        out: Optional[torch.Tensor] = None
        for ut, wt in zip(ur, wr):
            k = wt.shape[1]
            z = (xs.unsqueeze(-1) * wt.index_select(0, species).transpose(1, 2).unsqueeze(2)).reshape(n, c, i * k)
            t = torch.matmul(z, ut.reshape(-1, i * k).t())
            if out is not None:
                t = t + torch.matmul(out.reshape(n, c, -1, i), xs.unsqueeze(-1)).squeeze(-1)
            out = t
        outs.append(out.reshape(n, -1))
    return torch.cat(outs, dim=1)


class Impl:
    """``prepare(x, species) -> native inputs``, ``run(*inputs) -> out``, ``weights`` (parameters)."""

    def __init__(self, prepare: Callable, run: Callable, weights: List[torch.Tensor], note: str = ""):
        self.prepare, self.run, self.weights, self.note = prepare, run, weights, note


def make_impl(name: str, u, dtype, dev) -> Impl:
    gen = torch.Generator().manual_seed(1)
    w = [[torch.randn(ELEMENTS, t.shape[-1], CHANNELS, generator=gen, dtype=torch.float64) for t in ur] for ur in u]
    if name in ("md_accel", "md_accel_generic"):
        m = SymmetricContraction.from_tensors(IN_DIMS, u, w).to(dev, dtype)  # builds/loads the generated kernels
        m.requires_grad_(False)
        generic = name == "md_accel_generic"

        def run(x, species):
            previous = _sc_codegen.set_specialised(not generic)
            try:
                return m(x, species)
            finally:
                _sc_codegen.set_specialised(previous)
        return Impl(lambda x, s: (x, s), run, [o.w for c in m.contractions for o in c.orders],
                    f"{m.sc_terms.shape[0]} terms")
    if name == "dense":
        ud = [[t.to(dev, dtype) for t in reversed(ur)] for ur in u]
        wd = [[t.to(dev, dtype) for t in reversed(wr)] for wr in w]
        return Impl(lambda x, s: (components(x, IN_DIMS), s), lambda xs, s: dense_contraction(ud, wd, xs, s),
                    [t for wr in wd for t in wr])
    if name == "mace_e3nn":
        from mace.modules.symmetric_contraction import SymmetricContraction as MaceSC

        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            sc = MaceSC(IRREPS_IN, IRREPS_OUT, CORRELATION, num_elements=ELEMENTS, use_reduced_cg=False).to(dev)
        finally:
            torch.set_default_dtype(old)
        sc.requires_grad_(False)
        return Impl(lambda x, s: (components(x, IN_DIMS), torch.nn.functional.one_hot(s, ELEMENTS).to(dtype)),
                    lambda xs, onehot: sc(xs, onehot), list(sc.parameters()))
    if name in ("cueq", "cueq_reduced"):
        import cuequivariance as cue
        import cuequivariance_torch as cuet

        sc = cuet.SymmetricContraction(cue.Irreps("O3", IRREPS_IN), cue.Irreps("O3", IRREPS_OUT), layout_in=cue.ir_mul,
                                       layout_out=cue.mul_ir, contraction_degree=CORRELATION, num_elements=ELEMENTS,
                                       original_mace=name == "cueq", dtype=dtype, math_dtype=dtype).to(dev)
        sc.requires_grad_(False)
        # mace's call: [N, C, I] -> ir_mul [N, I * C], species as int32 indices
        return Impl(lambda x, s: (components(x, IN_DIMS).transpose(1, 2).flatten(1).contiguous(), s.to(torch.int32)),
                    lambda xf, idx: sc(xf, idx), list(sc.parameters()),
                    "original basis" if name == "cueq" else "reduced basis (mace's default)")
    raise ValueError(f"unknown implementation {name!r} (known: {', '.join(IMPLS)})")


def check_md_accel(u, dev) -> Dict:
    """md_accel (generated and generic kernels) vs the float64 CPU reference and mace, 64 nodes."""
    gen = torch.Generator().manual_seed(2)
    w = [[torch.randn(ELEMENTS, t.shape[-1], CHANNELS, generator=gen, dtype=torch.float64) for t in ur] for ur in u]
    ref = SymmetricContraction.from_tensors(IN_DIMS, u, w)
    x = torch.randn(64, CHANNELS * 16, generator=gen, dtype=torch.float64)
    species = torch.randint(ELEMENTS, (64,), generator=gen)
    want = sc_fwd_ref(x, species, ref.weights().detach(), ref.ref_mono, ref.ref_coeff, ref.ref_group_k,
                      ref.ref_group_sel, IN_DIMS, OUT_DIMS)
    dense = dense_contraction([list(reversed(ur)) for ur in u], [list(reversed(wr)) for wr in w],
                              components(x, IN_DIMS), species)
    out: Dict = {"reference_vs_dense": ((want - dense).abs().max() / dense.abs().max()).item()}
    for dtype in (torch.float64, torch.float32):
        m = SymmetricContraction.from_tensors(IN_DIMS, u, w).to(dev, dtype)
        for generic in (False, True):
            previous = _sc_codegen.set_specialised(not generic)
            try:
                got = m(x.to(dev, dtype), species.to(dev)).double().cpu()
            finally:
                _sc_codegen.set_specialised(previous)
            key = f"{'generic' if generic else 'generated'}_{str(dtype).removeprefix('torch.')}"
            out[key] = ((got - want).abs().max() / want.abs().max()).item()
    return out


def bench(impl: Impl, n: int, dtype, dev, repeats: int) -> Dict[str, Dict]:
    gen = torch.Generator(device=dev).manual_seed(3)
    x = torch.randn(n, CHANNELS * 16, device=dev, dtype=dtype, generator=gen)
    species = torch.randint(ELEMENTS, (n,), device=dev, generator=gen)
    inputs = impl.prepare(x, species)
    xin = inputs[0].detach().clone()
    rest = inputs[1:]
    out = impl.run(xin, *rest)
    g = torch.randn(out.shape, device=dev, dtype=dtype, generator=gen)
    del out
    results: Dict[str, Dict] = {}
    for p in PASSES:
        try:
            for t in impl.weights:
                t.requires_grad_(p == "fwd_bwd_w")
            xin.requires_grad_(p != "fwd")
            if p == "fwd":
                def fn():
                    with torch.no_grad():
                        return impl.run(xin, *rest)
            else:
                wrt = [xin] + (list(impl.weights) if p == "fwd_bwd_w" else [])

                def fn():
                    return torch.autograd.grad(impl.run(xin, *rest), wrt, g)
            t = common.time_gpu(fn, dev, warmup=3, repeats=repeats)
            t["peak_bytes"] = common.peak_memory(fn, dev)
            results[p] = t
        except Exception as e:  # noqa: BLE001
            results[p] = {"error": common.failure(e)}
            common.release(dev)
    for t in impl.weights:
        t.requires_grad_(False)
    return results


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="4000,32000")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    dev = torch.device("cuda")
    if not _cuda.load(verbose=True):
        raise SystemExit(f"md_accel CUDA library not available: {_cuda.load_error()}")
    u, source = coupling_tensors()
    report: Dict = {"env": common.environment(dev), "coupling": source, "shape": {
        "irreps_in": IRREPS_IN, "irreps_out": IRREPS_OUT, "correlation": CORRELATION, "elements": ELEMENTS},
        "results": []}
    t0 = time.perf_counter()
    report["check"] = check_md_accel(u, dev)  # also builds the generated kernels (cached on disk)
    report["build_and_check_s"] = time.perf_counter() - t0
    print(f"[bench] coupling tensors: {source}; check {report['check']}", flush=True)
    rows = []
    for dtype_name in a.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for name in a.impls.split(","):
            try:
                impl = make_impl(name, u, dtype, dev)
            except Exception as e:  # noqa: BLE001
                report["results"].append({"impl": name, "dtype": dtype_name, "error": common.failure(e)})
                rows.append([name, dtype_name, "–", common.failure(e)[:60]] + [""] * len(PASSES))
                common.release(dev)
                continue
            for n in (int(v) for v in a.nodes.split(",")):
                try:
                    res = bench(impl, n, dtype, dev, a.repeats)
                except Exception as e:  # noqa: BLE001  (e.g. OOM on the first call)
                    res = {p: {"error": common.failure(e)} for p in PASSES}
                    common.release(dev)
                report["results"].append({"impl": name, "dtype": dtype_name, "nodes": n, "note": impl.note,
                                          "passes": res})
                cells = [common.fmt_ms(r.get("median_ms")) if "error" not in r else r["error"][:30]
                         for r in (res[p] for p in PASSES)]
                peak = res["fwd_bwd"].get("peak_bytes")
                rows.append([name, dtype_name, n, f"{peak / 2**30:.2f}" if peak else "–"] + cells)
                print(f"[bench] {name} {dtype_name} {n}: {cells}", flush=True)
            del impl
            common.release(dev)
    table = common.markdown_table(["impl", "dtype", "nodes", "fwd+bwd peak GiB"] + [f"{p} ms" for p in PASSES], rows)
    print(table, flush=True)
    out = common.out_dir(a.out)
    common.write_json(os.path.join(out, "symmetric_contraction.json"), report)
    with open(os.path.join(out, "symmetric_contraction.md"), "w") as f:
        f.write(f"Coupling tensors: {source}; md_accel check: {report['check']}\n\n{table}\n")


if __name__ == "__main__":
    main()
