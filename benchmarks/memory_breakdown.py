"""Where a step's peak device memory goes: the blocks alive at the peak of one energy + forces
step, grouped by the Python line that allocated them (torch's allocator history), for md_accel
backends and peers as ``model_step.py`` builds them (same backend names and options).

    python benchmarks/memory_breakdown.py --backends md_accel:mace+graph,mace:cueq --sizes 864
        [--dtype float32] [--top 15] [--out DIR]

Resident memory (parameters, inputs, a CUDA graph's pool) is allocated before the recorded call:
it is reported as one line, "resident before the step". A CUDA graph's replay allocates nothing:
``--capture`` records its first call (warm-up and capture) instead. CUDA only.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import model_step  # noqa: E402


MAX_EVENTS = 1_000_000


def _site(frames: List[Dict]) -> str:
    """The innermost frame in md_accel, the benchmarks or a peer package, as file:line function."""
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" in name or name.startswith("<"):
            continue
        return f"{'/'.join(name.split('/')[-2:])}:{f.get('line')} {f.get('name')}"
    return "(no Python frame)"


Sites = List[Tuple[str, int, int]]


def peak_breakdown(trace: List[Dict]) -> Tuple[int, Sites, Sites]:
    """Replays allocator events: (peak bytes above the start, [(site, bytes, blocks)] alive at the
    peak, the same for the blocks still alive at the end). Frees count as torch counts allocated
    bytes (``free_requested``), blocks allocated before the recording included."""
    live: Dict[int, Tuple[int, str]] = {}
    cur = peak = 0
    at_peak: Dict[int, Tuple[int, str]] = {}
    for ev in trace:
        action, addr, size = ev.get("action"), ev.get("addr"), int(ev.get("size", 0))
        if action == "alloc":
            live[addr] = (size, _site(ev.get("frames", [])))
            cur += size
            if cur > peak:
                peak, at_peak = cur, dict(live)
        elif action == "free_requested":
            live.pop(addr, None)
            cur -= size
    return peak, _grouped(at_peak), _grouped(live)


def _grouped(blocks: Dict[int, Tuple[int, str]]) -> List[Tuple[str, int, int]]:
    groups: Dict[str, List[int]] = collections.defaultdict(lambda: [0, 0])
    for size, site in blocks.values():
        groups[site][0] += size
        groups[site][1] += 1
    return sorted(((s, b, n) for s, (b, n) in groups.items()), key=lambda r: -r[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="md_accel:mace+graph")
    ap.add_argument("--sizes", default="864")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--mace-model", default=None)
    ap.add_argument("--sevenn-checkpoint", default="SevenNet_l3i5")
    ap.add_argument("--nequip-model", default=model_step.nequip_peer.DEFAULT_MODEL)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--capture", action="store_true",
                    help="for +graph backends record the first call (warm-up and capture), not a replay")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.dtype_t = getattr(torch, args.dtype)
    device = torch.device("cuda")
    report = {"env": common.environment(device), "args": vars(args) | {"dtype_t": args.dtype}, "results": []}
    graphs: Dict = {}
    for spec in args.backends.split(","):
        b = model_step.make_backend(spec, args)
        b.load(args.dtype_t, device)
        for n in (int(s) for s in args.sizes.split(",")):
            key = (n, b.cutoff)
            if key not in graphs:
                graphs[key] = common.copper_graph(n, b.cutoff)
            fn = b.step(graphs[key])
            capture = args.capture and b.keeps_pool
            if not capture:
                fn()  # builds: the next call is the steady step
            common.sync(device)
            resident = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            torch.cuda.memory._record_memory_history(max_entries=MAX_EVENTS, stacks="python")
            fn()
            common.sync(device)
            trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
            torch.cuda.memory._record_memory_history(enabled=None)
            if len(trace) >= MAX_EVENTS:
                print(f"warning: {MAX_EVENTS} allocator events recorded, the oldest were dropped")
            peak, groups, after = peak_breakdown(trace)
            torch_peak = torch.cuda.max_memory_allocated(device)
            if resident + peak != torch_peak:
                print(f"warning: replayed peak {resident + peak} B, torch's {torch_peak} B")
            gib = 2.0 ** 30
            what = f"{b.name}{' (first call: warm-up and capture)' if capture else ''}"
            print(f"\n{what}, {n} atoms, {len(graphs[key]['src'])} edges, {args.dtype}: peak "
                  f"{(resident + peak) / gib:.3f} GiB = resident before the step {resident / gib:.3f} + "
                  f"{peak / gib:.3f} allocated in it\n")
            print("| allocated at | GiB at the peak | blocks |\n|---|---|---|")
            for site, nbytes, blocks in groups[:args.top]:
                print(f"| {site} | {nbytes / gib:.3f} | {blocks} |")
            print(f"\nallocated in the call and alive after it: {sum(r[1] for r in after) / gib:.3f} GiB\n")
            for site, nbytes, blocks in after[:5]:
                print(f"| {site} | {nbytes / gib:.3f} | {blocks} |")
            fn = None
            common.release(device)
            left = torch.cuda.memory_allocated(device)
            print(f"\nallocated after the step is released: {left / gib:.3f} GiB")
            report["results"].append({"backend": b.name, "atoms": n, "capture": capture, "resident_bytes": resident,
                                      "step_peak_bytes": peak, "sites": groups, "alive_after": after,
                                      "left_after_release": left})
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "memory_breakdown.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
