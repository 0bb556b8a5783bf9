"""md_accel::gemm_3xtf32 (tensor cores, 3xTF32 split, float32 accuracy) on the radial MLP's
last-layer shapes, as the op routes them (md_accel: cuBLAS TF32 on the split operands for the
small-K forward, md_accel's kernel otherwise), on md_accel's kernel for every shape
(md_accel_kernel: MD_ACCEL_GEMM_CUBLAS=0) and on the kernel's unbiased scheme (md_accel_unbiased:
MD_ACCEL_GEMM_UNBIASED=1, the tensor cores' truncation mean added back), vs torch float32 matmul (cuBLAS SGEMM, TF32 off), torch matmul with TF32 on (1xTF32:
reference only, it loses float32 accuracy) and the memory floor (bytes of A + B + C at the
measured device-to-device copy bandwidth).

Shapes (E = edges): forward W = H @ B, H [E, 64], B [64, N]; input gradient dH = dW @ B^T,
dW [E, K], B [64, K] (transpose_b). CUDA-event timings, median of --repeats after --warmup;
max error relative to max|C| against float64 on the first 65536 rows, and the bias: the mean of
(C - C64) sign(C64) relative to the mean |C64| (truncating accumulation makes it negative; a
round-to-nearest sum leaves at most ~1e-9). Prints a markdown table
and writes gemm_tf32x3.json to OUT_DIR.

    python benchmarks/gemm_tf32x3.py OUT_DIR [--rows 312000,2500000] [--repeats 20] [--warmup 3]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import md_accel.ops  # noqa: E402,F401  (registers torch.ops.md_accel.gemm_3xtf32)
from md_accel.ops import _cuda  # noqa: E402

# (name, K, N, transpose_b)
SHAPES = ([("fwd", 64, n, False) for n in (512, 960, 1280, 1760)]
          + [("bwd_x", k, 64, True) for k in (512, 960, 1280, 1760)])
IMPLS = ("md_accel", "md_accel_kernel", "md_accel_unbiased", "torch_fp32", "torch_tf32")


def matmul_with(precision: str) -> Callable:
    def run(a, b, transpose_b):
        prev = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(precision)
        try:
            return a @ (b.t() if transpose_b else b)
        finally:
            torch.set_float32_matmul_precision(prev)
    return run


def op_with(var: str, value: str) -> Callable:
    """The op with environment switch ``var`` set to ``value`` (the library reads it per call)."""
    def run(a, b, transpose_b):
        with common.environ({var: value}):
            return torch.ops.md_accel.gemm_3xtf32(a, b, transpose_b)
    return run


def impl_fns() -> Dict[str, Callable]:
    return {"md_accel": torch.ops.md_accel.gemm_3xtf32, "md_accel_kernel": op_with("MD_ACCEL_GEMM_CUBLAS", "0"),
            "md_accel_unbiased": op_with("MD_ACCEL_GEMM_UNBIASED", "1"),
            "torch_fp32": matmul_with("highest"),
            "torch_tf32": matmul_with("high")}


def errors(fn, a, b, transpose_b, rows: int = 65536):
    """(max |C - C64| / max |C64|, mean (C - C64) sign(C64) / mean |C64|) on the first rows."""
    a = a[:rows]
    ref = a.double() @ (b.t() if transpose_b else b).double()
    diff = fn(a, b, transpose_b).double() - ref
    return (diff.abs().max() / ref.abs().max()).item(), ((diff * ref.sign()).mean() / ref.abs().mean()).item()


def main(argv: List[str] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--rows", default="312000,2500000", help="comma-separated E values")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    if not _cuda.load(verbose=True):
        sys.exit(f"md_accel CUDA library did not load: {_cuda.load_error()}")
    os.makedirs(args.out_dir, exist_ok=True)
    bw = common.copy_bandwidth("cuda") * 1e9  # bytes/s
    fns = impl_fns()
    results = []
    for e in (int(x) for x in args.rows.split(",")):
        for name, k, n, tb in SHAPES:
            row = {"E": e, "shape": name, "K": k, "N": n, "transpose_b": tb}
            try:
                a = torch.randn(e, k, device="cuda")
                b = torch.randn((n, k) if tb else (k, n), device="cuda") / k**0.5
                nbytes = 4 * (e * k + k * n + e * n)
                row["floor_ms"] = nbytes / bw * 1e3
                row["gflop"] = 2 * e * k * n / 1e9
                for impl, fn in fns.items():
                    try:
                        ms = common.time_gpu(lambda: fn(a, b, tb), "cuda", args.warmup, args.repeats)["median_ms"]
                        row[f"{impl}_ms"] = ms
                        row[f"{impl}_tflops"] = row["gflop"] / ms
                        row[f"{impl}_max_rel_err"], row[f"{impl}_bias"] = errors(fn, a, b, tb)
                    except RuntimeError as exc:  # OOM, ...
                        row[f"{impl}_error"] = str(exc).splitlines()[0]
                    torch.cuda.empty_cache()
                del a, b
            except RuntimeError as exc:
                row["error"] = str(exc).splitlines()[0]
            torch.cuda.empty_cache()
            results.append(row)
            print(json.dumps(row), flush=True)

    def f(row, key, fmt="{:.2f}"):
        return fmt.format(row[key]) if key in row else "-"

    lines = ["| E | shape | K | N | md_accel ms | md_accel kernel ms | md_accel unbiased ms | torch fp32 ms | "
             "torch tf32 ms | floor ms | md_accel TFLOPS | speedup vs fp32 | md_accel err (bias) | "
             "kernel err (bias) | unbiased err (bias) | fp32 err (bias) | tf32 err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        speed = (f"{r['torch_fp32_ms'] / r['md_accel_ms']:.2f}x" if "md_accel_ms" in r and "torch_fp32_ms" in r
                 else "-")
        def err(impl):
            return f"{f(r, impl + '_max_rel_err', '{:.1e}')} ({f(r, impl + '_bias', '{:+.0e}')})"

        lines.append(f"| {r['E']} | {r['shape']} | {r['K']} | {r['N']} | {f(r, 'md_accel_ms')} | "
                     f"{f(r, 'md_accel_kernel_ms')} | {f(r, 'md_accel_unbiased_ms')} | {f(r, 'torch_fp32_ms')} | "
                     f"{f(r, 'torch_tf32_ms')} | {f(r, 'floor_ms')} | {f(r, 'md_accel_tflops', '{:.1f}')} | {speed} | "
                     f"{err('md_accel')} | {err('md_accel_kernel')} | {err('md_accel_unbiased')} | "
                     f"{err('torch_fp32')} | {f(r, 'torch_tf32_max_rel_err', '{:.1e}')} |")
    table = "\n".join(lines)
    print(table)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "copy_bandwidth_GBps": bw / 1e9, "repeats": args.repeats, "warmup": args.warmup}
    with open(os.path.join(args.out_dir, "gemm_tf32x3.json"), "w") as fh:
        json.dump({"meta": meta, "results": results}, fh, indent=1)
    with open(os.path.join(args.out_dir, "gemm_tf32x3.md"), "w") as fh:
        fh.write(table + "\n")


if __name__ == "__main__":
    main()
