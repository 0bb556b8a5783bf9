"""The memory-lean threshold (``MD_ACCEL_LEAN_WEIGHTS_MIB``, ``lean_graph`` in csrc/tp_conv_chunked_cuda.cpp)
from ``model_step.py`` results: per model, dtype and size, md_accel's Calculator step by default
(``md_accel:WHAT+graph``), with the rows kept (``+graph+lean=0``) and the leanest peer of the same run.

A layer keeps no rows for the backward when its per-edge weights, edges x width x element bytes, are at most the
threshold; the edges are the CUDA graph's edge slots where the Calculator captures the step (``md_accel.step``:
up to ``AUTO_MAX_EDGES`` edges, padded to the capacity ladder). A cell must stay lean when keeping its rows
would leave its peak less than ``--margin`` under the peer's. The threshold printed is the smallest that keeps
every such cell's layers lean; the table says which layers keep rows at it.

    python benchmarks/lean_threshold.py RESULTS.json ... [--margin 0.1] [--widths MODEL=W1,W2,...] [--out DIR]

``--widths`` gives a model's layer widths where the results predate their record (``weight_widths``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from md_accel.step import AUTO_MAX_EDGES, capacity  # noqa: E402

ELEMENT_BYTES = {"float32": 4, "float64": 8}


def calculator_edge_slots(edges: int) -> int:
    """The edge count the op sees in the Calculator's step: the CUDA graph's slots where it is captured."""
    return capacity(edges) if edges <= AUTO_MAX_EDGES else edges


def cells(result: Dict, widths: Dict[str, List[int]]) -> List[Dict]:
    """One dict per (model, size) of one model_step.py run that has the default, kept and peer rows."""
    dtype = result["args"]["dtype"]
    by: Dict = {}
    for r in result["results"]:
        if r.get("status") == "ok":
            by.setdefault(r["model"], {}).setdefault(r["atoms"], []).append(r)
    out = []
    for model, sizes in by.items():
        for atoms, recs in sorted(sizes.items()):
            lean = [r for r in recs if r["backend"].startswith("md_accel:") and r["backend"].endswith("+graph")]
            kept = [r for r in recs if r["backend"].startswith("md_accel:") and r["backend"].endswith("+graph+lean=0")]
            peers = [r for r in recs if not r["backend"].startswith("md_accel:") and r.get("peak_bytes")]
            if not (lean and kept and peers):
                continue
            peer = min(peers, key=lambda r: r["peak_bytes"])
            w = kept[0].get("weight_widths") or widths.get(model)
            if not w:
                raise SystemExit(f"{model}: no weight_widths in the results; give --widths {model}=W1,W2,...")
            slots = calculator_edge_slots(kept[0]["edges"])
            out.append({"model": model, "dtype": dtype, "atoms": atoms, "edges": kept[0]["edges"], "slots": slots,
                        "layer_bytes": [slots * x * ELEMENT_BYTES[dtype] for x in w],
                        "lean_ms": lean[0]["median_ms"], "lean_peak": lean[0]["peak_bytes"],
                        "kept_ms": kept[0]["median_ms"], "kept_peak": kept[0]["peak_bytes"],
                        "peer": peer["backend"], "peer_ms": peer["median_ms"], "peer_peak": peer["peak_bytes"]})
    return out


def threshold(rows: List[Dict], margin: float) -> Optional[int]:
    """The smallest threshold (bytes) keeping lean every cell whose kept peak is not ``margin`` under its
    peer's; None when no cell needs it (then any threshold does)."""
    must = [max(c["layer_bytes"]) for c in rows if c["kept_peak"] > (1 - margin) * c["peer_peak"]]
    return max(must) if must else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--margin", type=float, default=0.1)
    ap.add_argument("--widths", nargs="*", default=[], help="MODEL=W1,W2,... (layer widths of the per-edge weights)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    widths = {k: [int(x) for x in v.split(",")] for k, v in (w.split("=", 1) for w in args.widths)}
    rows = [c for path in args.results for c in cells(json.load(open(path)), widths)]
    t = threshold(rows, args.margin)
    mib = lambda b: f"{b / 2**20:,.0f}"  # noqa: E731
    gib = lambda b: f"{b / 2**30:.2f}"  # noqa: E731
    table = []
    for c in rows:
        ratio = c["kept_peak"] / c["peer_peak"]
        kept_at_t = [b > t for b in c["layer_bytes"]] if t is not None else [True] * len(c["layer_bytes"])
        table.append([c["model"], c["dtype"], f"{c['atoms']:,}", f"{c['edges']:,} ({c['slots']:,})",
                      " / ".join(mib(b) for b in c["layer_bytes"]),
                      f"{c['lean_ms']:.2f} ({gib(c['lean_peak'])})", f"{c['kept_ms']:.2f} ({gib(c['kept_peak'])})",
                      f"{c['peer_ms']:.2f} ({gib(c['peer_peak'])})", f"{ratio:.2f}" + (" must stay lean" if
                                                                                      ratio > 1 - args.margin else ""),
                      f"{c['lean_ms'] / c['kept_ms']:.2f}x", f"{sum(kept_at_t)} of {len(kept_at_t)}"])
    md = common.markdown_table(["model", "dtype", "atoms", "edges (slots)", "layers' weights (MiB)",
                                "lean ms (GiB)", "kept ms (GiB)", "leanest peer ms (GiB)", "kept peak / peer's",
                                "kept / lean speed", "layers keeping rows at the threshold"], table)
    verdict = (f"smallest threshold keeping lean every cell whose kept peak is above {1 - args.margin:.2f} "
               "of its peer's: " + (f"{mib(t)} MiB ({t:,} bytes)" if t is not None else "none needed"))
    print(md + "\n\n" + verdict, flush=True)
    if args.out:
        out = common.out_dir(args.out)
        common.write_json(os.path.join(out, "lean_threshold.json"),
                          {"margin": args.margin, "threshold_bytes": t, "cells": rows, "inputs": args.results})
        common.append_markdown(os.path.join(out, "tables.md"), "Lean threshold", md + "\n\n" + verdict)


if __name__ == "__main__":
    main()
