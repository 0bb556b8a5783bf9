# Sourced by this folder's call scripts after tools/gpu_call_env.sh: run NAME GEN LIMIT kernels.py-arguments... runs
# benchmarks/kernels.py on the graph random_sym:4000:312000 with GEN 47's kernels (.gpu/build) or, GEN gen46, GEN 46's
# (.gpu/old), or another build folder's (.gpu/GEN), then prints the clock log's join and the correctness checks.
run() {
  local name=$1 gen=$2 limit=$3; shift 3
  local dir=$PWD/.gpu/build
  [[ $gen == gen46 ]] && dir=$PWD/.gpu/old
  [[ $gen != gen4[67] ]] && dir=$PWD/.gpu/$gen
  MD_ACCEL_BUILD_DIR=$dir timeout "$limit" python benchmarks/kernels.py "$@" --graph random_sym:4000:312000 \
    --repeats 10 --reference-cache "$PWD/.gpu/refcache" --out "$R/$name" > "$R/$name.log" 2>&1
  echo "== $name (rc=$?, ${SECONDS}s)"
  python benchmarks/smi_join.py "$R/$name/kernels.json" "$R/smi.csv" > "$R/${name}_smi.txt" 2>&1
  cat "$R/${name}_smi.txt"; grep -h "check:" "$R/$name.log"
}
