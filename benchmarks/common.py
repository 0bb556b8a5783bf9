"""Shared pieces of md_accel's benchmarks: test graphs, timing, peak memory, environment capture
and result writers (JSON, PNG, markdown).

Graph convention (docs/architecture.md): ``src`` = sender j, ``dst`` = receiver i,
``vec = pos[src] - pos[dst] + shift``; edges are sorted by receiver, then sender, so every
implementation sees the same edge order and md_accel's sorted-graph ops need no permutation.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

CU_LATTICE = 3.61  # Angstrom, fcc copper


@contextlib.contextmanager
def environ(settings: Dict[str, str]):
    """``os.environ`` updated with ``settings`` inside the block, restored after (md_accel reads
    its per-call switches, e.g. MD_ACCEL_GEMM_CUBLAS, from the environment)."""
    before = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- graphs -------------------------------------------------------------------------------------
def fcc_copper(n_atoms: int, a: float = CU_LATTICE, rattle: float = 0.05, seed: int = 0):
    """Cubic fcc supercell with ``n_atoms = 4 k^3`` atoms, each displaced by N(0, rattle^2) per
    component. Returns (positions [N,3] float64, cell [3,3] float64)."""
    k = round((n_atoms / 4) ** (1 / 3))
    if 4 * k**3 != n_atoms:
        raise ValueError(f"fcc cubic supercells have 4 k^3 atoms (864, 4000, 16384, 32000, ...); got {n_atoms}")
    basis = np.array([[0, 0, 0], [0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    cells = np.stack(np.meshgrid(np.arange(k), np.arange(k), np.arange(k), indexing="ij"), -1).reshape(-1, 1, 3)
    pos = ((cells + basis[None]) * a).reshape(-1, 3)
    pos = pos + np.random.default_rng(seed).normal(0.0, rattle, pos.shape)
    return pos, np.eye(3) * (k * a)


def _pairs(pos: np.ndarray, cell: np.ndarray, cutoff: float):
    """(i, j, S) for all ordered pairs |pos[j] - pos[i] + S cell| < cutoff (periodic)."""
    try:
        from vesin import NeighborList

        i, j, s = NeighborList(cutoff=cutoff, full_list=True).compute(pos, cell, True, "ijS")
    except ImportError:  # ase's cell list
        from ase.neighborlist import primitive_neighbor_list

        i, j, s = primitive_neighbor_list("ijS", [True] * 3, cell, pos, cutoff, self_interaction=False)
    return np.asarray(i, np.int64), np.asarray(j, np.int64), np.asarray(s, np.int64)


def periodic_graph(pos: np.ndarray, cell: np.ndarray, cutoff: float) -> Dict[str, np.ndarray]:
    """Full periodic neighbour list: src (sender j), dst (receiver i), vec, shift, unit_shift,
    sorted by (dst, src)."""
    i, j, s = _pairs(pos, cell, cutoff)
    order = np.lexsort((j, i))
    dst, src, s = i[order], j[order], s[order]
    shift = s.astype(np.float64) @ cell
    vec = pos[src] - pos[dst] + shift
    return {"src": src, "dst": dst, "vec": vec, "shift": shift, "unit_shift": s, "num_nodes": len(pos)}


def copper_graph(n_atoms: int, cutoff: float, seed: int = 0) -> Dict[str, np.ndarray]:
    pos, cell = fcc_copper(n_atoms, seed=seed)
    g = periodic_graph(pos, cell, cutoff)
    g.update(pos=pos, cell=cell, name=f"fcc Cu {n_atoms} atoms, r_cut {cutoff:g} A")
    return g


def random_graph(num_nodes: int, num_edges: int, seed: int = 0, symmetric: bool = False) -> Dict[str, np.ndarray]:
    """Uniform random directed edges (FlashTP-style kernel benchmark graph), unit random vectors,
    sorted by (dst, src). ``symmetric``: num_edges // 2 random edges and their reverses (vector negated),
    like a neighbour list's pairs; OpenEquivariance's deterministic backward is right only on such graphs
    (session 29)."""
    rng = np.random.default_rng(seed)
    half = num_edges // 2 if symmetric else num_edges
    src = rng.integers(0, num_nodes, half)
    dst = rng.integers(0, num_nodes, half)
    vec = rng.normal(size=(half, 3))
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    if symmetric:
        src, dst, vec = np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([vec, -vec])
    order = np.lexsort((src, dst))
    if symmetric:  # (the directed graph's vectors stay in draw order: session 29's runs used them so)
        vec = vec[order]
    return {"src": src[order], "dst": dst[order], "vec": vec, "num_nodes": num_nodes,
            "name": f"random{' symmetric' if symmetric else ''} {num_nodes} nodes, {len(src)} edges"}


def subgraph(g: Dict, max_node: int) -> Dict:
    """Edges among the first ``max_node`` nodes (a small graph for correctness checks)."""
    keep = (g["src"] < max_node) & (g["dst"] < max_node)
    return {"src": g["src"][keep], "dst": g["dst"][keep], "vec": g["vec"][keep], "num_nodes": max_node,
            "name": f"{g['name']}: subgraph of {max_node} nodes"}


# --- timing and memory --------------------------------------------------------------------------
def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _stats(ms: List[float]) -> Dict[str, float]:
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "mean_ms": statistics.fmean(ms),
            "repeats": len(ms)}


WARMUP_S = 0.2


def warm_up(fn: Callable[[], object], device, calls: int, seconds: float = WARMUP_S) -> None:
    """``calls`` calls of ``fn``, then on CUDA more until ``seconds`` have passed (at least one call, at
    most 1000 in all, so ``calls=0`` still warms up on CUDA and ``calls > 1000`` is cut to 1000): a
    GPU left idle by host-side setup (a peer's construction, a reference in float64) ran the first
    sub-millisecond kernels after it slowly, and a fixed handful of calls did not lift that (session 29,
    H100: a 0.34 ms forward timed at 0.81 ms, 10 repeats, right after e3nn's float64 reference)."""
    if torch.device(device).type != "cuda":
        seconds = 0.0
    t0 = time.perf_counter()
    for i in range(1000):
        if i >= calls and time.perf_counter() - t0 >= seconds:
            break
        fn()
        if i >= calls:
            sync(device)
    sync(device)


def local_stamp() -> str:
    """The local wall time as nvidia-smi's CSV log writes it (``YYYY/MM/DD HH:MM:SS.mmm``), so that records can be
    matched with such a log written on the same machine (benchmarks/smi_join.py)."""
    return datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


MAX_REPEATS = 10000
# The timing window the benchmarks give each CUDA cell by default (``--min-seconds``): the H200 holds its 700 W board
# cap by lowering the SM clock, and a 10-call window (0.1-0.4 s) caught md_accel's float64 double backward while the
# clock fell from 1980 to 1470 MHz, so its time varied by 10-18 % between processes (session 44, smi_join.py).
MIN_SECONDS_CUDA = 1.5


def min_seconds(value: Optional[float], device) -> float:
    """A ``--min-seconds`` option's value: as given, else MIN_SECONDS_CUDA on CUDA and 0 elsewhere."""
    if value is not None:
        return value
    return MIN_SECONDS_CUDA if torch.device(device).type == "cuda" else 0.0


def add_timing_args(ap, tag: str, unit: str) -> None:
    """The options every timing script shares: --device, --warmup, --repeats, --min-seconds (``min_seconds``), --budget,
    --out and --tag (default ``tag``); ``unit``: what one timed call is, for the help ("cell", "step")."""
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--min-seconds", type=float, default=None,
                    help=f"time each {unit} over at least this long (more calls than --repeats), so that a power-capped "
                         f"GPU's clock has settled (session 44, H200); default {MIN_SECONDS_CUDA} on CUDA "
                         "(common.MIN_SECONDS_CUDA), 0 elsewhere")
    ap.add_argument("--budget", type=float, default=0, help="seconds; work that does not fit is skipped")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default=tag)


