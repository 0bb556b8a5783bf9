# Sourced by the GPU scripts (tools/gpu_check.sh, tools/gpu_lammps.sh), from the repository root:
# unpacks the carried build caches (.gpu/gpu_*.tar.xz: the op library, generated kernels) and, when
# the op library there was built from this very csrc/ and torch, exports MD_ACCEL_OPS_LIBRARY.
# Needs PYTHON (default python).
for cache in .gpu/gpu_*.tar.xz; do
  [[ -f $cache ]] && tar xJf "$cache" -C .gpu && echo "unpacked $cache"
done
TAG=$("${PYTHON:-python}" -c "import runpy; print(runpy.run_path('csrc/build.py')['jit_tag']())")  # no md_accel import: that builds
if [[ -f .gpu/prebuilt/$TAG.so ]]; then
  export MD_ACCEL_OPS_LIBRARY=$PWD/.gpu/prebuilt/$TAG.so
fi
