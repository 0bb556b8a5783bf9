"""Several `run 0` evaluations in one LAMMPS process (model loading and process start-up are
most of a small test's time): each case names a data file, a pair_style line and optionally a
processor grid and boundary; results are parsed back per case. Also the ASE-calculator
reference for md_accel model files."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NKTV2P_METAL = 1.6021765e6

CASE = """
clear
units metal
atom_style atomic
atom_modify map yes
boundary {boundary}
processors {processors}
read_data {data}
mass * 60.0
pair_style md_accel {style}
pair_coeff * * {model} {symbols}
compute vir all pressure NULL virial
thermo_style custom step pe vol c_vir[*]
run 0
write_dump all custom forces_{tag}.dump id fx fy fz modify sort id format float %.17g
print "RESULT {tag} $(pe:%.17g) $(vol:%.17g) {virial}"
"""
VIRIAL = " ".join(f"$(c_vir[{k}]:%.17g)" for k in range(1, 7))
GHOST_CUTOFF = re.compile(r"ghost atom cutoff = ([0-9.]+)")
REPORT = re.compile(r"md_accel: comm (none|layer|shell) on (\d+) ranks, per rank \(min / average / max\): "
                    r"owned atoms (\d+) / ")
HOST_THREADS = re.compile(r"graph from the list on (\d+) host thread")


@dataclass
class Case:
    tag: str
    data: Path
    model: Path
    symbols: str
    style: str = ""              # pair_style md_accel arguments, e.g. "comm shell"
    processors: str = "* * *"
    boundary: str = "p p p"


def run_cases(run_lmp, workdir: Path, cases, nprocs: int, env: dict | None = None) -> dict:
    """tag -> energy, virial (Voigt xx yy zz xy xz yz, eV), forces (by atom id), mode (the comm
    mode the log reports), min_owned (fewest atoms on a rank), ghost_cutoff (A), host_threads (that
    build the graph), captures (CUDA graph captures the case logged), warnings (the pair style's
    WARNING lines). env: added to the lmp process' environment."""
    script = "".join(CASE.format(tag=c.tag, data=c.data, model=c.model, symbols=c.symbols, style=c.style,
                                 processors=c.processors, boundary=c.boundary,
                                 virial=VIRIAL) for c in cases)
    log = run_lmp(script, nprocs=nprocs, env=env).stdout
    reports = REPORT.findall(log)
    threads = HOST_THREADS.findall(log)
    ghost_cutoffs = GHOST_CUTOFF.findall(log)
    assert len(reports) == len(cases) == len(ghost_cutoffs) == len(threads), log[-3000:]
    out = {}
    lines = log.splitlines()
    first = 0
    for case, (mode, ranks, min_owned), ghost, nthreads in zip(cases, reports, ghost_cutoffs, threads):
        last = next(i for i, l in enumerate(lines) if l.startswith(f"RESULT {case.tag} "))
        line, own = lines[last], lines[first:last]   # the case's own output: since the previous RESULT
        first = last + 1
        pe, vol, *press = map(float, line.split()[2:])
        forces = np.loadtxt(workdir / f"forces_{case.tag}.dump", skiprows=9)
        assert int(ranks) == nprocs
        out[case.tag] = {"energy": pe, "virial": np.array(press) * vol / NKTV2P_METAL,
                         "forces": forces[:, 1:], "mode": mode, "min_owned": int(min_owned),
                         "ghost_cutoff": float(ghost), "host_threads": int(nthreads),
                         "captures": sum("md_accel: CUDA graph capture" in l for l in own),
                         "warnings": [l for l in own if "WARNING" in l and "md_accel" in l]}
    return out


def ase_reference(model: Path, atoms) -> dict:
    """md_accel's ASE calculator (CPU, the model's dtype): energy, forces and, for periodic
    cells, the virial W = -stress * volume in LAMMPS' Voigt order."""
    from md_accel.calculator import Calculator

    atoms = atoms.copy()
    atoms.calc = Calculator(str(model), device="cpu")
    ref = {"energy": atoms.get_potential_energy(), "forces": atoms.get_forces()}
    if atoms.pbc.all():
        s = atoms.get_stress(voigt=True)   # xx yy zz yz xz xy
        ref["virial"] = -s[[0, 1, 2, 5, 4, 3]] * atoms.get_volume()
    return ref


def max_diffs(got: dict, want: dict) -> dict:
    """Largest absolute differences of energy, forces and (when both have it) virial."""
    d = {"energy": abs(got["energy"] - want["energy"]),
         "forces": float(np.abs(got["forces"] - want["forces"]).max())}
    if "virial" in got and "virial" in want:
        d["virial"] = float(np.abs(got["virial"] - want["virial"]).max())
    return d


def nve(skin: float, temperature: float, seed: int) -> str:
    """Input lines for NVE MD with a neighbour-list check every step, 1 fs, pe and etotal printed
    every 10 steps with all digits (``thermo`` reads them back)."""
    return f"""neighbor {skin} bin
neigh_modify every 1 delay 0 check yes
velocity all create {temperature} {seed} mom yes rot yes dist gaussian
timestep 0.001
fix nve all nve
thermo 10
thermo_style custom step pe etotal
thermo_modify format float %.15g
"""


def thermo(log: str) -> np.ndarray:
    """Rows (step, value, value) of a thermo output with two float columns (e.g. pe etotal)."""
    rows = re.findall(r"^\s+(\d+)\s+(-?[\d.]+(?:e[-+]\d+)?)\s+(-?[\d.]+(?:e[-+]\d+)?)\s*$", log, re.M)
    return np.array(rows, dtype=float)
