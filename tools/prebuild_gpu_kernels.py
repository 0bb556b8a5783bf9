"""Compile here (nvcc, no GPU) the generated kernels the GPU tests and benchmarks would otherwise
compile on the GPU machine at first use, and pack them for `run`'s carry: the largest (MACE's
correlation-3 symmetric contractions) take minutes of nvcc each, device time better spent on runs.

    .venv-mace/bin/python tools/prebuild_gpu_kernels.py sc-tests mace   # mace-torch needed
    .venv/bin/python tools/prebuild_gpu_kernels.py sevenn tp-tests      # sevenn needed
    .venv/bin/python tools/prebuild_gpu_kernels.py tp-gpu-tests mace-cu # tests/gpu's tp_conv configs
    .venv/bin/python tools/prebuild_gpu_kernels.py fused-tests          # GPU_FUSED=1's fused-radial kernels
    .venv/bin/python tools/prebuild_gpu_kernels.py tp-tests --tuning default --tuning dbwd_min_warps32=12
    .venv/bin/python tools/prebuild_gpu_kernels.py tp-tests --workloads mace_large --tuning w_evict=0 --name we

Builds into .gpu/build (tp_specs/, sc_specs/) and packs the libraries of this invocation (not the others
.gpu/build holds; ``--pack all``: every library there) into .gpu/gpu_prebuilt.tar.xz (``--name N``:
.gpu/gpu_N.tar.xz, so that one invocation's pack does not replace another's). tools/gpu_check.sh and
tools/gpu_call_env.sh unpack every .gpu/gpu_*.tar.xz carried (carry ".gpu/gpu_prebuilt.tar.xz"). ``--tuning``
(repeatable; "default": none) builds the tensor-product kernels once per MD_ACCEL_TP_TUNING variant (a tuning
sweep's variants, tools/tuning_sweep.sh); without it, the environment's.
"""
import argparse
import importlib.util
import os
import subprocess
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(REPO, ".gpu", "build")
os.environ.setdefault("MD_ACCEL_BUILD_DIR", BUILD)
sys.path.insert(0, os.path.join(REPO, "tests"))

from md_accel.ops import _codegen  # noqa: E402
from md_accel.ops.prebuild import prebuild  # noqa: E402


def sc_tests():
    """The symmetric contractions of tests/gpu/test_symmetric_contraction_cuda.py."""
    from sc_testing import CONFIGS

    out = []
    for name, make in CONFIGS.items():
        try:
            out.append(make())
        except ImportError as e:
            print(f"skipping {name}: {e}")
    return out


