"""Equivariant ``Linear`` on CUDA: the whole map as one ``species_linear`` call (one species; the
float64 default) vs one GEMM per instruction over transposed copies of the l > 0 blocks (the
float32 default) vs e3nn's ``o3.Linear`` with the same weights, on the linears of the models
md_accel runs (SevenNet-l3i5, MACE-MP-0 medium), with biases where the model has them.

For each shape, dtype and node count: a float64 check of every implementation against the
per-block form (max relative error of the output), then CUDA-event timings (median) of the forward
and of forward + backward to x (MD forces), peak memory, and the forward's useful FLOP rate (true
multiply-adds, no Kronecker zeros). Failures are recorded and the run goes on.

    python benchmarks/linear.py OUT_DIR [--nodes 32000] [--dtypes float64,float32] [--shapes l3i5_out,...]
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from md_accel.model.linear import Linear  # noqa: E402

L3I5_HIDDEN = "128x0e+64x1e+32x2e+32x3e"
L3I5_SC = "256x0e+64x1e+32x2e+32x3e"
MACE = "128x0e+128x1o+128x2e+128x3o"
SHAPES = {  # irreps_in, irreps_out, biases
    "l3i5_in": (L3I5_HIDDEN, L3I5_HIDDEN, False),
    "l3i5_out": ("256x0e+480x1e+544x2e+480x3e", L3I5_SC, False),
    "l3i5_sc": (L3I5_HIDDEN, L3I5_SC, False),
    "mace_up": (MACE, MACE, False),
    "mace_to_hidden": ("128x0e+128x1o", "128x0e", True),
}
IMPLS = ("node_op", "per_block", "e3nn")


def flops(m: Linear, n: int) -> int:
    return 2 * n * sum(r[1] * r[3] * r[4] for r in m.ins)


def make(shape: str, dtype, dev, seed: int = 0) -> Linear:
    i, o, biases = SHAPES[shape]
    m = Linear(i, o, biases)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.weight.copy_(torch.randn(m.weight.shape, generator=gen))
        m.bias.copy_(torch.randn(m.bias.shape, generator=gen))
    return m.to(dev, dtype)


def forward(m: Linear, impl: str):
    """The implementation itself, whatever ``Linear.forward`` picks for the dtype."""
    if impl == "node_op":
        return m.forward_node_op
    if impl == "per_block":
        return m.forward_blocks
    if impl == "e3nn":
        return _e3nn(m)
    raise ValueError(f"unknown implementation {impl}")


def _e3nn(m: Linear):
    """e3nn's ``o3.Linear`` with ``m``'s weights (md_accel's ``Linear`` keeps e3nn's layout)."""
    from e3nn import o3

    old = torch.get_default_dtype()
    torch.set_default_dtype(m.weight.dtype)  # e3nn bakes constants in the default dtype
    try:
        lin = o3.Linear(str(m.irreps_in), str(m.irreps_out), biases=m.biases)
    finally:
        torch.set_default_dtype(old)
    lin = lin.to(m.weight.device)
    with torch.no_grad():
        lin.weight.copy_(m.weight)
        if m.bias_numel > 0:
            lin.bias.copy_(m.bias)
    return lin.requires_grad_(False)


def run(args) -> Dict:
    dev = torch.device("cuda")
    results: List[Dict] = []
    for shape in args.shapes:
        ref = make(shape, torch.float64, dev)
        x = torch.randn(512, ref.dim_in, dtype=torch.float64, device=dev)
        with torch.no_grad():
            want = ref.forward_blocks(x)
            errs = {impl: ((forward(ref, impl)(x) - want).abs().max() / want.abs().max()).item()
                    for impl in args.impls}
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            for n in args.nodes:
                x = torch.randn(n, ref.dim_in, device=dev, dtype=dtype)
                g = torch.randn(n, ref.dim_out, device=dev, dtype=dtype)
                for impl in args.impls:
                    m = make(shape, dtype, dev)
                    m.requires_grad_(False)
                    fn_impl = forward(m, impl)
                    row = {"shape": shape, "irreps_in": str(m.irreps_in), "irreps_out": str(m.irreps_out),
                           "dtype": dtype_name, "nodes": n, "impl": impl, "gflop_fwd": flops(m, n) / 1e9,
                           "check_rel_err_f64": errs[impl]}

                    def fwd():
                        with torch.no_grad():
                            return fn_impl(x)

                    def fwd_bwd_x():
                        xr = x.detach().requires_grad_()
                        return torch.autograd.grad(fn_impl(xr), xr, g)

                    try:
                        for pname, fn in (("fwd", fwd), ("fwd_bwd_x", fwd_bwd_x)):
                            row[pname + "_ms"] = common.time_gpu(fn, dev, warmup=2, repeats=args.repeats)["median_ms"]
                            row[pname + "_peak_bytes"] = common.peak_memory(fn, dev)
                        row["fwd_tflops"] = flops(m, n) / (row["fwd_ms"] * 1e-3) / 1e12
                    except Exception as e:  # noqa: BLE001
                        row["error"] = common.failure(e)
                        common.release(dev)
                    results.append(row)
                    print(_line(row), flush=True)
                del x, g
                common.release(dev)
    return {"environment": common.environment(dev), "args": vars(args), "results": results}


def _line(r: Dict) -> str:
    head = f"{r['shape']:15s} {r['dtype']:8s} N={r['nodes']:6d} {r['impl']:10s}"
    if "error" in r:
        return f"{head} FAILED {r['error']}"
    return (f"{head} fwd {r['fwd_ms']:8.3f} ms  f+b(x) {r['fwd_bwd_x_ms']:8.3f} ms  fwd {r['fwd_tflops']:6.2f} TFLOP/s"
            f"  check {r['check_rel_err_f64']:.1e}")


def table(data: Dict) -> str:
    rows = []
    for r in data["results"]:
        cells = [r["shape"], r["dtype"], r["nodes"], r["impl"], f"{r['gflop_fwd']:.2f}"]
        if "error" in r:
            cells += [r["error"], "", "", "", ""]
        else:
            cells += [common.fmt_ms(r["fwd_ms"]), common.fmt_ms(r["fwd_bwd_x_ms"]), f"{r['fwd_tflops']:.2f}",
                      f"{(r['fwd_bwd_x_peak_bytes'] or 0) / 2**20:.0f}", f"{r['check_rel_err_f64']:.1e}"]
        rows.append(cells)
    return common.markdown_table(["shape", "dtype", "nodes", "impl", "GFLOP fwd", "fwd ms", "fwd+bwd(x) ms",
                                  "fwd TFLOP/s", "peak MiB f+b(x)", "rel err f64"], rows)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="directory for linear.json / linear.md")
    p.add_argument("--nodes", default="32000")
    p.add_argument("--dtypes", default="float64,float32")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args(argv)
    common.comma_lists(args, ints=("nodes",), strs=("dtypes", "shapes", "impls"))
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/linear.py needs a CUDA device")
    data = run(args)
    out = common.out_dir(args.out)
    plot(data, os.path.join(out, "linear.png"))
    common.write_results(out, "linear", f"Equivariant Linear ({data['environment']['device']})", data, table(data))


def plot(data: Dict, path: str) -> None:
    """Forward + backward(x) time per shape, one bar per implementation and dtype."""
    plt = common.pyplot()
    rows = [r for r in data["results"] if "error" not in r]
    if plt is None or not rows:
        return
    shapes = sorted({(r["shape"], r["nodes"]) for r in rows}, key=str)
    series = sorted({(r["impl"], r["dtype"]) for r in rows})
    fig, ax = plt.subplots(figsize=(1.2 + 1.4 * len(shapes), 3.5))
    width = 0.8 / len(series)
    for k, (impl, dtype) in enumerate(series):
        ms = {(r["shape"], r["nodes"]): r["fwd_bwd_x_ms"] for r in rows if (r["impl"], r["dtype"]) == (impl, dtype)}
        xs = [j + k * width for j, s in enumerate(shapes) if s in ms]
        ax.bar(xs, [ms[s] for s in shapes if s in ms], width, label=f"{impl} {dtype}")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))])
    ax.set_xticklabels([f"{s}\n{n} nodes" for s, n in shapes], fontsize=7)
    ax.set_ylabel("forward + backward(x), ms")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"[bench] wrote {path}", flush=True)


if __name__ == "__main__":
    main()
