#!/usr/bin/env bash
# A tuning sweep on the device, md_accel alone: benchmarks/kernels.py (or, with SWEEP_SCRIPT=model_step,
# benchmarks/model_step.py: the MD step) once per MD_ACCEL_TP_TUNING variant, the variants in the order given (repeat
# them for a second run in turn), all within LIMIT_S seconds from its start, each run its own process (the variant's
# kernels are built or loaded at its first use).
# Usage (from a call script that sourced tools/gpu_call_env.sh, so $R exists):
#   tools/tuning_sweep.sh $((560 - SECONDS)) "default fwd_cpl=2 default fwd_cpl=2" --passes fwd --workloads nequip_l3
#   SWEEP_SCRIPT=model_step tools/tuning_sweep.sh 500 "default w_evict=0 default w_evict=0" \
#     --backends md_accel:models/mace_cu/mace_cu.mdx+graph --sizes 4000,32000
# "default" is the defaults. Each run writes $R/<variant>.<second>.log and its results folder, and prints one line
# per run: the variant, its exit status and md_accel's median per workload, dtype and pass (kernels.py; e3nn's check
# results are kept across runs, --reference-cache .gpu/refcache) or its table row per backend, ms (peak GiB) per
# size (model_step.py). A run gets at most SWEEP_RUN_S seconds (default 120). kernels.py times each CUDA cell over at
# least 1.5 s (--min-seconds): 36 cells take ~60 s of that; pass --min-seconds 0 where a short A/B window will do.
# Where $R/smi.csv is being written (SMI_LOG before sourcing tools/gpu_call_env.sh), each run also gets
# $R/<tag>_smi.txt and prints it: every timed record's SM clock, power and energy per call (benchmarks/smi_join.py),
# which decide a variant's time where the GPU runs at its power cap.
set -u
limit=$1 variants=$2
shift 2
script=${SWEEP_SCRIPT:-kernels}
for v in $variants; do
  left=$((limit - SECONDS))
  if ((left < 40)); then echo "skipped $v: ${left}s left"; continue; fi
  t=$v; [[ $v == default ]] && t=""
  base=${v//[=,]/}.$SECONDS k=1
  tag=$base
  while [[ -e $R/$tag.log ]]; do tag=$base.$((k++)); done  # a second sweep in the same call restarts SECONDS
  run=${SWEEP_RUN_S:-120}
  if [[ $script == model_step ]]; then
    cmd=(python benchmarks/model_step.py "$@" --out "$R/$tag")
  else
    cmd=(python benchmarks/kernels.py --impls md_accel "$@" --reference-cache "$PWD/.gpu/refcache" --out "$R/$tag")
  fi
  MD_ACCEL_TP_TUNING=$t timeout $((left < run ? left : run)) "${cmd[@]}" > "$R/$tag.log" 2>&1
  echo "== $v (rc=$?, ${SECONDS}s)"
  if [[ $script == model_step ]]; then
    grep "^| md_accel" "$R/$tag.log"
  else
    awk '/^\[kernels\] [a-z_0-9]+ float/ {c=$2" "$3} / md_accel +(fwd|fwd_bwd|dbwd) / {printf "%s %s %s | ", c, $2, $3} END {print ""}' \
      "$R/$tag.log"
  fi
  # with the clock log running (SMI_LOG, tools/gpu_call_env.sh): each timed record's clocks and energy per call
  json=$R/$tag/kernels.json
  [[ $script == model_step ]] && json=$(ls "$R/$tag"/*.json 2>/dev/null | head -n 1)
  if [[ -s $R/smi.csv && -f $json ]]; then
    python benchmarks/smi_join.py "$json" "$R/smi.csv" > "$R/${tag}_smi.txt" 2>&1
    cat "$R/${tag}_smi.txt"
  fi
done
