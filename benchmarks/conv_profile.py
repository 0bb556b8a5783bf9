"""Run md_accel's conv passes (forward, forward + backward, double backward) once per workload and
dtype, on the same graphs and inputs as ``kernels.py``: a target for a hardware profiler, which
times nothing itself. ``--impl`` runs another of ``kernels.py``'s implementations instead (cueq: the same
passes through cuEquivariance, to profile its kernels beside md_accel's). On the GPU machine, for example:

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        -k regex:"fwd_kernel|bwd_kernel|gx_sum" python benchmarks/conv_profile.py \\
        --workloads mace_mp0_medium --dtypes float32,float64
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import PASSES, GraphT, inputs, make_graph, make_impl, run_pass  # noqa: E402
from workloads import WORKLOADS  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="mace_mp0_medium")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--passes", default=",".join(PASSES))
    ap.add_argument("--graph", default="cu:4000:6.0", help="cu:ATOMS:RCUT or random:NODES:EDGES")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--impl", default="md_accel", help="an implementation of kernels.py (md_accel, cueq, ..)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    g = GraphT(make_graph(args.graph), device)
    for name in args.workloads.split(","):
        wl = WORKLOADS[name]
        for dname in args.dtypes.split(","):
            dtype = getattr(torch, dname)
            impl = make_impl(args.impl, wl, g, dtype, device)
            x, y, w = inputs(wl, g, dtype, device)
            grad_out = torch.randn(g.num_nodes, wl.dims[2], dtype=dtype, device=device)
            prepared = impl.prepare(x, y, w)
            with impl.settings():
                for kind in args.passes.split(","):
                    run_pass(impl, kind, prepared, grad_out)()
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    print(f"[conv_profile] {name} {dname} {kind}: {g.num_edges} edges", flush=True)


if __name__ == "__main__":
    main()
