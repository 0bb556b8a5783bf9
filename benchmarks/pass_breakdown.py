"""One conv pass per workload, dtype and implementation (md_accel by default), timed as ``kernels.py`` times it but
over ``--repeats`` calls only (no minimum window: on a GPU at its power cap the time then depends on what ran
before, session 44), with each CUDA kernel's device time per call (torch.profiler) and the caching allocator's
device mallocs and frees during the timed calls. Its job: say which kernel moves when the same pass runs in
differently prepared processes (the order of the dtypes, a peer imported or run first, a large allocation freed
before), e.g. on the GPU machine

    python benchmarks/pass_breakdown.py --workloads mace_mp0_medium,mace_large --dtypes float64 --prelude alloc:20
    python benchmarks/pass_breakdown.py --workloads mace_mp0_medium,mace_large --dtypes float32,float64
    python benchmarks/pass_breakdown.py --workloads mace_mp0_medium --impls cueq,md_accel --passes fwd_bwd,dbwd

and compare the printed kernel tables between the processes.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from kernels import GraphT, inputs, kernel_lines, make_graph, make_impl, run_pass, through_layouts  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

ALLOCATOR_COUNTS = ("num_device_alloc", "num_device_free", "num_alloc_retries")


def _cudart():
    """The CUDA runtime library torch loaded (ctypes), None where none is found."""
    import ctypes

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


LIMIT_PERSISTING_L2 = 0x06  # cudaLimitPersistingL2CacheSize


def persisting_l2_bytes() -> int:
    """The device's persisting-L2 limit (cudaLimitPersistingL2CacheSize), -1 where it cannot be read."""
    import ctypes

    lib, value = _cudart(), ctypes.c_size_t()
    if lib is None or lib.cudaDeviceGetLimit(ctypes.byref(value), LIMIT_PERSISTING_L2) != 0:
        return -1
    return int(value.value)


def set_l2_window(stream: torch.cuda.Stream, tensor: torch.Tensor | None, limit: int = 0) -> str:
    """Kernels launched on `stream` keep `tensor`'s bytes in L2 as persisting lines (an access-policy window,
    hit ratio 1, with the persisting-L2 limit raised to the window's size); None clears the window and the
    persisting lines and sets the limit back to `limit`. Returns what was set, for the log."""
    import ctypes

    class Window(ctypes.Structure):  # cudaAccessPolicyWindow, inside the 64-byte cudaStreamAttrValue union
        _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                    ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int), ("pad", ctypes.c_byte * 36)]

    lib = _cudart()
    dev = torch.cuda.current_device()
    limits = {}
    for key, attr in (("max_persisting", 108), ("max_window", 109)):  # cudaDevAttrMaxPersistingL2CacheSize, ...Window
        v = ctypes.c_int()
        lib.cudaDeviceGetAttribute(ctypes.byref(v), attr, dev)
        limits[key] = v.value
    win = Window()
    if tensor is not None:
        nbytes = min(tensor.untyped_storage().nbytes(), limits["max_window"])
        # The set-aside is taken from the L2 the other accesses use: as large as the window, no larger.
        if lib.cudaDeviceSetLimit(LIMIT_PERSISTING_L2, ctypes.c_size_t(min(nbytes, limits["max_persisting"]))) != 0:
            raise RuntimeError("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize) failed")
        win.base_ptr, win.num_bytes = tensor.untyped_storage().data_ptr(), nbytes
        win.hitRatio = min(1.0, limits["max_persisting"] / nbytes)
        win.hitProp, win.missProp = 2, 0  # cudaAccessPropertyPersisting, cudaAccessPropertyNormal
    rc = lib.cudaStreamSetAttribute(ctypes.c_void_p(stream.cuda_stream), 1, ctypes.byref(win))  # AccessPolicyWindow
    if rc != 0:
        raise RuntimeError(f"cudaStreamSetAttribute(AccessPolicyWindow) failed: {rc}")
    if tensor is None:
        lib.cudaCtxResetPersistingL2Cache()
        lib.cudaDeviceSetLimit(LIMIT_PERSISTING_L2, ctypes.c_size_t(max(0, limit)))
        return "none"
    return (f"{win.num_bytes / 2**20:.1f} MiB, hit ratio {win.hitRatio:.2f} (max persisting "
            f"{limits['max_persisting'] / 2**20:.1f} MiB, max window {limits['max_window'] / 2**20:.1f} MiB)")


