#!/usr/bin/env bash
# Session 43, call 7: host synchronisations in md_accel's passes (the device idled 0.12 ms per double backward in
# pass_breakdown's process and 0.68 ms in the table's, call 6): torch.cuda.set_sync_debug_mode("warn") around
# kernels.py's passes of mace_mp0_medium (float64, then float32), md_accel and md_accel_gwrows, each warning's stack.
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_proc30.tar.xz .peers/full/wheels
set -u
cd "$(dirname "$0")/../../.."
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 WHEELS=.peers/full/wheels
source tools/gpu_call_env.sh 2> /dev/null
timeout 200 python - > $R/syncs.log 2>&1 <<'PY'
import sys, traceback, warnings
sys.path.insert(0, "benchmarks")
import torch
from kernels import GraphT, inputs, make_graph, make_impl, run_pass
from workloads import WORKLOADS

dev = torch.device("cuda")
g = GraphT(make_graph("random_sym:4000:312000"), dev)
wl = WORKLOADS["mace_mp0_medium"]
def show(message, category, filename, lineno, file=None, line=None):
    print(f"WARNING {message}", flush=True)
    print("".join(traceback.format_stack(limit=14)[:-1]), flush=True)
warnings.showwarning = show
for dtype in (torch.float64, torch.float32):
    for name in ("md_accel", "md_accel_gwrows"):
        impl = make_impl(name, wl, g, dtype, dev)
        with impl.settings():
            x, y, w = inputs(wl, g, dtype, dev)
            go = torch.randn(g.num_nodes, wl.dims[2], dtype=dtype, device=dev)
            prepared = impl.prepare(x, y, w)
            for kind in ("fwd", "fwd_bwd", "dbwd"):
                fn = run_pass(impl, kind, prepared, go)
                for _ in range(2):  # the first call prepares (libraries, graphs); the second is the steady state
                    fn()
                torch.cuda.synchronize()
                print(f"=== {name} {dtype} {kind}: steady-state call", flush=True)
                torch.cuda.set_sync_debug_mode("warn")
                fn()
                torch.cuda.set_sync_debug_mode("default")
                torch.cuda.synchronize()
        del impl
PY
echo "rc=$?"
grep -E "^===|^WARNING" $R/syncs.log | uniq -c | head -40
(cd $OUT && tar czf results.tar.gz r)
