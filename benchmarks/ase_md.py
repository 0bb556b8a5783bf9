"""ASE molecular dynamics throughput: md_accel's Calculator against the source libraries' own
ASE calculators (SevenNetCalculator with its fastest switches, MACECalculator, nequip's
NequIPCalculator with its accelerating model modifiers), neighbour lists included — what a
user of an ASE MD script sees.

A run = ``--steps`` velocity-Verlet steps (1 fs, fcc Cu at 300 K) after ``--warmup`` steps;
reported: ms/step (wall clock), atom-steps/s, ns/day and peak GPU memory. Every calculator runs
in try/except; a failure or OOM is recorded and the run goes on.

    python benchmarks/ase_md.py [--calcs md_accel:sevennet-l3i5,sevenn:oeq,md_accel:mace,mace:cueq,...] [--sizes 864,4000]
        [--mdx FILE.mdx ...] [--mace-model FILE.model] [--nequip-model FILE.ckpt] [--steps 20]
        [--budget S] [--out DIR]

An md_accel calculator takes ``+graph=on`` / ``+graph=off`` (``md_accel:FILE.mdx+graph=off``): the
Calculator's ``cuda_graph=True`` / ``False`` instead of its default (None: the graph up to AUTO_MAX_EDGES
edges, above that the faster of the two by its own timing; the row's record names what it chose).

NequIP rows: ``md_accel:nequip`` (``--nequip-model`` converted by md_accel) and
``nequip:e3nn|oeq|cueq`` (nequip_peer.calculator: the same file, eager, in ``--dtype``, with
nequip's default neighbour list, matscipy, or ``--nequip-nl``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import nequip_peer  # noqa: E402

DEFAULT_CALCS = "md_accel:sevennet-l3i5,sevenn:oeq,sevenn:cueq,sevenn:e3nn"
SEVENN_NAMES = {"sevennet-l3i5": "7net-l3i5", "sevennet-0": "7net-0"}
GRAPH_MODES = {"": None, "on": True, "off": False}  # md_accel's +graph=: the Calculator's cuda_graph


def _atoms(n_atoms: int):
    from ase import Atoms
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    pos, cell = common.fcc_copper(n_atoms)
    atoms = Atoms("Cu" * len(pos), positions=pos, cell=cell, pbc=True)
    MaxwellBoltzmannDistribution(atoms, temperature_K=300, rng=__import__("numpy").random.default_rng(0))
    return atoms


def _make_calc(name: str, args) -> Callable[[], object]:
    """A factory of a fresh ASE calculator for ``name`` = family:variant."""
    family, _, variant = name.partition(":")
    if family == "md_accel":
        import md_accel

        variant, _, graph = variant.partition("+graph=")
        if graph not in GRAPH_MODES:
            raise ValueError(f"{name}: +graph= takes one of {sorted(m for m in GRAPH_MODES if m)}")
        cuda_graph = GRAPH_MODES[graph]
        if variant.endswith(".mdx"):  # run in --dtype, whatever the file's own (the table names one dtype)
            return lambda: md_accel.Calculator(variant, device="cuda", dtype=args.dtype, cuda_graph=cuda_graph)
        os.makedirs(args.out, exist_ok=True)
        files = {"nequip": args.nequip_model, "mace": args.mace_model}  # md_accel:nequip / md_accel:mace
        source = files.get(variant) or variant
        if variant == "nequip":
            stem = nequip_peer.model_name(source)
        else:
            stem = os.path.splitext(os.path.basename(source))[0]
        path = os.path.join(args.out, f"{stem}-{args.dtype}.mdx")
        if not os.path.exists(path):
            md_accel.convert(source, path, dtype=args.dtype)
        return lambda: md_accel.Calculator(path, device="cuda", cuda_graph=cuda_graph)
    if family == "sevenn":
        from sevenn.calculator import SevenNetCalculator

        flags = {"e3nn": {}, "cueq": {"enable_cueq": True}, "oeq": {"enable_oeq": True},
                 "flash": {"enable_flash": True}}[variant]
        model = SEVENN_NAMES.get(args.sevenn_model, args.sevenn_model)
        return lambda: SevenNetCalculator(model=model, device="cuda", **flags)
    if family == "mace":
        from mace.calculators import MACECalculator

        if not args.mace_model:
            raise RuntimeError("--mace-model is needed for mace calculators")
        flags = {"e3nn": {}, "cueq": {"enable_cueq": True}, "oeq": {"enable_oeq": True}}[variant]
        return lambda: MACECalculator(model_paths=args.mace_model, device="cuda", default_dtype=args.dtype,
                                      **flags)
    if family == "nequip":
        dtype = getattr(torch, args.dtype)
        return lambda: nequip_peer.calculator(args.nequip_model, variant, dtype, "cuda", args.nequip_nl)
    raise ValueError(f"unknown calculator {name!r}")


def _ms(seconds: List[float]) -> str:
    return "/".join(f"{1e3 * t:.1f}" for t in seconds) or "-"


def _run_md(make_calc, n_atoms: int, warmup: int, steps: int, host_profile: int = 0, kernel_profile: int = 0) -> Dict:
    """``host_profile`` N > 0: the timed steps also under cProfile, the N functions with the most own time
    (host time, the waits for the GPU included) kept as the record's ``host_profile`` text. ``kernel_profile`` N > 0:
    then ``steps`` more steps under torch.profiler: the GPU's kernel time per step (``kernel_ms_per_step``) and the
    N kernels with the most time (``kernels``: name, us and launches per step)."""
    import cProfile
    import io
    import pstats

    from ase import units
    from ase.md.verlet import VelocityVerlet

    atoms = _atoms(n_atoms)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()  # before the calculator: CUDA-graph pools are made in warm-up
    atoms.calc = make_calc()
    dyn = VelocityVerlet(atoms, timestep=1.0 * units.fs)
    dyn.run(warmup)
    torch.cuda.synchronize()
    profiler = cProfile.Profile() if host_profile > 0 else None
    t = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    dyn.run(steps)
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t) * 1e3 / steps
    rec = {"ms_per_step": ms, "atom_steps_per_s": n_atoms / ms * 1e3,
           "ns_per_day": 86400e3 / ms * 1e-6, "peak_bytes": int(torch.cuda.max_memory_allocated())}
    if profiler is not None:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(host_profile)
        rec["host_profile"] = text.getvalue()
    if kernel_profile > 0:
        kernels = common.kernel_times(lambda: dyn.run(1), steps)
        rec["kernel_ms_per_step"] = sum(k["us"] for k in kernels.values()) / 1e3
        top = sorted(kernels.items(), key=lambda kv: -kv[1]["us"])[:kernel_profile]
        rec["kernels"] = [{"name": name, "us": k["us"], "launches": k["launches"]} for name, k in top]
    choice = getattr(atoms.calc, "step_choice", None)  # md_accel's: graph or plain per size, and the trials' times
    if choice is not None and choice.times:
        rec["step_choice"] = [{"key": list(k), "chosen": choice.chosen.get(k), "seconds": t}
                              for k, t in choice.times.items()]
    return rec


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calcs", default=DEFAULT_CALCS)
    ap.add_argument("--mdx", nargs="*", default=[])
    ap.add_argument("--sizes", default="864,4000,16384,32000")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--sevenn-model", default="sevennet-l3i5")
    ap.add_argument("--mace-model", default=None)
    ap.add_argument("--nequip-model", default=nequip_peer.DEFAULT_MODEL,
                    help="nequip .ckpt (or .nequip.zip: e3nn only) for nequip:* and md_accel:nequip")
    ap.add_argument("--nequip-nl", default="matscipy", help="neighbour list of nequip's calculator")
    ap.add_argument("--warmup", type=int, default=10,
                    help="untimed steps first (md_accel's graph-or-plain trials take ~10 above 300k edges)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0)
    ap.add_argument("--host-profile", type=int, default=0, metavar="N",
                    help="cProfile the timed steps; print the N functions with the most own host time")
    ap.add_argument("--kernel-profile", type=int, default=0, metavar="N",
                    help="then as many steps under torch.profiler: kernel ms per step and the N longest kernels")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    args.out = common.out_dir(args.out)
    if not torch.cuda.is_available():
        print("[ase_md] needs CUDA")
        return 2
    t0 = time.time()
    calcs = [c for c in args.calcs.split(",") if c] + [f"md_accel:{m}" for m in args.mdx]
    sizes = [int(s) for s in args.sizes.split(",")]
    results: Dict[str, Dict[int, object]] = {c: {} for c in calcs}
    for name in calcs:
        try:
            make = _make_calc(name, args)
        except Exception as e:  # noqa: BLE001
            results[name] = {n: common.failure(e) for n in sizes}
            continue
        for n in sizes:
            if args.budget and time.time() - t0 > args.budget:
                results[name][n] = "budget"
                continue
            try:
                results[name][n] = _run_md(make, n, args.warmup, args.steps, args.host_profile, args.kernel_profile)
                r = results[name][n]
                if "host_profile" in r:
                    print(f"[ase_md] {name} {n} atoms, host profile of the timed steps:\n{r['host_profile']}", flush=True)
                if "kernels" in r:
                    print(f"[ase_md] {name} {n} atoms: kernels {r['kernel_ms_per_step']:.2f} ms per step; longest:")
                    for k in r["kernels"]:
                        print(f"    {k['us'] / 1e3:8.3f} ms x{k['launches']:.0f}  {k['name'][:110]}", flush=True)
                chosen = "".join(f" {c['chosen']} (trials, ms: graph {_ms(c['seconds']['graph'])}, plain "
                                 f"{_ms(c['seconds']['plain'])})" for c in r.get("step_choice", []))
                print(f"[ase_md] {name:28s} {n:7d} atoms {r['ms_per_step']:9.2f} ms/step "
                      f"{r['atom_steps_per_s']:.3g} atom-steps/s {r['peak_bytes'] / 2**30:.2f} GiB{chosen}", flush=True)
            except Exception as e:  # noqa: BLE001
                results[name][n] = "OOM" if common.is_oom(e) else common.failure(e)
                print(f"[ase_md] {name} {n}: {results[name][n]}", flush=True)
            common.release("cuda")
    env = common.environment("cuda")
    common.write_json(os.path.join(args.out, "ase_md.json"), {"env": env, "args": vars(args), "results": results})
    rows = []
    for name in calcs:
        row = [name]
        for n in sizes:
            r = results[name].get(n)
            row.append(f"{common.fmt_ms(r['ms_per_step'])} ({r['peak_bytes'] / 2**30:.1f})" if isinstance(r, dict)
                       else str(r)[:40])
        rows.append(row)
    table = common.markdown_table(["calculator"] + [f"{n:,}" for n in sizes], rows)
    title = f"ASE MD (velocity Verlet, neighbour list included), {args.dtype}, {env.get('device')}; ms/step (peak GiB)"
    common.append_markdown(os.path.join(args.out, "tables.md"), title, table)
    print(title)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
