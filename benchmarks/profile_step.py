"""Where an MD step's time goes on small systems: md_accel's Calculator step (neighbour list,
energy, forces, stress, results to the host) as the Calculator runs it by default (``--graph
auto``: the CUDA graph up to ``GraphedStep.AUTO_MAX_EDGES`` edges, plain above, where padding the
edges for the graph costs more than the launches it saves), or forced with / without the graph; optionally
the source library's own model with its accelerators (sevenn / mace-torch), profiled with
torch.profiler on fcc copper.

Per implementation and size: wall ms per step (synchronised, no profiler), kernels and
launch calls (kernel/memcpy/memset launches and graph launches) per step, host
synchronisations per step, GPU busy fraction (kernel + copy time / wall time) and the kernel
time split by part: tp_conv fwd / bwd (md_accel's conv kernels; the peers' fused TP kernels too),
radial MLP (md_accel's hidden-layer kernels), gemm (linears; the radial MLP's last layer; the peers'
whole MLPs), contraction (md_accel's symmetric contraction), elementwise, reduction, sort/segment (graph build, segment sums),
index/scatter, neighbour list (kernels launched inside the Verlet-list update), memcpy/memset,
other. Kernels replayed from a CUDA graph are attributed by name like the others.

    python benchmarks/profile_step.py [--model sevennet-0 | mace | FILE.mdx] [--sizes 864,4000]
        [--dtype float32] [--steps 20] [--peers sevenn:cueq,mace:cueq] [--graph auto|on|off|both]
        [--out DIR] [--trace-dir DIR]

``--model mace`` is the MACE-MP-0-medium-shaped model (models/build_mace_mp0_medium_shape.py,
converted in process; needs mace-torch), the ``mace:*`` peers run the same weights.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

NEIGHBORS = "md_accel::neighbors"
STEP = "profile_step"
LAUNCHES = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync",
            "cudaMemcpy", "cudaMemset"}
SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
PARTS = ("tp_conv fwd", "tp_conv bwd", "radial MLP", "gemm", "contraction", "elementwise", "reduction", "sort/segment", "index/scatter",
         "neighbour list", "memcpy/memset", "other")
_PEER_TP = ("segmented_polynomial", "tensor_product", "cuequivariance", "openequivariance", "fused_tp", "uvu",
            "tp_fwd", "tp_bwd", "flashtp")
TOP_KERNELS = 15
SHAPES = 0  # --shapes N: also print the top N operators by input shapes
_GEMM = ("gemm", "gemv", "xmma", "cutlass", "cublas", "nvjet", "sm90_", "sm80_", "ampere_", "dot_kernel", "splitk")


def _short(name: str) -> str:
    """A kernel name short enough to print, with its distinguishing part kept."""
    for noise in ("void ", "at::native::", "(anonymous namespace)::", "at::", "std::"):
        name = name.replace(noise, "")
    return name[:110]


# md_accel's own kernels outside the conv: linears (the per-species linear's gemm / prefix / segment /
# weight-gradient kernels, the radial MLP's last layer gemm_3xtf32 and its operand split)
_MD_ACCEL_LINEAR = ("gemm", "split_b_kernel", "prefix_kernel", "segment_kernel", "wgrad")


def classify(name: str) -> str:
    """Part of the step a kernel belongs to, from its (demangled) name: md_accel's radial-MLP hidden
    layers, symmetric contraction and linears by their names, the rest of md_accel (the conv
    kernels and their per-sender sums) and the peers' fused tensor products as tp_conv."""
    n = name.lower()
    if "mlp_hidden" in n:
        return "radial MLP"
    if "md_accel::sc::" in n:
        return "contraction"
    if "md_accel" in n and any(s in n for s in _MD_ACCEL_LINEAR):
        return "gemm"
    if "md_accel" in n or "tp_conv" in n or any(s in n for s in _PEER_TP):
        return "tp_conv bwd" if ("bwd" in n or "backward" in n or "gx_sum" in n) else "tp_conv fwd"
    if any(s in n for s in _GEMM):
        return "gemm"
    if any(s in n for s in ("sort", "scan", "search", "segment")):
        return "sort/segment"
    if any(s in n for s in ("index", "scatter", "gather")):
        return "index/scatter"
    if "elementwise" in n:
        return "elementwise"
    if "reduce" in n:
        return "reduction"
    return "other"


