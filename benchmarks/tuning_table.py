"""Side-by-side table of ``kernels.py`` results (md_accel rows) of code-generation variants
(``MD_ACCEL_TP_TUNING``), measured one after another on the same GPU by ``tools/gpu_tuning.sh``.

    python benchmarks/tuning_table.py DIR    # DIR/<label>/kernels.json, one per variant, DIR/default first
"""
from __future__ import annotations

import argparse
import glob
import json
import os
from typing import Dict, List, Tuple

from workloads import CHECK_TOLERANCE  # benchmarks/, the script's folder


def load(root: str) -> Dict[str, Dict[Tuple[str, str, str], object]]:
    """label -> (workload, dtype, pass) -> median ms of md_accel, or a string saying why not (a
    failed run, or results outside the tolerance on kernels.py's check subgraph)."""
    out: Dict[str, Dict[Tuple[str, str, str], object]] = {}
    for path in sorted(glob.glob(os.path.join(root, "*", "kernels.json"))):
        label = os.path.basename(os.path.dirname(path))
        data = json.load(open(path))
        wrong = {}
        for c in data.get("checks", []):
            if c.get("impl") != "md_accel":
                continue
            err = max((c.get(k) or 0.0) for k in ("fwd", "bwd", "dbwd")) if c.get("status") == "ok" else None
            if err is None or err > CHECK_TOLERANCE[c["dtype"]]:
                wrong[(c["workload"], c["dtype"])] = "check failed" if err is None else f"WRONG ({err:.1e})"
        out[label] = {}
        for r in data["results"]:
            if r["impl"] != "md_accel":
                continue
            key = (r["workload"], r["dtype"], r["pass"])
            out[label][key] = wrong.get(key[:2]) or (r["median_ms"] if r.get("status") == "ok" else r.get("status"))
    return out


def table(runs: Dict[str, Dict[Tuple[str, str, str], object]], base: str = "default") -> str:
    labels = [base] + [k for k in runs if k != base] if base in runs else list(runs)
    keys: List[Tuple[str, str, str]] = list(dict.fromkeys(k for label in labels for k in runs[label]))
    head = "| workload | dtype | pass | " + " | ".join(labels) + " |"
    rows = [head, "|" + "---|" * (3 + len(labels))]
    for key in keys:
        ref = runs.get(base, {}).get(key)
        cells = []
        for label in labels:
            ms = runs[label].get(key)
            if ms is None or isinstance(ms, str):
                cells.append(ms or "-")
            elif label == base or not isinstance(ref, float):
                cells.append(f"{ms:.3g} ms")
            else:
                cells.append(f"{ms:.3g} ms ({ref / ms:.2f}x)")
        rows.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    args = ap.parse_args(argv)
    print(table(load(args.dir)))


if __name__ == "__main__":
    main()
