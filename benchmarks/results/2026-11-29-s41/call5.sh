#!/usr/bin/env bash
# Session 41, call 5 (stage, then this script on the same warm machine): the kernel table with cuEquivariance in e3nn's basis (mace's O3_e3nn, as
# mace-torch runs it), all six workloads, three passes, float32 then float64, GEN 29 (the register-cap rule).
# .peers/tab: the lean bundle's cuEquivariance ops plus the wheels cuEquivariance and `from mace.tools.cg import
# O3_e3nn` need (no ase or vesin: kernels.py on a random graph needs neither).
# The stage (the carry limit keeps the kernels out of it): carry .peers/tab .gpu/gpu_lib.tar.xz and run
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
# Then this script, carry .gpu/gpu_tab.tar.xz (tp-tests, default tuning).
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
python -c "from mace.tools.cg import O3_e3nn; import cuequivariance_ops_torch; print('O3_e3nn and the ops import')" 2>&1 | tail -1
timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel,cueq --repeats 10 \
  --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"; grep -E "^\[kernels\]|check|  (fwd|fwd_bwd|dbwd) " $R/table.log | grep -v "^\[kernels\] [a-z]" | head -8
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd |fwd " $R/table.log | head -80
(cd $OUT && tar czf results.tar.gz r)