def _gpu_time_by_launching_op(ev: List[Dict], runtime: List[Dict]) -> Dict[str, float]:
    """Kernel time per launching host op: the innermost ``cpu_op`` around the launch, labelled
    with the autograd node it runs in (backward) when there is one. One sweep per thread with a
    stack of the open ops."""
    by_tid: Dict[object, List[Tuple[float, int, float, Dict]]] = defaultdict(list)
    for e in ev:
        if e.get("cat") == "cpu_op":
            by_tid[e["tid"]].append((e["ts"], 0, -e["dur"], e))
    for r in runtime:
        by_tid[r["tid"]].append((r["ts"], 1, 0.0, r))
    label_of: Dict[object, str] = {}
    for items in by_tid.values():
        items.sort(key=lambda t: t[:3])
        stack: List[Dict] = []
        for ts, kind, _, e in items:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < ts:
                stack.pop()
            if kind == 0:
                stack.append(e)
            elif stack:
                node = next((o["name"] for o in reversed(stack) if "evaluate_function" in o["name"]), "")
                label = stack[-1]["name"] + (" < " + node.split("evaluate_function: ")[-1] if node else "")
                label_of[e.get("args", {}).get("correlation")] = label[:110]
    out: Dict[str, float] = defaultdict(float)
    for e in ev:
        if e.get("cat") == "kernel":
            out[label_of.get(e.get("args", {}).get("correlation"), "(unattributed)")] += e["dur"]
    return out


def analyse(trace: Dict, steps: int) -> Dict:
    """Per-step counts and kernel time by part from a chrome trace of ``steps`` steps."""
    ev = [e for e in trace.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    runtime = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    ranges = [e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == NEIGHBORS]
    in_nbr = set()
    for r in runtime:
        if any(a["tid"] == r["tid"] and a["ts"] <= r["ts"] <= a["ts"] + a["dur"] for a in ranges):
            in_nbr.add(r.get("args", {}).get("correlation"))
    gpu_us: Dict[str, float] = defaultdict(float)
    by_kernel: Dict[str, float] = defaultdict(float)
    kernels = 0
    for e in ev:
        cat = e.get("cat")
        if cat == "kernel":
            kernels += 1
            by_kernel[_short(e["name"])] += e["dur"]
            part = "neighbour list" if e.get("args", {}).get("correlation") in in_nbr else classify(e["name"])
            gpu_us[part] += e["dur"]
        elif cat in ("gpu_memcpy", "gpu_memset"):
            gpu_us["memcpy/memset"] += e["dur"]
    names = Counter(r["name"] for r in runtime)
    by_op = _gpu_time_by_launching_op(ev, runtime)
    total = sum(gpu_us.values())
    step_ranges = [e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == STEP]
    return {
        "kernels_per_step": kernels / steps,
        "launches_per_step": sum(c for k, c in names.items() if k in LAUNCHES) / steps,
        "graph_launches_per_step": names.get("cudaGraphLaunch", 0) / steps,
        "syncs_per_step": sum(c for k, c in names.items() if k in SYNCS) / steps,
        "gpu_ms_per_step": total / steps / 1e3,
        "profiled_ms_per_step": (sum(e["dur"] for e in step_ranges) / len(step_ranges) / 1e3) if step_ranges else None,
        "parts_ms_per_step": {p: gpu_us.get(p, 0.0) / steps / 1e3 for p in PARTS},
        "top_kernels_ms_per_step": [[k, v / steps / 1e3] for k, v in
                                    sorted(by_kernel.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]],
        "top_ops_ms_per_step": [[k, v / steps / 1e3] for k, v in
                                sorted(by_op.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]],
    }


def profile(fn: Callable[[], object], steps: int, trace_path: str) -> Dict:
    from torch.profiler import ProfilerActivity, record_function

    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                record_shapes=SHAPES) as prof:
        for _ in range(steps):
            with record_function(STEP):
                fn()
        torch.cuda.synchronize()
    if SHAPES:  # which tensors the aten operators work on (where copies and concatenations come from)
        print(prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cuda_time_total", row_limit=SHAPES, max_name_column_width=36,
            max_shapes_column_width=110))
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as f:
        return analyse(json.load(f), steps)


