"""Plot of a LAMMPS scaling run (``tools/gpu_lammps_scaling.sh`` writes ``scaling.json``): throughput
(atom-steps/s) and time per step against the GPU count, one line per case.

    python benchmarks/lammps_scaling_plot.py OUTDIR/scaling.json [-o OUTDIR/scaling.png]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def plot(report: dict, path: str) -> bool:
    plt = common.pyplot()
    if plt is None:
        return False
    rows = [r for r in report["rows"] if r.get("status") == "ok"]
    fig, (ax_rate, ax_time) = plt.subplots(1, 2, figsize=(9, 3.6))
    for case in dict.fromkeys(r["case"] for r in rows):
        pts = sorted((r["gpus"], r["atom_steps_per_s"] / 1e3, r["ms_per_step"], r["atoms"])
                     for r in rows if r["case"] == case)
        gpus = [p[0] for p in pts]
        label = f"{case} ({pts[-1][3]:,} atoms on {pts[-1][0]})"
        ax_rate.plot(gpus, [p[1] for p in pts], marker="o", label=label)
        ax_time.plot(gpus, [p[2] for p in pts], marker="o", label=label)
    for ax, what in ((ax_rate, "katom-steps / s"), (ax_time, "ms / step")):
        ax.set_xlabel("GPUs (one MPI rank each)")
        ax.set_ylabel(what)
        ax.set_xticks(sorted({r["gpus"] for r in rows}))
    meta = report.get("meta", {})
    fig.suptitle(f"pair_style md_accel, {os.path.basename(str(meta.get('model', '')))}, {meta.get('gpu', '')}",
                 fontsize=9)
    ax_rate.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"[bench] wrote {path}", flush=True)
    return True


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="scaling.json")
    ap.add_argument("-o", "--out", default=None, help="PNG path (default: next to the report)")
    args = ap.parse_args(argv)
    with open(args.report) as f:
        report = json.load(f)
    plot(report, args.out or os.path.join(os.path.dirname(os.path.abspath(args.report)), "scaling.png"))


if __name__ == "__main__":
    main()
