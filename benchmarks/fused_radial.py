"""Fused radial layer (md_accel::tp_conv_fused_*: w = hidden @ W_last inside the tensor-product
kernels) against the path it replaces, as the models run it (w = hidden @ W_last and grad_hidden =
grad_w @ W^T by md_accel::linear_tf32x3, the specialised tp_conv_* kernels), on the real MACE-MP-0
medium / SevenNet convolutions
(benchmarks/workloads.py) over a synthetic MD-like graph (random senders, ~78 per receiver).

Columns (ms, median of CUDA-event timings): fwd; f+b = forward + backward as MD needs it (grads of
x, y, hidden); train = f+b plus grad_W_last; peak = extra device memory of one f+b (MiB); rel =
max relative difference fused vs unfused over every output.
Usage: python benchmarks/fused_radial.py OUT_DIR [--nodes 4000 --edges 312000 --hidden 64 --reps 20]
Writes OUT_DIR/fused_radial.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
import common  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

from md_accel.ops import _codegen_fused, _cuda, _custom_ops  # noqa: E402
from md_accel.ops.tp_conv import build_graph  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402

CONFIGS = ["mace_mp0_medium", "sevennet_l3i5", "sevennet_0"]


def timed(fn, reps: int) -> float:
    return common.time_gpu(fn, "cuda", warmup=1, repeats=reps)["median_ms"]


def peak_mib(fn) -> float:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def rel(a, b) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-300)).item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--nodes", type=int, default=4000)
    ap.add_argument("--edges", type=int, default=312_000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    args = ap.parse_args()
    assert _cuda.load(verbose=False), _cuda.load_error()
    _custom_ops.register(True)
    ops = torch.ops.md_accel
    dev = torch.device("cuda")
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "nodes": args.nodes, "edges": args.edges, "hidden": args.hidden,
           "fused_w": "global" if _codegen_fused.w_global() else "smem"}
    print(" ".join(f"{k}={v}" for k, v in env.items()))
    gen = torch.Generator(device=dev).manual_seed(0)
    n, e, H = args.nodes, args.edges, args.hidden
    src = torch.randint(0, n, (e,), device=dev, generator=gen)
    dst = torch.sort(torch.randint(0, n, (e,), device=dev, generator=gen)).values
    g = build_graph(src, dst, n)
    ga = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)

    hdr = (f"{'config':18s} {'dtype':8s} {'build':>6s} | {'fwd unf':>8s} {'fwd fus':>8s} {'x':>5s} | "
           f"{'f+b unf':>8s} {'f+b fus':>8s} {'x':>5s} | {'train unf':>9s} {'train fus':>9s} {'x':>5s} | "
           f"{'peak unf':>8s} {'peak fus':>8s} | {'gemm':>6s} {'rel':>8s}")
    print(hdr)
    rows = []
    for name in args.configs.split(","):
        w = WORKLOADS[name]
        plan = TPProblem.create(w.irreps_in1, w.irreps_in2, w.irreps_out, w.instructions).lower()
        t0 = time.perf_counter()
        spec = _cuda.specialise(plan)
        fused = _cuda.specialise_fused(plan, H)
        build_s = time.perf_counter() - t0
        for dtype in (torch.float32, torch.float64):
            pl = (plan.paths.to(dev), plan.cg_ptr.to(dev), plan.cg_idx.to(dev), plan.cg_val.to(dev, dtype))
            x = torch.randn(n, plan.dim_in1, device=dev, dtype=dtype, generator=gen)
            y = torch.randn(e, plan.dim_in2, device=dev, dtype=dtype, generator=gen)
            h = torch.randn(e, H, device=dev, dtype=dtype, generator=gen)
            W = torch.randn(H, plan.weight_numel, device=dev, dtype=dtype, generator=gen) / H ** 0.5
            go = torch.randn(n, plan.dim_out, device=dev, dtype=dtype, generator=gen)

            Wt = W.t().contiguous()

            def unf_fwd():
                return ops.tp_conv_fwd(x, y, ops.linear_tf32x3(h, W), *ga, *pl, plan.dim_out)

            def unf_fb(train=False):
                wt = ops.linear_tf32x3(h, W)
                out = ops.tp_conv_fwd(x, y, wt, *ga, *pl, plan.dim_out)
                gx, gy, gw = ops.tp_conv_bwd(go, x, y, wt, *ga, *pl)
                return (out, gx, gy, ops.linear_tf32x3(gw, Wt)) + ((h.t() @ gw,) if train else ())

            def fus_fwd():
                return ops.tp_conv_fused_fwd(x, y, h, W, *ga, *pl, plan.dim_out)

            def fus_fb(train=False):
                out = fus_fwd()
                gx, gy, gh, gW = ops.tp_conv_fused_bwd(go, x, y, h, W, *ga, *pl, train)
                return (out, gx, gy, gh) + ((gW,) if train else ())

            diff = max(rel(a, b) for a, b in zip(fus_fb(True), unf_fb(True)))
            r = {"config": name, "dtype": str(dtype).replace("torch.", ""), "specialised": spec is not None,
                 "fused_built": fused is not None, "build_s": build_s, "max_rel_diff": diff,
                 "gemm_ms": timed(lambda: ops.linear_tf32x3(h, W), args.reps),
                 "fwd_unfused_ms": timed(unf_fwd, args.reps), "fwd_fused_ms": timed(fus_fwd, args.reps),
                 "fb_unfused_ms": timed(unf_fb, args.reps), "fb_fused_ms": timed(fus_fb, args.reps),
                 "train_unfused_ms": timed(lambda: unf_fb(True), args.reps),
                 "train_fused_ms": timed(lambda: fus_fb(True), args.reps),
                 "fb_unfused_peak_mib": peak_mib(unf_fb), "fb_fused_peak_mib": peak_mib(fus_fb)}
            rows.append(r)
            print(f"{name:18s} {r['dtype']:8s} {build_s:5.0f}s | {r['fwd_unfused_ms']:8.3f} {r['fwd_fused_ms']:8.3f} "
                  f"{r['fwd_unfused_ms'] / r['fwd_fused_ms']:5.2f} | {r['fb_unfused_ms']:8.3f} {r['fb_fused_ms']:8.3f} "
                  f"{r['fb_unfused_ms'] / r['fb_fused_ms']:5.2f} | {r['train_unfused_ms']:9.3f} "
                  f"{r['train_fused_ms']:9.3f} {r['train_unfused_ms'] / r['train_fused_ms']:5.2f} | "
                  f"{r['fb_unfused_peak_mib']:8.0f} {r['fb_fused_peak_mib']:8.0f} | {r['gemm_ms']:6.3f} {diff:8.1e}",
                  flush=True)
            del x, y, h, W, Wt, go
            torch.cuda.empty_cache()
    os.makedirs(args.out_dir, exist_ok=True)
    path = os.path.join(args.out_dir, "fused_radial.json")
    with open(path, "w") as f:
        json.dump({"env": env, "rows": rows}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
