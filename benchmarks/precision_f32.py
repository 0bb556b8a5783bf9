"""float32 accuracy of a converted model against its float64 CPU evaluation, per switch setting.

For each setting (an environment for md_accel's float32 switches, e.g. ``MD_ACCEL_TF32X3=0``; each
runs in its own process since the switches are read once) the model runs in float32 on CUDA
(or on the CPU: setting ``cpu``) on a rattled fcc copper cell, and the script prints the error of
the total energy (absolute, relative to max(|E|, 1 eV) as the conversion contract measures it),
the mean and spread of the per-atom energy errors (a mean far from zero is a rounding bias, which
adds up over an energy sum), the largest force error, and the relative error of every node-wise
module output (forward hooks) so that the layer where the error grows shows.

    python benchmarks/precision_f32.py models/mace_cu/mace_cu.mdx \\
        --settings default MD_ACCEL_GEMM_CUBLAS=0 MD_ACCEL_TF32X3=0 cpu --json out.json
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _copper(n: int, seed: int):
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((n, n, n))
    atoms.rattle(0.05, seed=seed)
    return atoms


def _node_outputs(potential, n: int):
    """Forward hooks recording every module output with one row per atom, by module name."""
    seen = {}

    def hook(name):
        def record(_module, _args, out):
            if isinstance(out, torch.Tensor) and out.dim() >= 1 and out.shape[0] == n and name not in seen:
                seen[name] = out.detach().double().cpu()
        return record

    handles = [m.register_forward_hook(hook(name)) for name, m in potential.named_modules() if name]
    return seen, handles


def evaluate(potential, atoms, device: str):
    """Per-atom energies, forces and the node-wise module outputs of one evaluation."""
    from md_accel.model import energy_forces_virial
    from md_accel.neighbors import neighbor_list

    dtype = next(potential.parameters()).dtype
    pos = torch.tensor(atoms.positions, dtype=torch.float64, device=device)
    cell = torch.tensor(np.asarray(atoms.cell), dtype=torch.float64, device=device)
    edges = neighbor_list(pos, cell, atoms.pbc, potential.cutoff)
    species = torch.tensor([potential.elements.index(s) for s in atoms.get_chemical_symbols()], device=device)
    seen, handles = _node_outputs(potential, len(atoms))
    try:
        out = energy_forces_virial(potential, species, edges.vec.to(dtype), edges.src, edges.dst)
    finally:
        for h in handles:
            h.remove()
    return out["node_energies"].detach().double().cpu(), out["forces"].detach().double().cpu(), seen


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / max(float(b.norm()), 1e-300))


def one_setting(path: str, setting: str, n: int, seed: int) -> dict:
    from md_accel import io

    atoms = _copper(n, seed)
    ref = io.load(path, dtype=torch.float64)
    e_ref, f_ref, out_ref = evaluate(ref, atoms, "cpu")
    device = "cpu" if setting == "cpu" else "cuda"
    model = io.load(path, dtype=torch.float32).to(device)
    e32, f32, out32 = evaluate(model, atoms, device)
    de = e32 - e_ref
    total = float(e_ref.sum())
    return {
        "setting": setting, "atoms": len(atoms), "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "energy": total, "energy_err": float(de.sum()), "energy_rel": abs(float(de.sum())) / max(abs(total), 1.0),
        "atom_err_mean": float(de.mean()), "atom_err_std": float(de.std()),
        "force_err_max": float((f32 - f_ref).abs().max()), "force_max": float(f_ref.abs().max()),
        "modules": {k: _rel(out32[k], v) for k, v in out_ref.items() if k in out32},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="an md_accel model file (.mdx)")
    p.add_argument("--settings", nargs="+", default=["default", "cpu"],
                   help="'default', 'cpu', or VAR=VALUE[,VAR=VALUE] environment settings")
    p.add_argument("--cell", type=int, default=3, help="n for an n x n x n cubic fcc cell (4 n^3 atoms)")
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--json")
    p.add_argument("--one", help=argparse.SUPPRESS)  # child process: one setting, JSON on stdout
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(one_setting(args.model, args.one, args.cell, args.seed)))
        return
    rows = []
    for setting in args.settings:
        env = dict(os.environ)
        if setting not in ("default", "cpu"):
            env.update(kv.split("=", 1) for kv in setting.split(","))
        cmd = [sys.executable, os.path.abspath(__file__), args.model, "--one", setting,
               "--cell", str(args.cell), "--seed", str(args.seed)]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"{setting}: failed\n{res.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{setting:<36} E {r['energy']:+.6f} eV  dE {r['energy_err']:+.2e} (rel {r['energy_rel']:.1e})  "
              f"per atom {r['atom_err_mean']:+.1e} +- {r['atom_err_std']:.1e}  max|dF| {r['force_err_max']:.1e}",
              flush=True)
    if rows:
        names = list(rows[0]["modules"])
        print(f"\nrelative error of node-wise module outputs (|out32 - out64| / |out64|)\n{'module':<44}"
              + "".join(f"{r['setting'][:14]:>16}" for r in rows))
        for name in names:
            print(f"{name:<44}" + "".join(f"{r['modules'].get(name, float('nan')):>16.2e}" for r in rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
