"""Session 27: md_accel's conv passes under the current MD_ACCEL_TP_TUNING (one process per tuning):
fwd, fwd+bwd and double backward (kernels.py's passes and loss), median of REPEATS CUDA-event timings."""
import os, sys, statistics
import torch
sys.path.insert(0, "benchmarks")
from kernels import GraphT, MdAccelImpl, inputs, make_graph, run_pass  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

REPEATS = int(os.environ.get("REPEATS", "15"))
dev = torch.device("cuda")


def med(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPEATS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)


tag = os.environ.get("MD_ACCEL_TP_TUNING", "") or "default"
g = GraphT(make_graph(os.environ.get("GRAPH", "cu:4000:6.0")), dev)
for name in os.environ.get("WLS", "mace_mp0_medium").split(","):
    wl = WORKLOADS[name]
    for dname in os.environ.get("DTYPES", "float32,float64").split(","):
        dtype = getattr(torch, dname)
        impl = MdAccelImpl(wl, g, dtype, dev)
        x, y, w = inputs(wl, g, dtype, dev)
        go = torch.randn(g.num_nodes, wl.dims[2], dtype=dtype, device=dev)
        ms = {k: med(run_pass(impl, k, (x, y, w), go)) for k in ("fwd", "fwd_bwd", "dbwd")}
        print(f"{tag:10s} {name:16s} {dname} " + " ".join(f"{k} {v:.3f}" for k, v in ms.items()), flush=True)
        del impl, x, y, w, go
        torch.cuda.empty_cache()
