# Sourced by this folder's call scripts after tools/gpu_call_env.sh: run NAME BUILD LIMIT kernels.py-arguments... runs
# benchmarks/kernels.py on the graph random_sym:4000:312000 with the generated kernels of .gpu/build where BUILD is
# the tree's own generation (TREE_GEN, default gen47), else of .gpu/BUILD (gen46: .gpu/old), then prints the clock
# log's join and the correctness checks.
run() {
  local name=$1 gen=$2 limit=$3; shift 3
  local dir=$PWD/.gpu/$gen
  [[ $gen == "${TREE_GEN:-gen47}" ]] && dir=$PWD/.gpu/build
  [[ $gen == gen46 ]] && dir=$PWD/.gpu/old
  MD_ACCEL_BUILD_DIR=$dir timeout "$limit" python benchmarks/kernels.py "$@" --graph random_sym:4000:312000 \
    --repeats 10 --reference-cache "$PWD/.gpu/refcache" --out "$R/$name" > "$R/$name.log" 2>&1
  echo "== $name (rc=$?, ${SECONDS}s)"
  python benchmarks/smi_join.py "$R/$name/kernels.json" "$R/smi.csv" > "$R/${name}_smi.txt" 2>&1
  cat "$R/${name}_smi.txt"; grep -h "check:" "$R/$name.log"
}
