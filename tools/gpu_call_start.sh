# Sourced first by a device call's script, from the repository root (after `set -u`): builds the op library unless
# .gpu/gpu_lib.tar.xz is carried (tools/gpu_check.sh returns it as $OUT/gpu_lib.tar.xz for the calls after), puts the
# peers of the carried .peers/tab (tools/peers_tab.sh; ase and vesin wheels in its wheels/) on PYTHONPATH and
# sources tools/gpu_call_env.sh (R=$OUT/r, the GPU's clocks logged every SMI_LOG ms, default 200; smi_stop).
mkdir -p "$OUT/r"
if [[ ! -f .gpu/gpu_lib.tar.xz ]]; then
  GPU_TESTS=none timeout 300 bash tools/gpu_check.sh > "$OUT/r/build.log" 2>&1
  echo "op library: rc=$? (${SECONDS}s)"; tail -n 3 "$OUT/r/build.log"
fi
(PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh > /dev/null 2>&1)
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=${SMI_LOG:-200}
source tools/gpu_call_env.sh > /dev/null
