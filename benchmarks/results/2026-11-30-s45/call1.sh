#!/usr/bin/env bash
# Session 45, call 1 (after staging on the same warm machine: carry .peers/tab .gpu/gpu_lib.tar.xz and run
#   PEERS_SITE=$PWD/.gpu/site source .peers/tab/setup-on-gpu.sh
# ): session 44's plan item 1. The deterministic default (grad_x rows in a workspace), the rows in grad_w
# (md_accel_gwrows), the atomic grad_x (md_accel_atomic) and cuEquivariance, forward + backward and double backward,
# every cell timed over at least 1.5 s (settled clocks), the clocks and power logged every 100 ms for smi_join's
# energy per call. The forward is the same kernel in the three md_accel modes, so it is left out.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen31.tar.xz (tp-tests and tp-gpu-tests, GEN 31 defaults)
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels SMI_LOG=100
source tools/gpu_call_env.sh 2> /dev/null
timeout $((585 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_gwrows,md_accel_atomic,cueq \
  --passes fwd_bwd,dbwd --repeats 10 --min-seconds 1.5 --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
smi_stop
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd " $R/table.log | cut -c1-90 | head -120
python benchmarks/smi_join.py $R/table/kernels.json $R/smi.csv 2>&1 | tail -60
(cd $OUT && tar czf results.tar.gz r)
