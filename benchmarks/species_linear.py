"""Per-species equivariant linear (MACE skip connection, NequIP/SevenNet-style self-connection):
md_accel's fused op vs the gather + einsum formulation (each node's weight row gathered, then a
batched product) vs e3nn's FullyConnectedTensorProduct with one-hot species (MACE's skip_tp).

For each workload, node count and dtype: a float64 correctness check of every implementation
against the gather + einsum reference on 512 nodes (max relative error of the forward output),
then CUDA-event timings (median) of forward, forward + backward to x (MD forces) and forward +
backward to x and W (training), with peak memory. Species are random over ``--species`` elements.
Failures (OOM, ...) are recorded and the run goes on.

    python benchmarks/species_linear.py OUT_DIR [--nodes 4096,32768] [--dtypes float32,float64]
        [--workloads mace_skip,...] [--impls md_accel,gather_einsum,e3nn_fctp] [--species 89]
        [--repeats 20]
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from md_accel.model.species_linear import SpeciesLinear  # noqa: E402

WORKLOADS = {
    "mace_skip": ("128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o+128x2e+128x3o"),
    "mace_to_hidden": ("128x0e+128x1o+128x2e+128x3o", "128x0e+128x1o"),
    "sevennet0": ("128x0e+64x1e+32x2e", "128x0e+64x1e+32x2e"),
    "sevennet_l3i5": ("64x0e+32x1o+32x2e+32x3o", "64x0e+32x1o+32x2e+32x3o"),
}
IMPLS = ("md_accel", "gather_einsum", "e3nn_fctp")
PASSES = ("fwd", "fwd_bwd_x", "fwd_bwd_xw")


def flops(m: SpeciesLinear, n: int) -> int:
    """Multiply-adds x 2 of one forward pass (the backward passes cost the same each)."""
    return 2 * n * sum(r[1] * r[3] * r[4] for r in m.ins)


class Impl:
    """``fn(x) -> out`` for one implementation, with its trainable weight."""

    def __init__(self, kind: str, m: SpeciesLinear, species: torch.Tensor):
        self.kind = kind
        self.species = species
        if kind == "md_accel":
            self.weight = m.weight
            self.fn = lambda x: m.forward_species(x, species)
        elif kind == "gather_einsum":
            self.weight = m.weight
            self.fn = lambda x: m.forward_species_reference(x, species)
        elif kind == "e3nn_fctp":
            self.weight, self.fn = _e3nn_fctp(m, species)
        else:
            raise ValueError(kind)


def _e3nn_fctp(m: SpeciesLinear, species: torch.Tensor):
    """e3nn FullyConnectedTensorProduct(x, S x 0e) with one-hot species; its weights set so it
    computes the same map (W[u, s, w] = W_s[u, w], path weights folded in)."""
    from e3nn import o3

    s_num = m.num_species
    old = torch.get_default_dtype()
    torch.set_default_dtype(m.weight.dtype)
    try:
        tp = o3.FullyConnectedTensorProduct(str(m.irreps_in), f"{s_num}x0e", str(m.irreps_out))
    finally:
        torch.set_default_dtype(old)
    tp = tp.to(m.weight.device)
    blocks = []
    for (i_off, mi, o, mo, d, w_off), pw, ins in zip(m.ins, m.path_weights, tp.instructions):
        l = m.irreps_in[ins.i_in1].ir.l
        c = o3.wigner_3j(l, 0, l, dtype=torch.float64)[0, 0, 0].item()
        w = m.weight.detach()[:, w_off: w_off + mi * mo].view(s_num, mi, mo).permute(1, 0, 2)
        blocks.append((w * (pw / (ins.path_weight * c))).reshape(-1))
    with torch.no_grad():
        tp.weight.copy_(torch.cat(blocks))
    one_hot = torch.nn.functional.one_hot(species, s_num).to(m.weight.dtype)
    return tp.weight, lambda x: tp(x, one_hot)


def passes(impl: Impl, x: torch.Tensor, g: torch.Tensor) -> Dict[str, Callable[[], object]]:
    def fwd():
        with torch.no_grad():
            return impl.fn(x)

    def fwd_bwd_x():
        xr = x.detach().requires_grad_()
        return torch.autograd.grad(impl.fn(xr), xr, g)

    def fwd_bwd_xw():
        xr = x.detach().requires_grad_()
        return torch.autograd.grad(impl.fn(xr), (xr, impl.weight), g)

    return {"fwd": fwd, "fwd_bwd_x": fwd_bwd_x, "fwd_bwd_xw": fwd_bwd_xw}


def check(kind: str, m: SpeciesLinear, dev, seed: int = 0) -> float:
    """Max relative error of the forward output vs gather + einsum, float64, 512 nodes."""
    gen = torch.Generator().manual_seed(seed)
    m64 = SpeciesLinear(m.irreps_in, m.irreps_out, m.num_species).to(dev, torch.float64)
    with torch.no_grad():
        m64.weight.copy_(torch.randn(m64.weight.shape, generator=gen, dtype=torch.float64))
    x = torch.randn(512, m64.dim_in, generator=gen, dtype=torch.float64).to(dev)
    species = torch.randint(0, m.num_species, (512,), generator=gen).to(dev)
    with torch.no_grad():
        out = Impl(kind, m64, species).fn(x)
        ref = m64.forward_species_reference(x, species)
    return ((out - ref).abs().max() / ref.abs().max()).item()


def run(args) -> Dict:
    dev = torch.device("cuda")
    results: List[Dict] = []
    for wname in args.workloads:
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            m = SpeciesLinear(*WORKLOADS[wname], args.species).to(dev, dtype)
            errors = {}
            for kind in args.impls:
                try:
                    errors[kind] = check(kind, m, dev)
                except Exception as e:  # noqa: BLE001
                    errors[kind] = common.failure(e)
                    common.release(dev)
            for n in args.nodes:
                gen = torch.Generator().manual_seed(n)
                x = torch.randn(n, m.dim_in, generator=gen).to(dev, dtype)
                g = torch.randn(n, m.dim_out, generator=gen).to(dev, dtype)
                species = torch.randint(0, args.species, (n,), generator=gen).to(dev)
                for kind in args.impls:
                    row = {"workload": wname, "dtype": dtype_name, "nodes": n, "impl": kind,
                           "species": args.species, "gflop_fwd": flops(m, n) / 1e9, "check_rel_err": errors[kind]}
                    try:
                        impl = Impl(kind, m, species)
                        for pname, fn in passes(impl, x, g).items():
                            first = common.time_gpu(fn, dev, warmup=1, repeats=1)["median_ms"]
                            reps = args.repeats if first < 200 else 3
                            t = common.time_gpu(fn, dev, warmup=2, repeats=reps)
                            row[pname + "_ms"] = t["median_ms"]
                            row[pname + "_peak_bytes"] = common.peak_memory(fn, dev)
                        row["fwd_tflops"] = flops(m, n) / (row["fwd_ms"] * 1e-3) / 1e12
                    except Exception as e:  # noqa: BLE001
                        row["error"] = common.failure(e)
                        common.release(dev)
                    results.append(row)
                    print(_line(row), flush=True)
                del x, g, species
                common.release(dev)
    return {"environment": common.environment(dev), "args": vars(args), "results": results}


def _line(r: Dict) -> str:
    err = r["check_rel_err"]
    err = f"{err:.1e}" if isinstance(err, float) else str(err)
    if "error" in r:
        return f"{r['workload']:15s} {r['dtype']:8s} N={r['nodes']:6d} {r['impl']:14s} FAILED {r['error']}"
    return (f"{r['workload']:15s} {r['dtype']:8s} N={r['nodes']:6d} {r['impl']:14s} fwd {r['fwd_ms']:9.3f} ms  "
            f"f+b(x) {r['fwd_bwd_x_ms']:9.3f}  f+b(x,W) {r['fwd_bwd_xw_ms']:9.3f}  "
            f"fwd {r['fwd_tflops']:6.2f} TFLOP/s  check {err}")


def table(data: Dict) -> str:
    rows = []
    for r in data["results"]:
        err = r["check_rel_err"]
        cells = [r["workload"], r["dtype"], r["nodes"], r["impl"]]
        if "error" in r:
            cells += [r["error"], "", "", "", "", ""]
        else:
            cells += [common.fmt_ms(r["fwd_ms"]), common.fmt_ms(r["fwd_bwd_x_ms"]), common.fmt_ms(r["fwd_bwd_xw_ms"]),
                      f"{r['fwd_tflops']:.2f}", f"{(r['fwd_bwd_x_peak_bytes'] or 0) / 2**20:.0f}",
                      f"{err:.1e}" if isinstance(err, float) else err]
        rows.append(cells)
    return common.markdown_table(["workload", "dtype", "nodes", "impl", "fwd ms", "fwd+bwd(x) ms",
                                  "fwd+bwd(x,W) ms", "fwd TFLOP/s", "peak MiB f+b(x)", "rel err f64"], rows)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="directory for species_linear.json / species_linear.md")
    p.add_argument("--nodes", default="4096,32768")
    p.add_argument("--dtypes", default="float32,float64")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--species", type=int, default=89)
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    common.comma_lists(args, ints=("nodes",), strs=("dtypes", "workloads", "impls"))
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/species_linear.py needs a CUDA device")
    data = run(args)
    title = f"species_linear ({data['environment']['device']})"
    common.write_results(common.out_dir(args.out), "species_linear", title, data, table(data))


if __name__ == "__main__":
    main()
