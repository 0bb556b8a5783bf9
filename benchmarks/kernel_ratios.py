"""md_accel against the peers from ``kernels.py`` results: for each workload, dtype and pass, each md_accel
implementation's time and peak memory against the fastest peer and the least peak of the peers measured in the
same file (one run, one GPU: ratios never cross files), and for the double backward the same for the op's own
share (``op_ms``: the pass minus the benchmark's loss).

    python benchmarks/kernel_ratios.py RUN/kernels.json [RUN2/kernels.json ...] [--out DIR]

A peer is every implementation that is not md_accel's (``OURS``: ``md_accel`` and its variants) and whose check
against e3nn did not find it wrong for the stages the pass runs (session 29: OpenEquivariance's deterministic
backward is wrong on directed graphs, so it is no peer there for the forward + backward or the double backward;
a check that could not compare leaves the peer in). md_accel's own wrong cells get no ratios. Ratios are the
peer's time (or peak) over md_accel's: above 1, md_accel is faster (or needs less memory).

A summary comes first: per md_accel implementation and pass, the ranges over all cells and the cells under
``--target``; beside them e3nn's time over md_accel's where e3nn ran in the same file (#3 asks for at least
``--e3nn-target``, 10x), and the cells where it did not finish (out of memory, say).

Where the file has its copy bandwidth and graph, each cell also gets its byte floor (``workloads.byte_floor``,
recomputed with today's count from the file's graph and workload shapes) and every time over it, in a second
table: how far md_accel and the fastest peer are from moving the least bytes the pass needs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from workloads import CHECK_TOLERANCE, PASS_STAGES, byte_floor  # noqa: E402

OURS = ("md_accel", "md_accel_atomic", "md_accel_scratch", "md_accel_gwrows", "md_accel_keep_ggw")
PEER_NAMES = {"cueq": "cueq", "oeq_det": "OEq", "oeq_atomic": "OEq atomic", "e3nn": "e3nn"}


# A pass counts only where the implementation's own check against e3nn (``kernels.py``'s "checks": relative
# errors of the forward, first and second gradients on the check subgraph) did not fail for the stages it runs.
def check_verdict(checks: Dict[Tuple[str, str, str], dict], r: dict) -> Optional[str]:
    """None where record ``r``'s check passed for the stages its pass runs (or its file has no check for it:
    older files); "wrong (ERR)" where an error is over the dtype's tolerance; "unchecked: WHY" where the check
    could not compare (no e3nn reference, cuEquivariance's basis not comparable, the check itself raised)."""
    chk = checks.get((r["workload"], r["dtype"], r["impl"]))
    if chk is None:
        return None
    errs = [chk.get(stage) for stage in PASS_STAGES.get(r["pass"], ()) if stage != "loss"]  # the loss: no check
    known = [e for e in errs if e is not None]
    worst = max(known, default=0.0)
    if worst > CHECK_TOLERANCE.get(r["dtype"], 1e-5):
        return f"wrong ({worst:.1e})"
    if chk.get("status") != "ok" or len(known) < len(errs):
        return f"unchecked: {chk.get('status')}"
    return None


def _best(rows: List[dict], key: str, pick=min) -> Optional[Tuple[float, str]]:
    vals = [(r[key], r["impl"]) for r in rows if r.get("status") == "ok" and r.get(key)]
    return pick(vals) if vals else None


def floors_ms(data: dict) -> Dict[Tuple[str, str, str], float]:
    """The byte floor in ms of every (workload, dtype, pass) of one kernels.json: its workloads' shapes, its
    graph, its measured copy bandwidth; empty where the file lacks them."""
    bw, g, shapes = data.get("copy_bandwidth_gbs"), data.get("graph") or {}, data.get("workloads") or {}
    if not bw or "num_edges" not in g or "num_nodes" not in g:
        return {}
    out = {}
    for name, wl in shapes.items():
        shape = SimpleNamespace(dims=wl["dims"], weight_numel=wl["weight_numel"])
        for dtype, size in (("float32", 4), ("float64", 8)):
            for kind, b in byte_floor(shape, g["num_nodes"], g["num_edges"], size).items():
                out[(name, dtype, kind)] = b / (bw * 1e9) * 1e3
    return out


def ratios(results: List[dict], source: str = "", floors: Optional[Dict] = None,
           checks: Optional[List[dict]] = None) -> List[dict]:
    """One record per (md_accel implementation, workload, dtype, pass) of one kernels.json's results;
    ``floors``: ``floors_ms`` of the same file; ``checks``: its "checks" (``check_verdict``: a peer found
    wrong for the pass is no peer there; an md_accel record found wrong is marked ``wrong`` and gets no
    ratios; one the check could not compare is marked ``unchecked``)."""
    by_cell = {(c["workload"], c["dtype"], c["impl"]): c for c in checks or []}
    groups: Dict[Tuple[str, str, str], List[dict]] = {}
    for r in results:
        groups.setdefault((r["workload"], r["dtype"], r["pass"]), []).append(r)
    out = []
    for (workload, dtype, kind), rows in groups.items():
        peers = [r for r in rows if r["impl"] not in OURS
                 and not (check_verdict(by_cell, r) or "").startswith("wrong")]
        fastest, least = _best(peers, "median_ms"), _best(peers, "peak_bytes")
        fastest_op = _best(peers, "op_ms")
        e3nn = next((r for r in rows if r["impl"] == "e3nn"), None)
        for r in rows:
            if r["impl"] not in OURS or r.get("status") != "ok":
                continue
            rec = {"source": source, "impl": r["impl"], "workload": workload, "dtype": dtype, "pass": kind,
                   "ms": r["median_ms"]}
            verdict = check_verdict(by_cell, r)
            if verdict and verdict.startswith("wrong"):  # no ratios for wrong results
                out.append({**rec, "wrong": verdict})
                continue
            if verdict:
                rec["unchecked"] = verdict
            if fastest:
                rec.update(peer=fastest[1], peer_ms=fastest[0], speedup=fastest[0] / r["median_ms"])
            if least and r.get("peak_bytes"):
                rec.update(memory_ratio=r["peak_bytes"] / least[0])
            if fastest_op and r.get("op_ms"):
                rec.update(op_ms=r["op_ms"], peer_op=fastest_op[1], op_speedup=fastest_op[0] / r["op_ms"])
            if e3nn is not None:  # e3nn's time over md_accel's, or why e3nn has none
                if e3nn.get("status") == "ok" and e3nn.get("median_ms"):
                    rec["e3nn_speedup"] = e3nn["median_ms"] / r["median_ms"]
                else:
                    rec["e3nn_status"] = e3nn.get("status", "no time")
            floor = (floors or {}).get((workload, dtype, kind))
            if floor:
                rec.update(floor_ms=floor, over_floor=r["median_ms"] / floor)
                if fastest:
                    rec["peer_over_floor"] = fastest[0] / floor
            out.append(rec)
    return out


def run_name(path: str) -> str:
    """The run a kernels.json belongs to: its folder, or the folder above ``kernels.py``'s own ``kernels/``."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.basename(folder) == "kernels":
        folder = os.path.dirname(folder)
    return os.path.basename(folder)


def table(records: List[dict], target: float = 1.3) -> str:
    """Markdown: one row per md_accel implementation, workload and dtype; speedups >= target in bold."""
    def cell(rec: Optional[dict]) -> str:
        if rec is None:
            return "-"
        if "wrong" in rec:
            return f"{rec['ms']:.3g} WRONG: {rec['wrong']}"
        note = " (UNCHECKED)" if "unchecked" in rec else ""
        if "speedup" not in rec:
            return f"{rec['ms']:.3g} (no peer){note}"
        x = f"{rec['speedup']:.2f}x"
        text = f"{rec['ms']:.3g} vs {PEER_NAMES.get(rec['peer'], rec['peer'])} {rec['peer_ms']:.3g}: "
        text += f"**{x}**" if rec["speedup"] >= target else x
        if "op_speedup" in rec:
            text += f" (op {rec['op_speedup']:.2f}x)"
        return text + note

    index = {(r["source"], r["impl"], r["workload"], r["dtype"], r["pass"]): r for r in records}
    rows = ["| source | impl | workload | dtype | fwd | fwd+bwd | dbwd | memory fwd / bwd / dbwd |",
            "|---|---|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["source"], r["impl"], r["workload"], r["dtype"]) for r in records):
        recs = [index.get(key + (p,)) for p in ("fwd", "fwd_bwd", "dbwd")]
        mem = " / ".join(f"{r['memory_ratio']:.3f}" if r and "memory_ratio" in r else "-" for r in recs)
        rows.append("| " + " | ".join(list(key) + [cell(r) for r in recs] + [mem]) + " |")
    return "\n".join(rows)


def summary(records: List[dict], target: float = 1.3, e3nn_target: float = 10.0) -> str:
    """Markdown: per md_accel implementation and pass, over every cell with a peer: the range of the speedups,
    of the peak-memory ratios and of the times over the byte floor, the cells under ``target``; e3nn's time over
    md_accel's (its range, the cells under ``e3nn_target``, the cells where e3nn has no time)."""
    def span(values: List[float], fmt: str) -> str:
        return f"{min(values):{fmt}}-{max(values):{fmt}}" if values else "-"

    def named(r: dict, what: str) -> str:
        return f"{r['workload']} {r['dtype']} {what}" + (f" ({r['source']})" if r["source"] else "")

    rows = ["| impl | pass | cells | speedup | peak memory ratio | time over floor | under the target | e3nn over it |",
            "|---|---|---|---|---|---|---|---|"]
    for impl in OURS:
        for kind in ("fwd", "fwd_bwd", "dbwd"):
            recs = [r for r in records if r["impl"] == impl and r["pass"] == kind and "speedup" in r]
            if not recs:
                continue
            under = ", ".join(named(r, f"{r['speedup']:.3f}x") for r in recs if r["speedup"] < target)
            e3nn = [r["e3nn_speedup"] for r in recs if "e3nn_speedup" in r]
            e3nn_text = f"{span(e3nn, '.1f')}x" if e3nn else "-"
            e3nn_text += "".join(f"; under {e3nn_target:g}x: " + named(r, f"{r['e3nn_speedup']:.1f}x") for r in recs
                                 if r.get("e3nn_speedup", e3nn_target) < e3nn_target)
            e3nn_text += "".join("; e3nn " + named(r, r["e3nn_status"]) for r in recs if "e3nn_status" in r)
            rows.append(f"| {impl} | {kind} | {len(recs)} | {span([r['speedup'] for r in recs], '.2f')}x | "
                        f"{span([r['memory_ratio'] for r in recs if 'memory_ratio' in r], '.3f')} | "
                        f"{span([r['over_floor'] for r in recs if 'over_floor' in r], '.2f')} | {under or '-'} | "
                        f"{e3nn_text} |")
    return "\n".join(rows)


def ours_in(records: List[dict]) -> List[str]:
    """The md_accel implementations that ``records`` have, in OURS order."""
    return [impl for impl in OURS if any(r["impl"] == impl for r in records)]


def floor_table(records: List[dict]) -> str:
    """Markdown: per run, workload and dtype, each pass's floor and the times over it of each md_accel
    implementation measured (``ours_in``) and of the fastest peer."""
    index = {(r["source"], r["impl"], r["workload"], r["dtype"], r["pass"]): r for r in records if "floor_ms" in r}
    rows = ["| source | workload | dtype | fwd | fwd+bwd | dbwd |", "|---|---|---|---|---|---|"]
    for key in dict.fromkeys((r["source"], r["workload"], r["dtype"]) for r in index.values()):
        cells = []
        for kind in ("fwd", "fwd_bwd", "dbwd"):
            recs = [index.get((key[0], impl) + key[1:] + (kind,)) for impl in ours_in(records)]
            some = next((r for r in recs if r), None)
            if some is None:
                cells.append("-")
                continue
            ours = " / ".join(f"{r['over_floor']:.2f}" if r else "-" for r in recs)
            peer = (f" / {PEER_NAMES.get(some['peer'], some['peer'])} {some['peer_over_floor']:.2f}"
                    if "peer_over_floor" in some else "")
            cells.append(f"{some['floor_ms']:.3g}: {ours}{peer}")
        rows.append("| " + " | ".join(list(key) + cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="kernels.json files, each from one run")
    ap.add_argument("--target", type=float, default=1.3, help="speedups at or above it in bold")
    ap.add_argument("--e3nn-target", type=float, default=10.0,
                    help="e3nn's time over md_accel's: cells under it listed")
    ap.add_argument("--out", default=None, help="directory for kernel_ratios.json / .md")
    args = ap.parse_args(argv)
    records = []
    for path in args.files:
        with open(path) as f:
            data = json.load(f)
        records += ratios(data["results"], source=run_name(path), floors=floors_ms(data), checks=data.get("checks"))
    text = (f"Summary (speedups under {args.target}x listed)\n\n" + summary(records, args.target, args.e3nn_target)
            + "\n\n" + table(records, args.target))
    if any("floor_ms" in r for r in records):
        text += (f"\n\nAgainst the byte floor (ms), then time over it: {' / '.join(ours_in(records))} / the fastest peer"
                 "\n\n" + floor_table(records))
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        common.write_json(os.path.join(args.out, "kernel_ratios.json"), records)
        with open(os.path.join(args.out, "kernel_ratios.md"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