# --- implementations: each gives a step function for n atoms ---------------------------------------
def md_accel_potential(model: str, dtype: torch.dtype):
    if model.endswith(".mdx"):
        from md_accel.io import load

        return load(model, dtype=dtype)
    if model == "mace":
        from md_accel.convert.mace import convert_mace
        from model_step import mace_model

        return convert_mace(mace_model(SimpleNamespace(mace_model=None), dtype, "cpu"), dtype=dtype)
    from md_accel.convert.sevenn import convert_sevenn
    from model_step import sevenn_checkpoint

    return convert_sevenn(sevenn_checkpoint(model), dtype=dtype)


def md_accel_step(potential, n: int, dtype: torch.dtype, cuda_graph: Optional[bool], pair_weights: bool = True):
    """An ASE-driven step: positions change (alternating +-1e-3 A, inside the Verlet skin), then
    energy, forces and stress are computed and copied to the host."""
    from ase import Atoms

    from md_accel.calculator import Calculator

    calc = Calculator(copy.deepcopy(potential), device="cuda", dtype=dtype, cuda_graph=cuda_graph,
                      pair_weights=pair_weights)
    inner = calc._edges

    def edges(*a, **k):  # label the uncaptured step's neighbour-list kernels (the graphed step filters in its graph)
        with torch.profiler.record_function(NEIGHBORS):
            return inner(*a, **k)

    calc._edges = edges
    symbol = "Cu" if "Cu" in calc.model.elements else calc.model.elements[0]
    pos, cell = common.fcc_copper(n)
    atoms = Atoms(f"{symbol}{n}", positions=pos, cell=cell, pbc=True)
    delta = 1e-3 * np.random.default_rng(1).normal(size=pos.shape) / np.sqrt(3)
    state = {"k": 0}

    def run():
        state["k"] += 1
        atoms.positions = pos + (delta if state["k"] % 2 else -delta)
        calc.calculate(atoms, ["energy", "forces", "stress"], ["positions"])
        return calc.results["energy"]

    return run, calc


def peer_step(spec: str, model: str, n: int, dtype: torch.dtype):
    """A source library's own model (model_step backends ``sevenn:VARIANT`` / ``mace:VARIANT``)
    on a prebuilt graph: forward + forces; the neighbour list and the results' copy to the host
    are not part of it."""
    from model_step import make_backend

    b = make_backend(spec, SimpleNamespace(sevenn_checkpoint=model, mace_model=None))
    b.load(dtype, torch.device("cuda"))
    fn = b.step(common.copper_graph(n, b.cutoff))

    def run():
        energy, forces = fn()
        return float(energy.detach().sum())  # the host needs the result, as in MD

    return run, b


def measure(name: str, make: Callable, n: int, args, trace_dir: str, log) -> Dict:
    rec = {"impl": name, "atoms": n}
    try:
        run, owner = make()
        t = common.time_wall(run, "cuda", args.warmup, args.repeats)
        rec["wall_ms_per_step"] = t["median_ms"]
        step = getattr(owner, "step", None)
        if step is not None and hasattr(step, "num_replays"):
            rec.update(graph_mode=step.mode, graph_captures=step.num_captures, graph_replays=step.num_replays)
        rec["status"] = "timed"  # kept if the profiler fails
        rec.update(profile(run, args.steps, os.path.join(trace_dir, f"{name.replace(':', '_')}_{n}.json")))
        rec["gpu_busy"] = rec["gpu_ms_per_step"] / rec["wall_ms_per_step"]
        rec["status"] = "ok"
        if rec["kernels_per_step"] == 0:
            rec["note"] = "no kernels in the trace (CUPTI did not report them)"
    except Exception as e:  # noqa: BLE001
        rec["status"] = ("profiler: " if rec.get("status") == "timed" else "") + common.failure(e)
    finally:
        run = owner = None
        common.release("cuda")
    log(f"[profile_step] {name:22s} {n:6d} atoms: " + (
        f"{rec['wall_ms_per_step']:.2f} ms, {rec['launches_per_step']:.0f} launches, "
        f"{rec['kernels_per_step']:.0f} kernels, busy {100 * rec['gpu_busy']:.0f} %" if rec["status"] == "ok"
        else f"{rec.get('wall_ms_per_step', float('nan')):.2f} ms, {rec['status']}"))
    for key in ("top_kernels_ms_per_step", "top_ops_ms_per_step"):
        for kname, ms in rec.get(key, []):
            log(f"    {ms:8.3f} ms  {kname}")
    return rec


