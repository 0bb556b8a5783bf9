"""Energy + forces per MD step of whole models on fcc copper: md_accel potentials vs SevenNet
(e3nn / cuEquivariance / OpenEquivariance / FlashTP backends), mace-torch (e3nn /
cuEquivariance / OpenEquivariance) with an MP-0-medium-shaped model, and nequip (e3nn /
OpenEquivariance / cuEquivariance through its model modifiers) with a NequIP model file that
md_accel converts too (``--nequip-model``, default the copper test model l3).

The neighbour list is built once per size (CPU) and excluded from the timing; every backend
gets the same edges in its own convention. A step = the model's forward and the autograd
backward giving forces, timed by wall clock with a device synchronisation (host work, launches
and syncs included), median of ``--repeats`` steps or more, over at least ``--min-seconds`` (1.5 s on CUDA: a
power-capped GPU's clock settles, session 44); peak memory from torch's allocator, counted from
what was allocated before the backend was loaded (its model, inputs and, for a CUDA graph, the
warm-up and capture included; what earlier backends left behind excluded; torch's per-stream
cuBLAS workspaces made before the first backend, so no row includes them). Sizes grow
until a backend runs out of memory (recorded, larger sizes skipped for it). Every backend runs
inside try/except; at the smallest size energies and forces are cross-checked within each model.
md_accel rows: ``md_accel:WHAT`` runs the step uncaptured (launches included, like the peers);
``md_accel:WHAT+graph`` is the Calculator's step: replayed from a CUDA graph up to
``GraphedStep.AUTO_MAX_EDGES`` edges, uncaptured above (padding would cost more than launches);
``md_accel:WHAT+whole`` keeps the whole per-edge weights for the backward at every size (per edge);
``+fused`` runs the fused-radial kernels (the radial MLP's last layer inside the conv kernels,
``MD_ACCEL_FUSED_RADIAL``), every other md_accel row materialised weights; the radial weights
are computed once per pair of edges (``edge_partner``, as the Calculator does), ``+edges`` once
per edge; ``+tf32x3`` runs the node-wise linears on 3xTF32 tensor cores (``MD_ACCEL_LINEAR_TF32X3=1``)
instead of plain float32 products; ``+per_block`` runs the float64 ones as one GEMM per instruction
(transposed copies of l > 0 blocks, as before session 23) instead of one ``species_linear`` op. ``+keep=MIB``, ``+chunk=MIB``, ``+lean=MIB``, ``+lean_chunks=N``,
``+split=N``, ``+cublas=0|1``, ``+unbiased=0|1``, ``+save=MIB`` set MD_ACCEL_KEEP_WEIGHTS_MIB,
MD_ACCEL_WEIGHT_CHUNK_MIB, MD_ACCEL_LEAN_WEIGHTS_MIB, MD_ACCEL_LEAN_CHUNKS, MD_ACCEL_BWD_SPLIT,
MD_ACCEL_GEMM_CUBLAS, MD_ACCEL_GEMM_UNBIASED and MD_ACCEL_SAVE_WEIGHTS_MIB (which decides only for weights per edge, ``+edges``) for that row only;
``+rows=0|1`` sets ``md_accel.ops.set_rows_in_grad_w`` (MD_ACCEL_ROWS_IN_GRAD_W) around that row's steps. Options combine (``md_accel:mace+graph+fused``, ``md_accel:mace+graph+lean=0+keep=0``).

    python benchmarks/model_step.py [--backends md_accel:sevennet-l3i5,sevenn:e3nn,...]
        [--sizes 864,4000,16384,32000,62500] [--dtype float32] [--mdx FILE.mdx ...]
        [--mace-model FILE.model] [--sevenn-checkpoint SevenNet_l3i5] [--nequip-model FILE.ckpt]
        [--repeats 20] [--min-seconds S] [--budget S]

nequip computes the stress too (its ForceStressOutput always does when a cell is given); its
inputs are float64 positions/cell/shifts (nequip's convention), its model runs in ``--dtype``.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import glob
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import nequip_peer  # noqa: E402

# run order: md_accel and the fastest peer first, so a time budget cuts the least informative
DEFAULT_BACKENDS = ("md_accel:sevennet-l3i5,sevenn:cueq,sevenn:oeq,sevenn:e3nn,sevenn:flash,"
                    "md_accel:mace,mace:cueq,mace:oeq,mace:e3nn,"
                    "md_accel:nequip,nequip:oeq,nequip:cueq,nequip:e3nn")
MACE_CUTOFF = 6.0

Step = Callable[[], Tuple[torch.Tensor, torch.Tensor]]  # -> (energy, forces [N, 3])


def _tensors(g: Dict, dtype, device):
    t = lambda a, d: torch.as_tensor(np.ascontiguousarray(a)).to(device=device, dtype=d)  # noqa: E731
    return {"src": t(g["src"], torch.int64), "dst": t(g["dst"], torch.int64), "vec": t(g["vec"], dtype),
            "shift": t(g["shift"], dtype), "unit_shift": t(g["unit_shift"], dtype), "pos": t(g["pos"], dtype),
            "cell": t(g["cell"], dtype), "n": int(g["num_nodes"])}


# --- backends -----------------------------------------------------------------------------------
class Backend:
    """``load()`` once, then ``step(graph)`` per size. ``model`` groups backends computing the
    same potential (their energies/forces are compared); ``cutoff`` picks the graph."""

    name = model = ""
    cutoff = 5.0
    keeps_pool = False  # memory held between steps (a CUDA graph's pool): peak taken from the first call on

    def facts(self) -> Dict:
        """What the results should record of the loaded model beside its timings."""
        return {}

    def load(self, dtype, device) -> None:
        raise NotImplementedError

    def step(self, g: Dict) -> Step:
        raise NotImplementedError


def sevenn_checkpoint(name: str) -> str:
    if os.path.isfile(name):
        return name
    try:
        from md_accel.convert.sevenn import resolve_checkpoint

        return resolve_checkpoint(name)
    except Exception:  # noqa: BLE001
        import sevenn

        found = glob.glob(os.path.join(os.path.dirname(sevenn.__file__), "pretrained_potentials", name, "*.pth"))
        if not found:
            raise FileNotFoundError(f"SevenNet checkpoint {name!r} not found")
        return found[0]


class MdAccel(Backend):
    """An md_accel potential: an ``.mdx`` file (md_accel.io.load), or converted on the fly
    from SevenNet (md_accel.convert.sevenn), MACE (md_accel.convert.mace) or the
    ``--nequip-model`` file (md_accel.convert.nequip)."""

    _converted: Dict = {}  # (what, dtype) -> potential on the CPU, converted once for the variants of one model
    SETTINGS = {"keep": "MD_ACCEL_KEEP_WEIGHTS_MIB", "chunk": "MD_ACCEL_WEIGHT_CHUNK_MIB",
                "lean": "MD_ACCEL_LEAN_WEIGHTS_MIB", "lean_chunks": "MD_ACCEL_LEAN_CHUNKS",
                "split": "MD_ACCEL_BWD_SPLIT", "cublas": "MD_ACCEL_GEMM_CUBLAS",
                "unbiased": "MD_ACCEL_GEMM_UNBIASED", "save": "MD_ACCEL_SAVE_WEIGHTS_MIB",
                "rows": "MD_ACCEL_ROWS_IN_GRAD_W"}
    COUNTS = ("lean_chunks", "split", "cublas", "unbiased", "rows")  # settings that are counts; the others are MiB
    SWITCHES = ("cublas", "unbiased", "rows")  # of those, the ones that are 0 or 1

    def __init__(self, what: str, args):
        # WHAT+whole: keep the whole per-edge weights for the backward at any size (the default
        # recomputes them chunk by chunk above MD_ACCEL_SAVE_WEIGHTS_MIB, see md_accel/ops/tp_conv.py).
        # WHAT+graph: the Calculator's step (md_accel.step.GraphedStep: a CUDA graph up to
        # AUTO_MAX_EDGES edges; the stress is computed too). WHAT+fused: the fused-radial kernels.
        # WHAT+edges: radial weights per edge instead of per pair. WHAT+tf32x3: node-wise linears on 3xTF32.
        # WHAT+per_block: node-wise linears as one GEMM per instruction.
        # WHAT+keep=MIB / +chunk=MIB / +lean=MIB / +lean_chunks=N / +split=N / +cublas=0|1 / +unbiased=0|1 / +save=MIB:
        # MD_ACCEL_KEEP_WEIGHTS_MIB, MD_ACCEL_WEIGHT_CHUNK_MIB, MD_ACCEL_LEAN_WEIGHTS_MIB, MD_ACCEL_LEAN_CHUNKS,
        # MD_ACCEL_BWD_SPLIT, MD_ACCEL_GEMM_CUBLAS, MD_ACCEL_GEMM_UNBIASED (set around each of this backend's steps) and MD_ACCEL_SAVE_WEIGHTS_MIB (its
        # convs) for this row.
        what, *options = what.split("+")
        pairs = [o.split("=", 1) for o in options if "=" in o]
        settings = dict(pairs)
        options = [o for o in options if "=" not in o]
        unknown = [o for o in options if o not in ("whole", "graph", "fused", "edges", "tf32x3", "per_block")]
        unknown += [k for k in settings if k not in self.SETTINGS]
        if unknown or len(set(options)) != len(options) or len(settings) != len(pairs):
            raise ValueError(f"bad md_accel options {options} {settings} (known: +whole, +graph, +fused, +edges, +tf32x3, +per_block, "
                             f"each once; +keep=MIB, +chunk=MIB, +lean=MIB, +lean_chunks=N, +split=N, +cublas=0|1, +unbiased=0|1, +save=MIB, +rows=0|1)")
        for k, v in settings.items():  # numbers, as the library reads them (else it would read 0 or 1)
            if k in self.SWITCHES and v not in ("0", "1"):
                raise ValueError(f"md_accel option +{k}={v}: expected 0 or 1")
            if not (v.isdigit() if k in self.COUNTS else v.replace(".", "", 1).isdigit()):
                what = "count" if k in self.COUNTS else "number of MiB"
                raise ValueError(f"md_accel option +{k}={v}: expected a {what}")
        # save and rows are not read from the environment at each step: save is set on the convs, rows through
        # md_accel.ops.set_rows_in_grad_w around each step (the library reads MD_ACCEL_ROWS_IN_GRAD_W once)
        self.env = {self.SETTINGS[k]: v for k, v in settings.items() if k not in ("save", "rows")}
        self.save_mib = float(settings["save"]) if "save" in settings else None
        self.rows = settings["rows"] == "1" if "rows" in settings else None
        self.what, self.args = what, args
        self.whole, self.graph, self.fused = ("whole" in options), ("graph" in options), ("fused" in options)
        self.tf32x3 = "tf32x3" in options
        self.per_block = "per_block" in options
        # +whole keeps whole per-edge weights, so per edge: a graph with pair rows takes the pair op
        self.pairs = "edges" not in options and not self.whole
        self.keeps_pool = self.graph
        self.name = f"md_accel:{os.path.basename(what)}" + "".join(f"+{o}" for o in options) + \
            "".join(f"+{k}={v}" for k, v in settings.items())
        if what.endswith(".mdx"):
            self.model = os.path.basename(what)
        elif what == "mace":
            self.model, self.cutoff = "mace_medium", MACE_CUTOFF
        elif what == "nequip":
            self.model = nequip_peer.model_name(args.nequip_model)
        elif what == "sevenn":  # the --sevenn-checkpoint model, as the sevenn:* backends name it
            self.model = args.sevenn_checkpoint.replace("-", "_").lower()
        else:
            self.model = what.replace("-", "_").lower()

    def load(self, dtype, device):
        from md_accel.ops import _cuda

        if torch.device(device).type == "cuda" and not _cuda.available():
            print(f"[model_step] md_accel CUDA library not loaded ({_cuda.load_error()}): reference ops", flush=True)
        key = (self.what, dtype)
        if key in self._converted:
            pot = self._converted[key]
        elif self.what.endswith(".mdx"):
            from md_accel.io import load

            pot = load(self.what, device="cpu", dtype=dtype)
        elif self.what == "mace":
            mod = importlib.import_module("md_accel.convert.mace")
            convert = getattr(mod, "convert_mace")
            pot = convert(mace_model(self.args, dtype, "cpu"), dtype=dtype)
        elif self.what == "nequip":
            from md_accel.convert.nequip import convert_nequip

            pot = convert_nequip(self.args.nequip_model, dtype=dtype)
        else:
            from md_accel.convert.sevenn import convert_sevenn

            pot = convert_sevenn(sevenn_checkpoint(self.args.sevenn_checkpoint if self.what == "sevenn"
                                                   else self.what), dtype=dtype)
        self._converted[key] = pot
        # each variant its own copy on the device, loaded while its memory is measured
        self.pot = copy.deepcopy(pot).to(device=device, dtype=dtype).eval()
        for p in self.pot.parameters():  # frozen, as the Calculator and the LAMMPS pair style hold it
            p.requires_grad_(False)
        from md_accel.model.linear import Linear
        from md_accel.ops.tp_conv import TensorProductConv, _save_weights_bytes

        for m in self.pot.modules():  # the converted potential is shared by the variants: set each
            if isinstance(m, Linear):
                m.tensor_cores = self.tf32x3
                m.per_block = self.per_block
            if isinstance(m, TensorProductConv):
                m.save_weights_bytes = 2 ** 62 if self.whole else _save_weights_bytes() if self.save_mib is None \
                    else int(self.save_mib * 2 ** 20)
                fused = False
                if self.fused and m.fused_hidden > 0 and torch.device(device).type == "cuda":
                    fused = _cuda.specialise_fused(m, m.fused_hidden, device) is not None
                    if not fused:
                        raise RuntimeError("+fused: the fused-radial generator does not handle this layer")
                m.fused_f32 = m.fused_f64 = fused
        self.cutoff = float(self.pot.cutoff)
        self.dtype, self.device = dtype, device

    def facts(self) -> Dict:
        # per conv layer, the per-edge weights' width: what the lean threshold counts (benchmarks/lean_threshold.py)
        from md_accel.ops.tp_conv import TensorProductConv

        return {"weight_widths": [m.weight_numel for m in self.pot.modules() if isinstance(m, TensorProductConv)]}

    def step(self, g):
        from md_accel.model.potential import energy_forces_virial

        t = _tensors(g, self.dtype, self.device)
        species = torch.full((t["n"],), list(self.pot.elements).index("Cu"), dtype=torch.int64, device=self.device)
        partner = None
        if self.pairs:
            from md_accel.neighbors import edge_partners

            partner = edge_partners(t["src"], t["dst"], t["unit_shift"].round().to(torch.int64))
            if partner is None:
                raise RuntimeError("the benchmark graph has edges without their reverse")

        if self.graph:
            from md_accel.step import GraphedStep

            step = GraphedStep(self.pot, mode="graph", dtype=self.dtype, max_edges=GraphedStep.AUTO_MAX_EDGES)
        else:
            def step(*inputs):
                return energy_forces_virial(self.pot, *inputs, edge_partner=partner)

        from md_accel.ops import set_rows_in_grad_w

        def run():
            previous = None if self.rows is None else set_rows_in_grad_w(self.rows)
            try:
                with common.environ(self.env):
                    out = step(species, t["vec"], t["src"], t["dst"], partner) if self.graph else \
                        step(species, t["vec"], t["src"], t["dst"])
            finally:
                if previous is not None:
                    set_rows_in_grad_w(previous)
            return out["energy"], out["forces"]

        return run


class SevenNet(Backend):
    """sevenn's own model, built from the checkpoint with one of its TP accelerators."""

    def __init__(self, variant: str, args):
        self.variant, self.args = variant, args
        self.name = f"sevenn:{variant}"
        self.model = args.sevenn_checkpoint.replace("-", "_").lower()

    def load(self, dtype, device):
        import warnings

        from sevenn.util import load_checkpoint

        flags = {"e3nn": {}, "cueq": {"enable_cueq": True}, "oeq": {"enable_oeq": True},
                 "flash": {"enable_flash": True}}[self.variant]
        if self.variant != "e3nn":  # sevenn silently falls back to e3nn when an accelerator is missing
            short = {"cueq": "cue", "oeq": "oeq", "flash": "flash"}[self.variant]
            helper = importlib.import_module(f"sevenn.nn.{short}_helper")
            if not getattr(helper, f"is_{short}_available")():
                raise RuntimeError(f"sevenn reports {self.variant} unavailable (it would fall back to e3nn)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cp = load_checkpoint(sevenn_checkpoint(self.args.sevenn_checkpoint))
            model = cp.build_model(**flags)
        model.set_is_batch_data(False)
        if dtype != torch.float32:  # sevenn's species one-hot is hard-coded float32
            from md_accel.convert.sevenn import cast_species_onehot

            cast_species_onehot(model, dtype)
        self.net = model.to(device=device, dtype=dtype).eval()
        self.cutoff = float(cp.config["cutoff"])
        self.dtype, self.device = dtype, device

    def step(self, g):
        import sevenn._keys as KEY
        from sevenn.atom_graph_data import AtomGraphData

        t = _tensors(g, self.dtype, self.device)
        z = torch.full((t["n"],), 29, dtype=torch.int64, device=self.device)
        base = AtomGraphData(**{
            KEY.NODE_FEATURE: z, KEY.ATOMIC_NUMBERS: z, KEY.POS: t["pos"],
            KEY.EDGE_IDX: torch.stack([t["dst"], t["src"]]),  # sevenn: [receiver, sender]
            KEY.EDGE_VEC: t["vec"], KEY.CELL_VOLUME: torch.linalg.det(t["cell"]).abs(),
            KEY.NUM_ATOMS: torch.tensor(t["n"], device=self.device)})

        def run():
            out = self.net(base.clone())
            return out[KEY.PRED_TOTAL_ENERGY], out[KEY.PRED_FORCE]

        return run


def mace_model(args, dtype, device):
    """The MACE model: ``--mace-model`` file, else an MP-0-medium-shaped model built in process
    by models/build_mace_mp0_medium_shape.py (seed 0, random weights)."""
    import mace.modules  # noqa: F401  (sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD for e3nn 0.4.4)

    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        if args.mace_model:
            model = torch.load(args.mace_model, map_location="cpu", weights_only=False)
        else:
            path = os.path.join(common.REPO, "models", "build_mace_mp0_medium_shape.py")
            spec = importlib.util.spec_from_file_location("build_mace_mp0_medium_shape", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            model = mod.build("medium", seed=0)
    finally:
        torch.set_default_dtype(default)
    return model.to(device=device, dtype=dtype).eval()


class Mace(Backend):
    """mace-torch's ScaleShiftMACE, converted by mace's own tools for cuEquivariance (fused conv
    on CUDA) and OpenEquivariance."""

    model, cutoff = "mace_medium", MACE_CUTOFF

    def __init__(self, variant: str, args):
        self.variant, self.args = variant, args
        self.name = f"mace:{variant}"

    def load(self, dtype, device):
        dev = torch.device(device)
        # mace silently keeps e3nn (or cuEquivariance's slow fallback) when a package is missing
        if self.variant == "oeq":
            import openequivariance  # noqa: F401
        if self.variant == "cueq" and dev.type == "cuda":
            import cuequivariance_ops_torch  # noqa: F401
        model = mace_model(self.args, dtype, dev)
        default = torch.get_default_dtype()
        try:
            if self.variant == "cueq":
                from mace.cli.convert_e3nn_cueq import run

                model = run(model, device=dev.type)  # "cuda" turns on the fused conv
            elif self.variant == "oeq":
                from mace.cli.convert_e3nn_oeq import run

                model = run(model, device=dev.type)
            elif self.variant != "e3nn":
                raise ValueError(f"unknown mace variant {self.variant!r}")
        finally:
            torch.set_default_dtype(default)  # mace's converters change it
        self.net = model.to(device=dev, dtype=dtype).eval()
        for p in self.net.parameters():
            p.requires_grad_(False)
        self.cutoff = float(self.net.r_max)
        self.z_index = [int(z) for z in self.net.atomic_numbers].index(29)
        self.dtype, self.device = dtype, dev

    def step(self, g):
        t = _tensors(g, self.dtype, self.device)
        n, num_el = t["n"], len(self.net.atomic_numbers)
        node_attrs = torch.zeros((n, num_el), dtype=self.dtype, device=self.device)
        node_attrs[:, self.z_index] = 1
        base = {  # mace: edge_index[0] sender, [1] receiver, vector = pos[1] - pos[0] + shift
            "node_attrs": node_attrs, "positions": t["pos"], "edge_index": torch.stack([t["dst"], t["src"]]),
            "shifts": t["shift"], "unit_shifts": t["unit_shift"], "cell": t["cell"].view(1, 3, 3),
            "batch": torch.zeros(n, dtype=torch.int64, device=self.device),
            "ptr": torch.tensor([0, n], dtype=torch.int64, device=self.device),
            "head": torch.zeros(1, dtype=torch.int64, device=self.device)}

        def run():
            out = self.net(dict(base), compute_force=True, compute_stress=False, training=False)
            return out["energy"], out["forces"]

        return run


class NequIP(Backend):
    """nequip's own model from ``--nequip-model`` (nequip_peer.load: eager, in ``--dtype``,
    with the variant's model modifier)."""

    def __init__(self, variant: str, args):
        if variant not in nequip_peer.VARIANTS:
            raise ValueError(f"unknown nequip variant {variant!r} ({', '.join(nequip_peer.VARIANTS)})")
        self.variant, self.args = variant, args
        self.name = f"nequip:{variant}"
        self.model = nequip_peer.model_name(args.nequip_model)

    def load(self, dtype, device):
        model = nequip_peer.load(self.args.nequip_model, self.variant, dtype, device)
        self.net = model.to(device)
        self.cutoff = float(model.metadata["r_max"])
        self.device = device

    def step(self, g):
        base = nequip_peer.graph_input(self.net, g, self.device)

        def run():
            out = self.net(dict(base))
            return out["total_energy"], out["forces"]

        return run


def make_backend(spec: str, args) -> Backend:
    family, _, variant = spec.partition(":")
    if family == "md_accel":
        return MdAccel(variant, args)
    if family == "sevenn":
        return SevenNet(variant, args)
    if family == "mace":
        return Mace(variant, args)
    if family == "nequip":
        return NequIP(variant, args)
    raise ValueError(f"unknown backend {spec!r} (md_accel:WHAT, sevenn:VARIANT, mace:VARIANT, nequip:VARIANT)")


# --- the run ------------------------------------------------------------------------------------
def run_backend(b: Backend, sizes: List[int], graphs: Dict, args, make_budget: Callable[[], "common.Budget"],
                device, log) -> List[Dict]:
    """``make_budget()`` gives this backend's time budget once it is loaded (a slow load, e.g. a
    conversion or a kernel build, is not charged to its steps)."""
    recs = []
    base = {"backend": b.name, "model": b.model}
    common.release(device)
    # peak memory counts from here: what earlier backends left allocated (torch's per-stream cuBLAS
    # workspaces, cached converted models) is not this backend's
    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    t0 = time.perf_counter()
    try:
        b.load(args.dtype_t, device)
        log(f"[model_step] {b.name}: loaded in {time.perf_counter() - t0:.1f} s (cutoff {b.cutoff:g})")
        base.update(b.facts())
        budget = make_budget()
    except Exception as e:  # noqa: BLE001
        reason = common.failure(e)
        log(f"[model_step] {b.name}: load failed: {reason}")
        common.release(device)
        return [{**base, "atoms": n, "status": reason} for n in sizes]
    stop = None
    for n in sizes:
        rec = {**base, "atoms": n}
        if stop:
            recs.append({**rec, "status": stop})
            continue
        try:
            key = (n, b.cutoff)
            if key not in graphs:
                t1 = time.perf_counter()
                graphs[key] = common.copper_graph(n, b.cutoff)
                log(f"[model_step] graph {graphs[key]['name']}: {len(graphs[key]['src'])} edges "
                    f"({time.perf_counter() - t1:.1f} s)")
            g = graphs[key]
            rec["edges"] = int(len(g["src"]))
            if b.keeps_pool and device.type == "cuda":  # the CUDA graph's pool is made in the first call
                torch.cuda.reset_peak_memory_stats(device)
            fn = b.step(g)
            t1 = time.perf_counter()
            energy, forces = fn()
            common.sync(device)
            first = time.perf_counter() - t1
            rec["first_call_s"] = first
            rec["energy_per_atom"] = float(energy.detach().sum()) / n
            if n == sizes[0]:
                rec["_forces"] = forces.detach().double().cpu()
            del energy, forces
            if not budget.allows(first + 2):
                raise TimeoutError(f"skipped: time budget (first call {first:.1f} s)")
            t1 = time.perf_counter()  # a second call: the first may include one-off compilation
            fn()
            common.sync(device)
            per_call = time.perf_counter() - t1
            repeats = args.repeats
            if not budget.allows(max(per_call * repeats, args.min_seconds) + per_call * args.warmup + 2):
                raise TimeoutError(f"skipped: time budget (second call {per_call:.1f} s)")
            window: List[str] = []
            rec.update(common.time_wall(fn, device, args.warmup, repeats, args.min_seconds, window))
            rec["timed"] = window  # for smi_join.py: the GPU's clocks and power meanwhile
            lifetime = torch.cuda.max_memory_allocated(device) if b.keeps_pool and device.type == "cuda" else 0
            peak = max(common.peak_memory(fn, device) or 0, lifetime)
            rec["peak_bytes"] = peak - before if peak else None
            rec["status"] = "ok"
        except Exception as e:  # noqa: BLE001
            rec["status"] = "budget" if isinstance(e, TimeoutError) else common.failure(e)
            if rec["status"] == "OOM":
                stop = f"skipped (OOM at {n})"
            elif isinstance(e, TimeoutError):
                stop = "budget"
        finally:
            fn = None
            common.release(device)
        recs.append(rec)
        log(f"[model_step] {b.name:22s} {n:7d} atoms: " + (
            f"{rec['median_ms']:8.1f} ms/step" + (f", peak {rec['peak_bytes'] / 2**30:.2f} GiB"
                                                   if rec.get("peak_bytes") else "")
            if rec["status"] == "ok" else rec["status"]))
    b.__dict__.pop("net", None)
    b.__dict__.pop("pot", None)
    common.release(device)
    return recs


def cross_check(recs: List[Dict], n0: int) -> List[Dict]:
    """Energy per atom and forces at the smallest size, each backend against the first
    e3nn-based (else first) backend of the same model."""
    rows = []
    for model in dict.fromkeys(r["model"] for r in recs):
        group = [r for r in recs if r["model"] == model and r["atoms"] == n0 and "_forces" in r]
        if len(group) < 2:
            continue
        ref = next((r for r in group if r["backend"].endswith(":e3nn")), group[0])
        for r in group:
            if r is ref:
                continue
            df = (r["_forces"] - ref["_forces"]).abs().max().item()
            rows.append({"model": model, "backend": r["backend"], "reference": ref["backend"], "atoms": n0,
                         "d_energy_per_atom": abs(r["energy_per_atom"] - ref["energy_per_atom"]),
                         "max_d_force": df, "max_force_ref": ref["_forces"].abs().max().item()})
    return rows


def _cublas_workspaces(device) -> None:
    """torch keeps a cuBLAS workspace (32 MiB on Hopper) per handle (thread) and stream for the life
    of the process; made here for the main and autograd threads on the current stream and on
    md_accel's capture stream, so that no row's peak memory includes them (else the first row
    to use a stream would, and the others not)."""
    from md_accel.step import capture_stream

    for stream in (torch.cuda.current_stream(device), capture_stream(device)):
        with torch.cuda.stream(stream):
            for dtype in (torch.float32, torch.float64):
                a = torch.ones(64, 64, device=device, dtype=dtype, requires_grad=True)
                (a @ a).sum().backward()
        stream.synchronize()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default=DEFAULT_BACKENDS)
    ap.add_argument("--mdx", nargs="*", default=[], help="md_accel model files, benchmarked as md_accel:FILE")
    ap.add_argument("--sizes", default="864,4000,16384,32000,62500")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--mace-model", default=None, help="mace .model file (default: build the medium shape)")
    ap.add_argument("--sevenn-checkpoint", default="SevenNet_l3i5")
    ap.add_argument("--nequip-model", default=nequip_peer.DEFAULT_MODEL,
                    help="nequip .ckpt (or .nequip.zip: e3nn only) for nequip:* and md_accel:nequip")
    common.add_timing_args(ap, "model_step", "step")
    args = ap.parse_args(argv)
    args.dtype_t = getattr(torch, args.dtype)
    budget = common.Budget(args.budget)
    device = torch.device(args.device)
    args.min_seconds = common.min_seconds(args.min_seconds, device)
    out = common.out_dir(args.out)
    log = lambda s: print(s, flush=True)  # noqa: E731
    sizes = [int(s) for s in args.sizes.split(",") if s]
    env = common.environment(device)
    log(f"[model_step] {env['device']}, torch {env['torch']}, {args.dtype}, sizes {sizes}")

    specs = [s for s in args.backends.split(",") if s] + [f"md_accel:{p}" for p in args.mdx]
    if device.type == "cuda":
        _cublas_workspaces(device)
    graphs: Dict = {}
    recs: List[Dict] = []
    for k, spec in enumerate(specs):
        try:
            b = make_backend(spec, args)
        except Exception as e:  # noqa: BLE001
            recs += [{"backend": spec, "model": "?", "atoms": n, "status": common.failure(e)} for n in sizes]
            continue
        if not budget.allows(10):
            recs += [{"backend": b.name, "model": b.model, "atoms": n, "status": "budget"} for n in sizes]
            continue
        # an equal share of what is left after its load, so a slow load (a conversion) starves
        # neither this backend nor the ones after it
        def share(rest=len(specs) - k):
            return common.Budget(budget.left() / rest) if budget.deadline is not None else budget

        recs += run_backend(b, sizes, graphs, args, share, device, log)

    checks = cross_check(recs, sizes[0])
    for r in recs:
        r.pop("_forces", None)
    common.write_json(os.path.join(out, f"{args.tag}.json"),
                      {"env": env, "args": {k: v for k, v in vars(args).items() if k != "dtype_t"},
                       "results": recs, "cross_check": checks})

    backends = list(dict.fromkeys(r["backend"] for r in recs))
    rows = []
    for name in backends:
        row = [name]
        for n in sizes:
            r = next((r for r in recs if r["backend"] == name and r["atoms"] == n), None)
            if r is None:
                row.append("")
            elif r["status"] == "ok":
                row.append(f"{common.fmt_ms(r['median_ms'])}" + (f" ({r['peak_bytes'] / 2**30:.1f})"
                                                                  if r.get("peak_bytes") else ""))
            else:
                row.append(r["status"][:40])
        rows.append(row)
    md = (f"Energy + forces per step, fcc Cu, {args.dtype}, {env['device']}; ms (peak GiB), median of "
          f"{args.repeats} steps or more over at least {args.min_seconds:g} s; neighbour list excluded\n\n"
          + common.markdown_table(["backend"] + [f"{n:,}" for n in sizes], rows))
    if checks:
        md += "\n\ncross-check at {} atoms\n\n".format(sizes[0]) + common.markdown_table(
            ["model", "backend", "vs", "|dE|/atom (eV)", "max |dF| (eV/A)", "max |F|"],
            [[c["model"], c["backend"], c["reference"], f"{c['d_energy_per_atom']:.1e}", f"{c['max_d_force']:.1e}",
              f"{c['max_force_ref']:.2g}"] for c in checks])
    common.append_markdown(os.path.join(out, "tables.md"), f"Model step ({args.tag})", md)
    plot(recs, os.path.join(out, f"{args.tag}.png"), backends, args.dtype)
    print(md, flush=True)


def plot(recs, path, backends, dtype):
    series = {name: [(r["atoms"], r["median_ms"]) for r in recs if r["backend"] == name and r.get("status") == "ok"]
              for name in backends}
    common.loglog_plot(series, path, "atoms (fcc Cu)", "ms / step (energy + forces)", f"MD step, {dtype}")
    print(f"[bench] wrote {path}", flush=True)


if __name__ == "__main__":
    main()
