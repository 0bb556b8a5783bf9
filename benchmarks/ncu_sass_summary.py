"""Summary of Nsight Compute's source page of one kernel (``ncu --import R --page source --csv --print-source sass``,
as ``tools/gpu_ncu.sh`` writes it, plain or gzipped): the warp stall samples by reason, the instructions with the
most samples and their leading reasons, the executed instructions by opcode (predicates dropped) and the
local-memory (spill) instructions.

    python benchmarks/ncu_sass_summary.py benchmarks/results/2026-11-28-s33/call6_ncu/ncu_mmm64_sass.csv.gz [--top 12]
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import re
from typing import Dict, List

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_rows(path: str) -> List[Dict[str, str]]:
    """The instruction rows, as dicts by column name (the lines before the header, and short lines, skipped)."""
    with (gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else open(path, errors="replace")) as f:
        lines = list(csv.reader(io.StringIO(f.read())))
    head = next((i for i, r in enumerate(lines) if "Source" in r and SAMPLES in r), None)
    if head is None:
        raise ValueError(f"{path}: no header with 'Source' and '{SAMPLES}' (not an ncu source page?)")
    cols = lines[head]
    return [dict(zip(cols, r)) for r in lines[head + 1:] if len(r) == len(cols)]


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    """The instruction's opcode with its modifiers, without a predicate guard (``@!P2 FSEL ...`` -> ``FSEL``)."""
    words = re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split()
    return words[0] if words else "?"


def summary(rows: List[Dict[str, str]], top: int = 12) -> str:
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c] if rows else []
    by_reason = collections.Counter()
    for r in rows:
        for c in reasons:
            by_reason[c[len("stall_"):]] += number(r[c])
    stalled = sum(by_reason.values()) or 1.0
    out = ["stall samples by reason: " + ", ".join(f"{k} {100 * v / stalled:.1f}%"
                                                   for k, v in by_reason.most_common(10))]
    samples = sum(number(r[SAMPLES]) for r in rows) or 1.0
    out.append(f"instructions with the most samples (of {samples:.0f}):")
    for r in sorted(rows, key=lambda r: -number(r[SAMPLES]))[:top]:
        mine = number(r[SAMPLES]) or 1.0
        lead = sorted(((number(r[c]), c[len("stall_"):]) for c in reasons), reverse=True)[:3]
        out.append(f"  {100 * number(r[SAMPLES]) / samples:5.1f}%  {r['Source'].strip()[:44]:44s}  "
                   + ", ".join(f"{name} {100 * v / mine:.0f}%" for v, name in lead))
    mix = collections.Counter()
    for r in rows:
        mix[opcode(r["Source"])] += number(r[EXECUTED])
    executed = sum(mix.values()) or 1.0
    out.append(f"executed warp instructions {executed:.4g}: "
               + ", ".join(f"{op} {100 * v / executed:.1f}%" for op, v in mix.most_common(12)))
    local = sum(v for op, v in mix.items() if op.startswith(("LDL", "STL")))
    out.append(f"local-memory instructions: {local:.4g} ({100 * local / executed:.2f}%)")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="the source page as CSV (.csv or .csv.gz)")
    ap.add_argument("--top", type=int, default=12, help="instructions listed by stall samples")
    args = ap.parse_args(argv)
    print(summary(read_rows(args.csv), args.top))


if __name__ == "__main__":
    main()