def table(recs: List[Dict]) -> str:
    head = ["impl", "atoms", "ms/step", "launches", "kernels", "syncs", "GPU busy"] + [f"{p} %" for p in PARTS]
    rows = []
    for r in recs:
        if r["status"] != "ok":
            wall = f"{r['wall_ms_per_step']:.2f}" if "wall_ms_per_step" in r else ""
            rows.append([r["impl"], r["atoms"], wall, r["status"][:60]] + [""] * (len(head) - 4))
            continue
        tot = r["gpu_ms_per_step"] or float("nan")
        rows.append([r["impl"], r["atoms"], f"{r['wall_ms_per_step']:.2f}", f"{r['launches_per_step']:.0f}",
                     f"{r['kernels_per_step']:.0f}", f"{r['syncs_per_step']:.0f}", f"{100 * r['gpu_busy']:.0f} %"]
                    + [f"{100 * r['parts_ms_per_step'][p] / tot:.1f}" for p in PARTS])
    return common.markdown_table(head, rows)


def main(argv: Optional[List[str]] = None) -> List[Dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="sevennet-0",
                    help="an .mdx file, a SevenNet checkpoint name/path, or 'mace' (MP-0-medium shape)")
    ap.add_argument("--sizes", default="864,4000")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--steps", type=int, default=20, help="profiled steps")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=30, help="timed steps (without the profiler)")
    ap.add_argument("--peers", default="", help="also profile these source-library backends, e.g. "
                    "sevenn:cueq,sevenn:oeq (--model a SevenNet checkpoint) or mace:cueq,mace:oeq (--model mace)")
    ap.add_argument("--graph", default="auto", choices=["auto", "both", "on", "off"],
                    help="md_accel's step as the Calculator chooses (auto), with the CUDA graph, without, or both")
    ap.add_argument("--out", default=None)
    ap.add_argument("--trace-dir", default=None, help="keep the chrome traces here")
    ap.add_argument("--tag", default="profile_step")
    ap.add_argument("--per-edge", action="store_true", help="md_accel's radial weights per edge, not per pair")
    ap.add_argument("--shapes", type=int, default=0, metavar="N",
                    help="also print the N operators with the most GPU time, grouped by input shapes")
    args = ap.parse_args(argv)
    global SHAPES
    SHAPES = args.shapes
    if not torch.cuda.is_available():
        raise SystemExit("profile_step needs CUDA")
    dtype = getattr(torch, args.dtype)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    log = lambda s: print(s, flush=True)  # noqa: E731
    env = common.environment("cuda")
    log(f"[profile_step] {env['device']}, torch {env['torch']}, {args.dtype}, model {args.model}, sizes {sizes}")
    out = common.out_dir(args.out)
    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="profile_step_")
    os.makedirs(trace_dir, exist_ok=True)

    t0 = time.perf_counter()
    potential = md_accel_potential(args.model, dtype)
    log(f"[profile_step] md_accel potential ready in {time.perf_counter() - t0:.1f} s")
    recs: List[Dict] = []
    for n in sizes:
        for graph in {"both": (False, True), "on": (True,), "off": (False,), "auto": (None,)}[args.graph]:
            name = {None: "md_accel:auto", True: "md_accel+graph", False: "md_accel"}[graph]
            rec = measure(name, lambda: md_accel_step(potential, n, dtype, graph, not args.per_edge), n, args, trace_dir,
                          log)
            if graph is None:  # say what the Calculator chose
                rec["impl"] += " (graph)" if rec.get("graph_replays") else " (no graph)"
            recs.append(rec)
        for spec in [v for v in args.peers.split(",") if v]:
            recs.append(measure(spec, lambda: peer_step(spec, args.model, n, dtype), n, args, trace_dir, log))
    common.write_json(os.path.join(out, f"{args.tag}.json"), {"env": env, "args": vars(args), "results": recs})
    md = (f"Step profile, fcc Cu, {args.model}, {args.dtype}, {env['device']}; md_accel: Calculator step "
          f"(neighbour list, energy, forces, stress, copy to host); peers: model forward + forces on a "
          f"prebuilt graph. Parts: share of kernel time.\n\n" + table(recs))
    common.append_markdown(os.path.join(out, "tables.md"), f"Step profile ({args.tag})", md)
    print(md, flush=True)
    if not args.trace_dir:
        log(f"[profile_step] traces in {trace_dir}")
    return recs


if __name__ == "__main__":
    main()
