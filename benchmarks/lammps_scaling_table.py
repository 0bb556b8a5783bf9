"""The table of tools/gpu_lammps_scaling.sh from its LAMMPS logs: OUTDIR/log_*.txt (one per mpirun, cases
marked by `print "CASE name gpus=N"`) and gpu_mem_*.csv -> OUTDIR/scaling.json and a printed table.

    python benchmarks/lammps_scaling_table.py OUTDIR MODEL WARMUP STEPS [INPUTS_DIR]

On a machine without nvidia-smi, $GPU_NAME and $GPU_COUNT name the GPUs the logs came from.
INPUTS_DIR (the script's .gpu/scaling): the inputs run, in.<tag>; cases planned there and missing from the
log are listed as not reached.
"""
import glob
import json
import os
import re
import subprocess
import sys

out, model, warmup, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
inputs = sys.argv[5] if len(sys.argv) > 5 else None
report = re.compile(r"md_accel: comm (\w+) on (\d+) ranks.*?owned atoms [\d.]+ / ([\d.]+) / ([\d.]+); "
                    r"\(average / max\): ghost atoms ([\d.]+) / ([\d.]+), graph nodes ([\d.]+) / ([\d.]+)")
loop = re.compile(r"Loop time of ([\d.eE+-]+) on (\d+) procs for (\d+) steps with (\d+) atoms")
pair = re.compile(r"^Pair\s*\|.*\|\s*([\d.]+)\s*$", re.M)
rows = []
for path in sorted(glob.glob(os.path.join(out, "log_*.txt"))):
    tag = os.path.basename(path)[4:-4]
    mem = {}
    try:
        for line in open(os.path.join(out, f"gpu_mem_{tag}.csv")):
            i, used = (int(v) for v in line.split(","))
            mem[i] = max(mem.get(i, 0), used)
    except (OSError, ValueError):
        pass
    text = open(path, errors="replace").read()
    blocks = re.split(r"^CASE ", text, flags=re.M)[1:]
    for block in blocks:
        name, gpus = re.match(r"(\S+) gpus=(\d+)", block).groups()
        row = {"case": name, "gpus": int(gpus), "log": os.path.basename(path),
               "peak_gpu_mem_mib_process": max(mem.values()) if mem else None}
        reps, loops = report.findall(block), loop.findall(block)
        if reps:
            r = reps[-1]
            row.update(mode=r[0], atoms_per_rank_avg=float(r[2]), ghosts_per_rank_avg=float(r[4]),
                       ghosts_per_rank_max=float(r[5]), graph_nodes_per_rank_max=float(r[7]))
        timed = [l for l in loops if int(l[2]) == steps]
        if timed:
            t, procs, n, atoms = float(timed[-1][0]), int(timed[-1][1]), int(timed[-1][2]), int(timed[-1][3])
            row.update(status="ok", atoms=atoms, ms_per_step=1e3 * t / n, atom_steps_per_s=atoms * n / t)
            shares = pair.findall(block)
            if shares:
                row["pair_share_pct"] = float(shares[-1])
        else:
            err = re.findall(r"(out of memory|ERROR[^\n]*|Terminated|killed)", block, re.I)
            row["status"] = "failed: " + (err[0][:160] if err else "no timing (timeout or crash)")
        rows.append(row)
    # cases planned in this run's input that the process never reached
    planned_in = os.path.join(inputs, "in." + tag) if inputs else None
    planned = (re.findall(r'^print "CASE (\S+) gpus=(\d+)"', open(planned_in).read(), re.M)
               if planned_in and os.path.exists(planned_in) else [])
    reached = {(r["case"], r["gpus"]) for r in rows}
    rows += [{"case": c, "gpus": int(g), "log": os.path.basename(path),
              "status": "failed: not reached (the run ended before)"}
             for c, g in planned if (c, int(g)) not in reached]


def one_gpu(case):
    return next((r for r in rows if r["case"] == case and r["gpus"] == 1 and r["status"] == "ok"), None)


for r in rows:
    ref = one_gpu("weak-layer" if r["case"] == "big-layer" else r["case"])
    if r["status"] == "ok" and ref:
        r["efficiency"] = r["atom_steps_per_s"] / (r["gpus"] * ref["atom_steps_per_s"])
order = ["weak-none", "weak-layer", "weak-host", "weak-shell", "strong-layer", "big-layer"]
rows.sort(key=lambda r: (order.index(r["case"]) if r["case"] in order else len(order), r.get("gpus", 0)))

try:  # the machine the runs were on; elsewhere (a table remade from copied logs) $GPU_NAME, $GPU_COUNT
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.splitlines()
except FileNotFoundError:
    gpu = [os.environ["GPU_NAME"]] * int(os.environ.get("GPU_COUNT", "1")) if "GPU_NAME" in os.environ else []
meta = {"model": model, "gpu": gpu[0] if gpu else None, "gpus_on_machine": len(gpu), "warmup": warmup,
        "steps": steps, "efficiency": "atom-steps/s per GPU relative to the 1-GPU run of the same case "
        "(big: relative to weak-layer on 1 GPU)"}
json.dump({"meta": meta, "rows": rows}, open(os.path.join(out, "scaling.json"), "w"), indent=2)

head = f"{'case':<13} {'GPUs':>4} {'atoms':>10} {'ghosts/rank':>11} {'nodes/rank':>10} {'ms/step':>9} " \
       f"{'katom-st/s':>10} {'eff':>5} {'pair%':>5} {'GPU MiB':>8}  status"
print(head)
print("-" * len(head))
for r in rows:
    ok = r.get("status") == "ok"
    f = lambda key, fmt: format(r[key], fmt) if r.get(key) is not None else "-"
    print(f"{r['case']:<13} {r.get('gpus', '-'):>4} {f('atoms', ',d'):>10} {f('ghosts_per_rank_avg', ',.0f'):>11} "
          f"{f('graph_nodes_per_rank_max', ',.0f'):>10} {f('ms_per_step', '.1f'):>9} "
          f"{(format(r['atom_steps_per_s'] / 1e3, ',.1f') if ok else '-'):>10} {f('efficiency', '.2f'):>5} "
          f"{f('pair_share_pct', '.1f'):>5} {f('peak_gpu_mem_mib_process', ',d'):>8}  {r['status']}")
print(f"(ghosts/rank: average LAMMPS ghost atoms; nodes/rank: most graph nodes (owned + ghosts the model "
      f"sees) on a rank; GPU MiB: peak nvidia-smi memory.used of any GPU during the mpirun that ran "
      f"the case; eff: {meta['efficiency']})")
for r in rows:
    s = next((x for x in rows if x["case"] == "weak-shell" and x.get("gpus") == r.get("gpus")), None)
    if r["case"] == "weak-layer" and r["status"] == "ok" and s and s["status"] == "ok":
        print(f"weak, {r['gpus']} GPUs: comm layer {s['ms_per_step'] / r['ms_per_step']:.2f}x faster than comm shell")
print(f"wrote {os.path.join(out, 'scaling.json')}")