def _timed(one: Callable[[], float], repeats: int, seconds: float, window: Optional[List[str]]) -> Dict[str, float]:
    """Statistics of ``one()`` (a call's milliseconds) over ``repeats`` calls, and more until ``seconds`` have passed
    (at most MAX_REPEATS); ``window`` gets the first call's start and the last one's end (``local_stamp``)."""
    if window is not None:
        window.append(local_stamp())
    ms, t0 = [], time.perf_counter()
    while len(ms) < repeats or (time.perf_counter() - t0 < seconds and len(ms) < MAX_REPEATS):
        ms.append(one())
    if window is not None:
        window.append(local_stamp())
    return _stats(ms)


def time_gpu(fn: Callable[[], object], device, warmup: int = 3, repeats: int = 20,
             window: Optional[List[str]] = None, min_seconds: float = 0.0) -> Dict[str, float]:
    """Per-call time of ``fn``: CUDA events around each call on CUDA (device time including
    launch gaps), perf_counter elsewhere; median/min/mean over ``repeats`` after ``warm_up``, or over more calls
    until ``min_seconds`` have passed (at most MAX_REPEATS): a window long enough for the GPU's power controller to
    settle (session 44, H200: a 10-call window of md_accel's float64 double backward ran while the clock fell from
    1980 to 1470 MHz at the 700 W cap). ``window``: a list that gets the timed calls' start and end (``local_stamp``),
    warm-up excluded."""
    cuda = torch.device(device).type == "cuda"

    def one() -> float:
        if not cuda:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    warm_up(fn, device, warmup)
    return _timed(one, repeats, min_seconds, window)


