"""The radial MLP's hidden layers per edge (md_accel::mlp_hidden_{fwd,bwd}): md_accel's tensor-core
kernels (csrc/mlp_hidden_mma.cuh; 3xTF32 for float32, DMMA for float64) against its
CUDA-core kernels and the plain-torch composition every peer runs (e3nn's FullyConnectedNet: matmul, SiLU, scale;
its backward by autograd), on the MLP shapes of MACE-MP-0 (10 Bessel functions -> 64 -> 64 -> 64) and SevenNet /
NequIP (8 -> 64 -> 64), same inputs, same run.

Columns: ms (median of CUDA-event timings) of the forward and of what an MD step runs (forward, then
the gradient of the input given grad_h: md_accel's backward op recomputes the forward, torch's
autograd keeps its activations), the speed-up of the latter over torch, and the max relative error
against the float64 reference (md_accel/ops/mlp_reference.py) on the first 20,000 edges.

    python benchmarks/radial_mlp.py [--edges 2500000] [--reps 20] [--dtype float32] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
import common  # noqa: E402

from md_accel.ops import _cuda  # noqa: E402
from md_accel.ops.mlp_reference import mlp_hidden_bwd_ref, mlp_hidden_fwd_ref  # noqa: E402

SHAPES = {"mace_mp0": (10, 64, 64, 64), "sevennet_nequip": (8, 64, 64)}
CST = 1.6791767923989418  # e3nn's normalised SiLU constant
SWITCH = {"float32": "MD_ACCEL_MLP_MMA", "float64": "MD_ACCEL_MLP_MMA64"}  # "1": tensor cores, "0": CUDA cores


def timed(fn, reps: int) -> float:
    return common.time_gpu(fn, "cuda", warmup=3, repeats=reps)["median_ms"]


def torch_fwd(x, ws):
    h = x
    for w in ws:
        h = torch.nn.functional.silu(h @ w) * CST
    return h


def rel(a, b) -> float:
    return ((a.double().cpu() - b).abs().max() / b.abs().max()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", type=int, default=2_500_000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not (torch.cuda.is_available() and _cuda.load()):
        sys.exit(f"needs a GPU and md_accel's CUDA library ({_cuda.load_error()})")
    torch.backends.cuda.matmul.allow_tf32 = False
    ops, dev = torch.ops.md_accel, torch.device("cuda")
    rows = []
    out = {"env": common.environment(dev), "edges": args.edges, "repeats": args.reps, "dtype": args.dtype,
           "results": rows}
    before = {k: os.environ.get(k) for k in SWITCH.values()}
    try:
        measure(args, ops, dev, rows)
    finally:  # the switches as they were
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    print_table(args, out)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "radial_mlp.json").write_text(json.dumps(out, indent=1))


def measure(args, ops, dev, rows) -> None:
    """One row per (shape, implementation); the tensor-core switch set before each call."""
    dtype = getattr(torch, args.dtype)
    switch = SWITCH[args.dtype]
    for name, widths in SHAPES.items():
        gen = torch.Generator().manual_seed(0)
        x64 = torch.randn(args.edges, widths[0], generator=gen, dtype=torch.float64)
        w64 = [torch.randn(a, b, generator=gen, dtype=torch.float64) / a ** 0.5 for a, b in zip(widths, widths[1:])]
        g64 = torch.randn(args.edges, widths[-1], generator=gen, dtype=torch.float64)
        n_check = 20_000  # rows checked against the float64 reference
        ref_h = mlp_hidden_fwd_ref(x64[:n_check], w64, CST)
        ref_gx = mlp_hidden_bwd_ref(x64[:n_check], g64[:n_check], w64, CST)
        x, g = x64.to(dev, dtype), g64.to(dev, dtype)
        ws = [w.to(dev, dtype) for w in w64]
        impls = {}
        for label, mma in (("md_accel tensor cores", "1"), ("md_accel CUDA cores", "0")):
            def fwd(mma=mma):
                os.environ[switch] = mma
                return ops.mlp_hidden_fwd(x, ws, CST)

            def step(mma=mma):  # what a step runs: the forward, then the backward (which recomputes it)
                os.environ[switch] = mma
                ops.mlp_hidden_fwd(x, ws, CST)
                return ops.mlp_hidden_bwd(x, g, ws, CST)

            impls[label] = (fwd, step)
        xr = x.clone().requires_grad_(True)

        def torch_step():
            return torch.autograd.grad(torch_fwd(xr, ws), xr, g)[0]

        impls["torch (peers' MLP)"] = (lambda: torch_fwd(x, ws), torch_step)
        for label, (fwd, step) in impls.items():
            rows.append({"shape": name, "impl": label, "fwd_ms": timed(fwd, args.reps),
                         "fwd_bwd_ms": timed(step, args.reps), "rel_err_fwd": rel(fwd()[:n_check], ref_h),
                         "rel_err_bwd": rel(step()[:n_check], ref_gx)})


def print_table(args, out) -> None:
    rows = out["results"]
    print(f"radial MLP hidden layers, {args.edges} edges, {args.dtype}, {out['env']['device']}")
    print(f"{'shape':16s} {'implementation':22s} {'fwd ms':>8s} {'fwd+bwd':>8s} {'vs torch':>9s} "
          f"{'err fwd':>9s} {'err bwd':>9s}")
    for r in rows:
        base = next(q for q in rows if q["shape"] == r["shape"] and q["impl"].startswith("torch"))
        print(f"{r['shape']:16s} {r['impl']:22s} {r['fwd_ms']:8.3f} {r['fwd_bwd_ms']:8.3f} "
              f"{base['fwd_bwd_ms'] / r['fwd_bwd_ms']:8.2f}x {r['rel_err_fwd']:9.1e} {r['rel_err_bwd']:9.1e}")


if __name__ == "__main__":
    main()