def _mace_shape(size: str, dtype: torch.dtype):
    from md_accel.convert.mace import convert_mace

    spec = importlib.util.spec_from_file_location("build_mace_shape",
                                                  os.path.join(REPO, "models", "build_mace_mp0_medium_shape.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        source = mod.build(size, seed=0)
    finally:
        torch.set_default_dtype(default)
    return convert_mace(source.to(dtype), dtype=dtype)


def mace():
    """mace_small (tests/gpu/test_model_cuda.py, float64) and the MP-0-medium shape (benchmarks,
    float32 and float64: the contraction's baked term values follow the model's dtype)."""
    return [_mace_shape("small", torch.float64), _mace_shape("medium", torch.float32),
            _mace_shape("medium", torch.float64)]


def mace_cu():
    """The shipped trained copper model (tests/gpu/test_model_cuda.py, benchmarks/precision_f32.py),
    float32 and float64."""
    from md_accel import io

    return [io.load(os.path.join(REPO, "models", "mace_cu", "mace_cu.mdx"), dtype=dtype)
            for dtype in (torch.float32, torch.float64)]


def sevenn():
    """The sevenn wheel's SevenNet-l3i5 and SevenNet-0, float32 and float64 (benchmarks/model_step.py)."""
    from md_accel.convert.sevenn import convert_sevenn

    return [convert_sevenn(name, dtype=dtype) for name in ("sevennet-l3i5", "sevennet-0")
            for dtype in (torch.float32, torch.float64)]


def tp_tests(names=None):
    """The tensor-product convolutions of benchmarks/workloads.py (benchmarks/kernels.py runs all of them,
    tests/gpu/test_tp_conv_fused_cuda.py some); ``names``: those workloads alone."""
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    from workloads import WORKLOADS

    from md_accel.ops import TensorProductConv

    unknown = set(names or ()) - set(WORKLOADS)
    if unknown:
        sys.exit(f"--workloads: unknown {sorted(unknown)} (benchmarks/workloads.py has {', '.join(WORKLOADS)})")
    return [TensorProductConv(w.irreps_in1, w.irreps_in2, w.irreps_out, w.instructions)
            for name, w in WORKLOADS.items() if not names or name in names]


def tp_gpu_tests():
    """The tensor-product problems of tests/gpu/test_tp_conv_cuda.py (tests/tp_testing.py)."""
    from tp_testing import CONFIGS

    from md_accel.ops import TensorProductConv

    problems = [make() for make in CONFIGS.values()]
    return [TensorProductConv(p.irreps_in1, p.irreps_in2, p.irreps_out, p.instructions, p.irrep_normalization,
                              p.path_normalization) for p in problems]


def build_fused_tests(arch: str, workers: int) -> list:
    """The fused-radial kernels of tests/gpu/test_tp_conv_fused_cuda.py (tests/fused_testing.py), which
    `GPU_FUSED=1 tools/gpu_check.sh` would otherwise compile on the GPU machine."""
    from concurrent.futures import ThreadPoolExecutor

    from fused_testing import CONFIGS

    from md_accel.ops import _codegen_fused

    def build(name):
        make, hidden = CONFIGS[name]
        return name, _codegen_fused.build_fused(_codegen.plan_structure(make().lower()), hidden, arch)

    paths = []
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        for name, path in ex.map(build, CONFIGS):
            print(f"  fused {name}: {path}")
            paths.append(path)
    return paths


def main():
    makers = {"sc-tests": sc_tests, "tp-tests": tp_tests, "tp-gpu-tests": tp_gpu_tests, "mace": mace,
              "mace-cu": mace_cu, "sevenn": sevenn}
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="+", choices=[*makers, "fused-tests"])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--tuning", action="append", metavar="VARIANT",
                    help='an MD_ACCEL_TP_TUNING value ("default": none) to build the kernels under; repeatable')
    ap.add_argument("--pack", choices=("these", "all"), default="these",
                    help="pack this invocation's libraries (default) or every library in .gpu/build")
    ap.add_argument("--name", default="prebuilt", help="the pack's name: .gpu/gpu_NAME.tar.xz")
    ap.add_argument("--workloads", help="tp-tests: these workloads of benchmarks/workloads.py alone (a,b,...)")
    args = ap.parse_args()
    if args.workloads:
        makers["tp-tests"] = lambda: tp_tests(args.workloads.split(","))
    modules = [m for what in args.what if what in makers for m in makers[what]()]
    paths = []
    for variant in args.tuning or [os.environ.get(_codegen.TUNING_ENV, "")]:
        os.environ[_codegen.TUNING_ENV] = "" if variant == "default" else variant
        _codegen.tuning()  # a bad variant fails here, before any build
        if modules:
            paths += prebuild(modules, arch=args.arch, workers=args.jobs)
        if "fused-tests" in args.what:
            paths += build_fused_tests(args.arch, args.jobs)
    gpu = os.path.join(REPO, ".gpu")
    if args.pack == "all":  # the finished libraries only (no temporary build directories of interrupted runs)
        dirs = [d for d in ("build/tp_specs", "build/sc_specs") if os.path.isdir(os.path.join(gpu, d))]
        paths = [os.path.join(gpu, d, f) for d in dirs for f in os.listdir(os.path.join(gpu, d)) if f.endswith(".so")]
    files = sorted({os.path.relpath(p, gpu) for p in paths})
    outside = [f for f in files if f.startswith("..")]
    if outside:
        sys.exit(f"libraries outside .gpu (MD_ACCEL_BUILD_DIR?), not packed: {outside[:3]}")
    pack = f"gpu_{args.name}.tar.xz"
    subprocess.run(["tar", "-I", "xz -T0", "-cf", pack, *files], cwd=gpu, check=True)
    size = os.path.getsize(os.path.join(gpu, pack)) / 2 ** 20
    print(f"packed {len(files)} libraries into .gpu/{pack} ({size:.1f} MiB)")


if __name__ == "__main__":
    main()
