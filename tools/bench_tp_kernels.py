"""Generic vs plan-specialised tp_conv kernels on a synthetic MD-like graph (GPU only).

4000 nodes, 312k edges (random senders, ~78 per receiver), fwd, fwd+bwd and dbwd (the double
backward op alone), float32/float64, CUDA events, median over repetitions; prints the byte floor
of the fused forward (every input read once, the output written once) at the measured copy
bandwidth.
Usage: python tools/bench_tp_kernels.py [--nodes 4000 --edges 312000 --reps 20]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tp_testing import sh, uvu_problem  # noqa: E402
from md_accel.ops import _cuda, _custom_ops  # noqa: E402
from md_accel.ops.tp_conv import build_graph  # noqa: E402
from md_accel.ops.tp_problem import TPProblem  # noqa: E402


def uvu(i1s: str, lmax: int, parity_filter: bool) -> TPProblem:
    return uvu_problem(i1s, sh(lmax), lmax, parity_filter)


CONFIGS = {
    "mace_mp_medium (10 paths)": lambda: uvu("128x0e+128x1o", 3, True),
    "mace_medium_all_l (13)": lambda: uvu("128x0e+128x1o", 3, False),
    "sevennet0_like": lambda: uvu("128x0e+64x1e+32x2e", 2, False),
    "sevennet_l3i5_like": lambda: uvu("64x0e+32x1o+32x2e+32x3o", 3, False),
}


def timed(fn, reps: int) -> float:
    """Median milliseconds of fn() over reps (after one warm-up), CUDA events."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def reps_for(fn, want: int, seconds: float = 0.6) -> int:
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return max(3, min(want, int(seconds / max(dt, 1e-6))))


def copy_bandwidth() -> float:
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a), 10)
    return 2 * a.numel() * 4 / (ms * 1e-3) / 1e9


def rel(a, b) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-300)).item()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4000)
    ap.add_argument("--edges", type=int, default=312_000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--configs", default="all")
    args = ap.parse_args()
    assert _cuda.load(verbose=False), _cuda.load_error()
    _custom_ops.register(True)
    ops = torch.ops.md_accel
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(), "torch", torch.__version__)
    bw = copy_bandwidth()
    print(f"device-to-device copy: {bw:.0f} GB/s (read + write)")

    gen = torch.Generator(device=dev).manual_seed(0)
    n, e = args.nodes, args.edges
    src = torch.randint(0, n, (e,), device=dev, generator=gen)
    dst = torch.sort(torch.randint(0, n, (e,), device=dev, generator=gen)).values
    g = build_graph(src, dst, n)
    ga = (g.src, g.dst, g.dst_ptr, g.src_perm, g.src_ptr)

    print(f"\n{n} nodes, {e} edges; ms = median CUDA-event time; floor = fused-fwd bytes / copy bandwidth")
    hdr = f"{'config':28s} {'dtype':8s} {'fwd gen':>8s} {'fwd spec':>8s} {'f+b gen':>8s} {'f+b spec':>8s} " \
          f"{'dbwd gen':>8s} {'dbwd spec':>9s} {'floor':>6s} {'fwd x':>6s} {'f+b x':>6s} {'dbwd x':>6s} " \
          f"{'spec-gen':>9s} {'built':>6s}"
    print(hdr)
    names = list(CONFIGS) if args.configs == "all" else [c for c in CONFIGS if c.startswith(args.configs)]
    for name in names:
        plan = CONFIGS[name]().lower()
        t0 = time.perf_counter()
        lib = _cuda.specialise(plan)
        build_s = time.perf_counter() - t0
        for dtype in (torch.float32, torch.float64):
            pl = (plan.paths.to(dev), plan.cg_ptr.to(dev), plan.cg_idx.to(dev), plan.cg_val.to(dev, dtype))
            x = torch.randn(n, plan.dim_in1, device=dev, dtype=dtype, generator=gen)
            y = torch.randn(e, plan.dim_in2, device=dev, dtype=dtype, generator=gen)
            w = torch.randn(e, plan.weight_numel, device=dev, dtype=dtype, generator=gen)
            go = torch.randn(n, plan.dim_out, device=dev, dtype=dtype, generator=gen)
            fwd = lambda: ops.tp_conv_fwd(x, y, w, *ga, *pl, plan.dim_out)  # noqa: E731
            fb = lambda: (ops.tp_conv_fwd(x, y, w, *ga, *pl, plan.dim_out),  # noqa: E731
                          ops.tp_conv_bwd(go, x, y, w, *ga, *pl))
            ggx, ggy, ggw = (torch.randn(t.shape, device=dev, dtype=dtype, generator=gen) for t in (x, y, w))
            db = lambda: ops.tp_conv_dbwd(ggx, ggy, ggw, go, x, y, w, *ga, *pl)  # noqa: E731
            res = {}
            for kind in ("generic", "specialised"):
                _cuda.set_specialised(kind == "specialised")
                out = fwd()
                grads = tuple(ops.tp_conv_bwd(go, x, y, w, *ga, *pl)) + tuple(db())
                res[kind] = (out, grads, timed(fwd, reps_for(fwd, args.reps)),
                             timed(fb, reps_for(fb, args.reps)), timed(db, reps_for(db, args.reps)))
            _cuda.set_specialised(True)
            (o0, g0, f0, fb0, db0), (o1, g1, f1, fb1, db1) = res["generic"], res["specialised"]
            diff = max([rel(o1, o0)] + [rel(a, b) for a, b in zip(g1, g0)])
            es = torch.finfo(dtype).bits // 8
            bytes_fwd = es * (e * (plan.weight_numel + plan.dim_in2) + n * (plan.dim_in1 + plan.dim_out)) + 16 * e
            floor = bytes_fwd / (bw * 1e9) * 1e3
            dt = str(dtype).replace("torch.", "")
            print(f"{name:28s} {dt:8s} {f0:8.3f} {f1:8.3f} {fb0:8.3f} {fb1:8.3f} {db0:8.3f} {db1:9.3f} {floor:6.3f} "
                  f"{f0 / f1:6.1f} {fb0 / fb1:6.1f} {db0 / db1:6.1f} {diff:9.1e} "
                  f"{('yes' if lib is not None else 'no'):>3s}{build_s:4.0f}s", flush=True)
            del x, y, w, go, ggx, ggy, ggw, res, o0, g0, o1, g1
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
