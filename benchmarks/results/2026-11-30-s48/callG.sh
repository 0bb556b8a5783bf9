#!/usr/bin/env bash
# Session 48, call G: call F again after the host-side Verlet reuse check went to numpy (call F: torch's CPU pow and sum in
# needs_rebuild, 2.2 ms per step at 32,000 atoms): benchmarks/ase_md.py, the copper MACE at 4,000 and 32,000
# atoms, float32, the default Calculator and cuda_graph=True / False, the timed steps under cProfile (15 functions).
# (Found in call H: ase_md.py ran the .mdx files in their own dtype, float64, not float32; README.md.)
# Carry: .gpu/gpu_lib.tar.xz .gpu/gpu_steps32.tar.xz .peers/full/wheels
# The same commands as call F's script (call G's own printed other function names of the profile).
exec bash "$(dirname "$0")/callF.sh"