def time_wall(fn: Callable[[], object], device, warmup: int = 3, repeats: int = 20,
              min_seconds: float = 0.0, window: Optional[List[str]] = None) -> Dict[str, float]:
    """Wall time per call with a device synchronisation after each call (a whole MD step: host
    work, launches and syncs included), over ``repeats`` calls or more until ``min_seconds``; ``window`` as
    ``time_gpu``'s."""
    def one() -> float:
        t = time.perf_counter()
        fn()
        sync(device)
        return (time.perf_counter() - t) * 1e3

    warm_up(fn, device, warmup)
    return _timed(one, repeats, min_seconds, window)


def kernel_times(fn, calls: int) -> dict:
    """Device microseconds per call of each CUDA kernel ``fn`` launches, and its launches per call (torch.profiler;
    CUDA only)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total, count = defaultdict(float), defaultdict(int)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            total[ev.name] += ev.time_range.elapsed_us()
            count[ev.name] += 1
    return {name: {"us": total[name] / calls, "launches": count[name] / calls} for name in total}


def peak_memory(fn: Callable[[], object], device) -> Optional[int]:
    """Peak bytes allocated by torch on ``device`` during one call (inputs already resident
    included); None off CUDA."""
    if torch.device(device).type != "cuda":
        fn()
        return None
    sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    sync(device)
    return int(torch.cuda.max_memory_allocated(device))


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def failure(exc: BaseException) -> str:
    """Short reason for a failed run, for the tables."""
    if is_oom(exc):
        return "OOM"
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def release(device) -> None:
    """Free cached blocks after a failure so the next implementation starts clean."""
    import gc

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def copy_bandwidth(device, nbytes: int = 2**30, repeats: int = 20) -> Optional[float]:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    if torch.device(device).type != "cuda":
        return None
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    t = time_gpu(lambda: dst.copy_(src), device, warmup=3, repeats=repeats)
    del src, dst
    release(device)
    return 2 * nbytes / (t["median_ms"] * 1e-3) / 1e9


class Budget:
    """Wall-clock budget for a benchmark run; work that would not fit is skipped and recorded."""

    def __init__(self, seconds: Optional[float]):
        self.deadline = None if not seconds else time.monotonic() + float(seconds)

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def allows(self, estimate_s: float = 0.0) -> bool:
        return self.left() > estimate_s


# --- environment --------------------------------------------------------------------------------
def package_version(module: str) -> Optional[str]:
    """The installed version of a package (its metadata, else its __version__), None where absent."""
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        try:
            return getattr(importlib.import_module(module), "__version__", "?")
        except Exception:
            return None


def _git_commit() -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
    except Exception:
        return None


def _driver() -> Optional[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:
        return None


def environment(device) -> Dict:
    dev = torch.device(device)
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "driver": _driver() if dev.type == "cuda" else None,
        "git_commit": _git_commit(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32 if dev.type == "cuda" else None,
    }
    for pkg in ("e3nn", "cuequivariance", "cuequivariance_torch", "cuequivariance_ops_torch_cu13",
                "openequivariance", "mace-torch", "sevenn", "nequip", "vesin", "md_accel"):
        env[pkg] = package_version(pkg)
    return env


# --- writers ------------------------------------------------------------------------------------
def out_dir(path: Optional[str] = None) -> str:
    d = path or os.environ.get("OUT") or os.path.join(REPO, ".out", "bench")
    os.makedirs(d, exist_ok=True)
    return d


def write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    print(f"[bench] wrote {path}", flush=True)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if c is None else str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def comma_lists(args, ints: Sequence[str] = (), strs: Sequence[str] = ()) -> None:
    """Turn the named comma-separated arguments of ``args`` into lists (of ints for ``ints``)."""
    for k in ints:
        setattr(args, k, [int(v) for v in getattr(args, k).split(",")])
    for k in strs:
        setattr(args, k, getattr(args, k).split(","))


def write_results(out: str, stem: str, title: str, data, text: str) -> None:
    """``out/stem.json`` (``data``) and the table ``text`` appended to ``out/stem.md``, then printed."""
    write_json(os.path.join(out, stem + ".json"), data)
    append_markdown(os.path.join(out, stem + ".md"), title, text)
    print(text)


def append_markdown(path: str, title: str, body: str) -> None:
    """Append a titled section (e.g. a results table) to a markdown file."""
    with open(path, "a") as f:
        f.write(f"\n### {title}\n\n{body}\n")
    print(f"[bench] appended '{title}' to {path}", flush=True)


def fmt_ms(x: Optional[float]) -> str:
    if x is None:
        return "–"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def pyplot():
    """matplotlib's pyplot with a file backend, or None (plots are then skipped)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except Exception as e:  # noqa: BLE001
        print(f"[bench] matplotlib unavailable ({e}); skipping plots", flush=True)
        return None


def loglog_plot(series: Dict[str, Sequence[Tuple[float, float]]], path: str, xlabel: str, ylabel: str,
                title: Optional[str] = None) -> None:
    """One line per label through its (x, y) points on log-log axes, saved to ``path`` (labels
    without points are left out; nothing without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, pts in series.items():
        if pts:
            ax.plot(*zip(*pts), marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
