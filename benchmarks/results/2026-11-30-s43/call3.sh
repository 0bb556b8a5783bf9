#!/usr/bin/env bash
# Session 43, call 3 (after the staging call: .peers/tab into .gpu/site on the same warm machine): the kernel table
# with md_accel's deterministic default, the opt-in rows in grad_w (md_accel_gwrows) and cuEquivariance in e3nn's
# basis, GEN 30, all six workloads, three passes, float32 then float64.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_gen30.tar.xz
set -u
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD/.gpu/site TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/tab/wheels
source tools/gpu_call_env.sh 2> /dev/null
python -c "from mace.tools.cg import O3_e3nn; import cuequivariance_ops_torch; print('O3_e3nn and the ops import')" 2>&1 | tail -1
timeout $((590 - SECONDS)) python benchmarks/kernels.py --impls md_accel,md_accel_gwrows,cueq --repeats 10 \
  --graph random_sym:4000:312000 --out $R/table > $R/table.log 2>&1
echo "== table rc=$? (${SECONDS}s)"
grep -E "^\[kernels\] [a-z_0-9]+ float|dbwd |fwd_bwd |fwd " $R/table.log | head -120
(cd $OUT && tar czf results.tar.gz r)