def apply_prelude(spec: str, graph: dict, device) -> None:
    """``import:MODULE`` imports a module; ``alloc:GIB`` allocates and frees GIB GiB (kept in the
    allocator's cache); ``empty:GIB`` does the same and then empties the cache; ``check:IMPL:WORKLOAD:DTYPE``
    runs kernels.py's correctness check of one implementation (on its 300-node subgraph) once."""
    kind, _, arg = spec.partition(":")
    if kind == "check":
        impl_name, wl_name, dname = arg.split(":")
        wl, dtype = WORKLOADS[wl_name], getattr(torch, dname)
        gc = GraphT(common.subgraph(graph, 300), device)
        x, y, w = inputs(wl, gc, dtype, device)
        grad_out = torch.randn(gc.num_nodes, wl.dims[2], dtype=dtype, device=device)
        through_layouts(make_impl(impl_name, wl, gc, dtype, device), x, y, w, grad_out)
    elif kind == "import":
        importlib.import_module(arg)
    elif kind in ("alloc", "empty"):
        block = torch.empty(int(float(arg) * 2**30), dtype=torch.uint8, device=device)
        block.fill_(0)
        del block
        if kind == "empty":
            torch.cuda.empty_cache()
    elif kind != "none":
        raise SystemExit(f"unknown prelude {spec!r} (none, import:MODULE, alloc:GIB, empty:GIB, check:IMPL:WL:DTYPE)")
    print(f"prelude {spec}: persisting L2 limit {persisting_l2_bytes()} bytes", flush=True)


def measure(impl, workload: str, kind: str, args_xyw, grad_out, args) -> dict:
    """Time one implementation's pass, then profile its kernels; print and return the record."""
    device = grad_out.device
    with impl.settings():
        prepared = impl.prepare(*args_xyw)
        fn = run_pass(impl, kind, prepared, grad_out)
        stream, limit = torch.cuda.current_stream(device), persisting_l2_bytes()
        window = set_l2_window(stream, prepared[0]) if args.l2_window == "x" else "none"
        before = torch.cuda.memory_stats(device)
        timing = common.time_gpu(fn, device, 3, args.repeats)
        after = torch.cuda.memory_stats(device)
        try:
            kernels = common.kernel_times(fn, args.repeats)
        except Exception as e:  # noqa: BLE001  (the timing above still stands)
            print(f"   no kernel times: {common.failure(e)}", flush=True)
            kernels = {}
    if args.l2_window == "x":
        set_l2_window(stream, None, limit)
    allocs = {k: (after.get(k, 0) - before.get(k, 0)) / (args.repeats + 3) for k in ALLOCATOR_COUNTS}
    rec = {"workload": workload, "impl": impl.name, "dtype": str(grad_out.dtype).removeprefix("torch."),
           "pass": kind, "prelude": args.prelude, "l2_window": window, "median_ms": timing["median_ms"],
           "allocator_per_call": allocs, "kernels": kernels,
           "reserved_gib": torch.cuda.memory_reserved(device) / 2**30}
    print(f"== {workload} {impl.name} {rec['dtype']} {kind} (prelude {' '.join(args.prelude) or 'none'}): "
          f"{timing['median_ms']:.3f} ms; L2 window {window}; per call "
          + ", ".join(f"{k} {v:g}" for k, v in allocs.items()) + f"; reserved {rec['reserved_gib']:.1f} GiB", flush=True)
    print(kernel_lines(kernels, top=12, indent="   ", width=110), flush=True)
    return rec


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="mace_mp0_medium")
    ap.add_argument("--dtypes", default="float64", help="run in this order")
    ap.add_argument("--impls", default="md_accel", help="kernels.py's implementations, run in this order per cell")
    ap.add_argument("--passes", default="dbwd", help="fwd, fwd_bwd, dbwd: run in this order per implementation")
    ap.add_argument("--graph", default="random_sym:4000:312000")
    ap.add_argument("--prelude", action="append", default=[],
                    help="none, import:MODULE, alloc:GIB, empty:GIB, check:IMPL:WORKLOAD:DTYPE")
    ap.add_argument("--l2-window", choices=("none", "x"), default="none",
                    help="x: the timed calls keep the node features x in L2 (a persisting access-policy window)")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=None, help="a JSON file for the records")
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    if args.l2_window == "x":  # a stream attribute: time on a stream of our own, not the legacy default stream
        torch.cuda.set_stream(torch.cuda.Stream(device))
    print(f"persisting L2 limit {persisting_l2_bytes()} bytes", flush=True)
    graph = make_graph(args.graph)
    g = GraphT(graph, device)
    for spec in args.prelude:
        apply_prelude(spec, graph, device)
    records = []
    for name in args.workloads.split(","):
        wl = WORKLOADS[name]
        for dname in args.dtypes.split(","):
            dtype = getattr(torch, dname)
            x, y, w = inputs(wl, g, dtype, device)
            grad_out = torch.randn(g.num_nodes, wl.dims[2], dtype=dtype, device=device)
            for impl_name in args.impls.split(","):
                impl = make_impl(impl_name, wl, g, dtype, device)
                for kind in args.passes.split(","):
                    records.append(measure(impl, name, kind, (x, y, w), grad_out, args))
                    common.release(device)
                del impl
            del x, y, w, grad_out
            common.release(device)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
