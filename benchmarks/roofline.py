"""How close the conv kernels run to the hardware: bytes and FLOPs per edge of each workload and
pass, and, from a ``kernels.py`` result file, the achieved fraction of the measured copy bandwidth
and the achieved arithmetic rate of every implementation.

Bytes: ``workloads.byte_floor`` (each autograd stage of a pass reading its inputs once and writing its
outputs once). FLOPs: the sparse Clebsch-Gordan work of the 'uvu' product with per-edge path weights, counted per path of
multiplicity ``u`` with ``nnz`` non-zero coefficients and output dimension ``d3``:

- forward: ``nnz`` products ``C * y_j`` (shared by the channels) plus per channel ``2 nnz``
  (multiply-add of ``x``) and ``2 d3`` (weight and accumulation into the receiver);
- backward (grad_x, grad_y, grad_w): per channel ``d3`` (``w * grad_out``) plus ``2 nnz`` each for
  grad_x, grad_y and the recomputed ``C x y`` of grad_w, plus ``2 d3`` for grad_w's sum.

This is the arithmetic of the product itself, what any implementation must do; the kernels may do
more (recomputation, index arithmetic). A pass whose FLOPs per byte fall below the GPU's ridge
point (peak FLOP/s over copy bandwidth: about 20 for FP32 on an H100/H200's CUDA cores) is bound
by memory traffic, so the byte floor is its floor.

    python benchmarks/roofline.py [RESULT.json ...] [--workloads a,b] [--graph cu:4000:6.0]

Without result files it prints the per-edge counts for the workloads on the graph.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from workloads import WORKLOADS, Workload, byte_floor  # noqa: E402

from md_accel.ops.tp_problem import TPProblem  # noqa: E402

PASSES = ("fwd", "fwd_bwd")


def flops_per_edge(wl: Workload) -> Dict[str, float]:
    """FLOPs per edge of the forward and of forward + backward (see the module docstring)."""
    plan = TPProblem.create(wl.irreps_in1, wl.irreps_in2, wl.irreps_out, wl.instructions).lower()
    fwd = bwd = 0.0
    for p, row in enumerate(plan.paths.tolist()):
        mul, l3 = row[1], row[6]
        nnz, d3 = int(plan.cg_ptr[p + 1] - plan.cg_ptr[p]), 2 * l3 + 1
        fwd += nnz + mul * (2 * nnz + 2 * d3)
        bwd += nnz + mul * (d3 + 3 * 2 * nnz + 2 * d3)
    return {"fwd": fwd, "fwd_bwd": fwd + bwd}


def bytes_per_edge(wl: Workload, num_nodes: int, num_edges: int, itemsize: int) -> Dict[str, float]:
    """``workloads.byte_floor`` per edge."""
    return {k: v / num_edges for k, v in byte_floor(wl, num_nodes, num_edges, itemsize).items()}


def rows_from_result(path: str) -> List[List]:
    data = json.load(open(path))
    bw = data.get("copy_bandwidth_gbs")
    n, e = data["graph"]["num_nodes"], data["graph"]["num_edges"]
    flops = {}  # workload -> FLOPs per edge (builds the CG tables: once per workload)
    rows = []
    for r in data["results"]:
        if r.get("status") != "ok" or r["pass"] not in PASSES or r["workload"] not in WORKLOADS:
            continue
        wl = WORKLOADS[r["workload"]]
        if wl.name not in flops:
            flops[wl.name] = flops_per_edge(wl)
        itemsize = 8 if r["dtype"] == "float64" else 4
        b = bytes_per_edge(wl, n, e, itemsize)[r["pass"]] * e
        f = flops[wl.name][r["pass"]] * e
        s = r["median_ms"] * 1e-3
        rows.append([r["workload"], r["dtype"], r["pass"], r["impl"], common.fmt_ms(r["median_ms"]),
                     f"{b / s / 1e9:.0f}", f"{100 * b / s / 1e9 / bw:.0f} %" if bw else "",
                     f"{f / s / 1e12:.1f}"])
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", help="kernels.py JSON files")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--graph", default="cu:4000:6.0", help="cu:ATOMS:RCUT, for the per-edge counts")
    args = ap.parse_args(argv)

    _, atoms, rcut = args.graph.split(":")
    g = common.copper_graph(int(atoms), float(rcut))
    n, e = int(g["num_nodes"]), len(g["src"])
    rows = []
    for name in args.workloads.split(","):
        wl = WORKLOADS[name]
        fl = flops_per_edge(wl)
        for dtype, itemsize in (("float32", 4), ("float64", 8)):
            by = bytes_per_edge(wl, n, e, itemsize)
            rows += [[name, dtype, p, f"{by[p]:.0f}", f"{fl[p]:.0f}", f"{fl[p] / by[p]:.1f}"] for p in PASSES]
    print(f"Per edge, {g['name']} ({n} nodes, {e} edges)\n")
    print(common.markdown_table(["workload", "dtype", "pass", "bytes/edge (floor)", "FLOPs/edge", "FLOP/byte"], rows))
    for path in args.results:
        print(f"\n{path}: achieved (bytes at the floor / time; FLOPs as counted above / time)\n")
        print(common.markdown_table(["workload", "dtype", "pass", "impl", "ms", "GB/s", "of copy bw", "TFLOP/s"],
                                    rows_from_result(path)))


if __name__ == "__main__":
    main()
