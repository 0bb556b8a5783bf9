"""The 'uvu' convolution tensor products of real models, with their instruction lists built the
way the models build them.

MACE (``tp_out_irreps_with_instructions``) and SevenNet (``IrrepsConvolution``) do the same:
every product irrep ``ir1 x ir2 -> ir3`` whose type occurs in the layer's target irreps gets its
own output block of multiplicity ``mul1``; the output blocks are then sorted by irrep (stable)
and the instructions renumbered and ordered by output block. The per-edge weights follow that
order, so the weight layout of every implementation here is the models' own.
"""
from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Tuple

Irrep = Tuple[int, int]  # (l, parity +1/-1), ordered like e3nn's (l, p) tuples


def parse_irreps(text: str) -> List[Tuple[int, Irrep]]:
    """'128x0e+64x1o' -> [(128, (0, 1)), (64, (1, -1))]."""
    out = []
    for term in text.replace(" ", "").split("+"):
        m = re.fullmatch(r"(?:(\d+)x)?(\d+)([eo])", term)
        if not m:
            raise ValueError(f"bad irreps term {term!r} in {text!r}")
        out.append((int(m.group(1) or 1), (int(m.group(2)), 1 if m.group(3) == "e" else -1)))
    return out


def format_irreps(irreps: List[Tuple[int, Irrep]]) -> str:
    return "+".join(f"{mul}x{l}{'e' if p == 1 else 'o'}" for mul, (l, p) in irreps)


def irreps_dim(irreps: List[Tuple[int, Irrep]]) -> int:
    return sum(mul * (2 * l + 1) for mul, (l, _) in irreps)


def uvu_conv_instructions(irreps_in1: str, irreps_in2: str, target: str) -> Tuple[str, List[Tuple]]:
    """(irreps_out, instructions) of a model's convolution; ``target`` filters the output irrep
    types (multiplicities in it are ignored)."""
    in1, in2 = parse_irreps(irreps_in1), parse_irreps(irreps_in2)
    allowed = {ir for _, ir in parse_irreps(target)}
    outs, ins = [], []
    for i, (mul, (l1, p1)) in enumerate(in1):
        for j, (_, (l2, p2)) in enumerate(in2):
            for l3 in range(abs(l1 - l2), l1 + l2 + 1):
                ir3 = (l3, p1 * p2)
                if ir3 in allowed:
                    ins.append((i, j, len(outs), "uvu", True))
                    outs.append((mul, ir3))
    order = sorted(range(len(outs)), key=lambda k: (outs[k][1], k))  # stable sort by irrep
    new_index = {old: new for new, old in enumerate(order)}
    ins = sorted(((a, b, new_index[k], m, t) for a, b, k, m, t in ins), key=lambda x: x[2])
    return format_irreps([outs[k] for k in order]), ins


class Workload(NamedTuple):
    name: str
    irreps_in1: str
    irreps_in2: str
    irreps_out: str
    instructions: List[Tuple]
    source: str

    @property
    def dims(self) -> Tuple[int, int, int]:
        return tuple(irreps_dim(parse_irreps(s)) for s in (self.irreps_in1, self.irreps_in2, self.irreps_out))

    @property
    def weight_numel(self) -> int:
        in1, in2 = parse_irreps(self.irreps_in1), parse_irreps(self.irreps_in2)
        return sum(in1[i][0] * in2[j][0] for i, j, *_ in self.instructions)


def _make(name, in1, in2, target, source) -> Workload:
    out, ins = uvu_conv_instructions(in1, in2, target)
    return Workload(name, in1, in2, out, ins, source)


SH3_O3 = "1x0e+1x1o+1x2e+1x3o"  # MACE / NequIP spherical harmonics, lmax 3
SH2_SO3 = "1x0e+1x1e+1x2e"  # SevenNet (is_parity False)
SH3_SO3 = "1x0e+1x1e+1x2e+1x3e"

# order = run order (a time budget skips the tail)
WORKLOADS: Dict[str, Workload] = {w.name: w for w in [
    _make("mace_mp0_medium", "128x0e+128x1o", SH3_O3, "128x0e+128x1o+128x2e+128x3o",
          "MACE-MP-0 medium, interaction 2 (hidden 128x0e+128x1o, max_ell 3; target = sh x 128 channels)"),
    _make("sevennet_l3i5", "128x0e+64x1e+32x2e+32x3e", SH3_SO3, "128x0e+64x1e+32x2e+32x3e",
          "SevenNet-l3i5 convolutions 1-3 (lmax 3, no parity)"),
    _make("mace_large", "128x0e+128x1o+128x2e", SH3_O3, "128x0e+128x1o+128x2e+128x3o",
          "MACE large shape (hidden 128x0e+128x1o+128x2e, L = 2, max_ell 3)"),
    _make("mace_first", "128x0e", SH3_O3, "128x0e+128x1o+128x2e+128x3o",
          "MACE first interaction (node embedding 128x0e)"),
    _make("sevennet_0", "128x0e+64x1e+32x2e", SH2_SO3, "128x0e+64x1e+32x2e",
          "SevenNet-0 (11Jul2024) convolutions 1-3 (lmax 2, no parity)"),
    _make("nequip_l3", "32x0e+32x1o+32x2e+32x3o", SH3_O3,
          "32x0e+32x0o+32x1o+32x1e+32x2e+32x2o+32x3o+32x3e",
          "NequIP-like lmax 3 layer, 32 channels, both parities in the output"),
]}


# --- passes, their stages and the check ---------------------------------------------------------
# The autograd stages each benchmark pass runs, in order (``loss``: the double-backward pass's loss).
PASS_STAGES = {"fwd": ("fwd",), "fwd_bwd": ("fwd", "bwd"), "dbwd": ("fwd", "bwd", "loss", "dbwd")}
# Max relative error against e3nn in float64 on kernels.py's check subgraph (#3's, as the GPU tests).
CHECK_TOLERANCE = {"float32": 1e-5, "float64": 1e-10}


# --- the bytes a pass must move -----------------------------------------------------------------
def stage_elements(wl: Workload, num_nodes: int, num_edges: int) -> Dict[str, int]:
    """Elements each autograd stage of the passes must move at least, every tensor it reads read once and
    every tensor it writes written once (the stages run one after the other, so none can reuse another's
    reads):

    - ``fwd``: reads x, y, w; writes out;
    - ``bwd``: reads x, y, w, grad_out; writes grad_x, grad_y, grad_w;
    - ``loss``: the double-backward pass's loss (``kernels.dbwd_loss``) reads the three first gradients, its
      backward reads them again and writes their gradients;
    - ``dbwd``: reads those gradients, grad_out, x, y, w; writes the second gradients of x, y, w (grad_out
      is no leaf, so no gradient of it)."""
    d1, d2, d3 = wl.dims
    n, per_edge = num_nodes, num_edges * (d2 + wl.weight_numel)  # per_edge: y and w (or their gradients)
    return {"fwd": per_edge + n * (d1 + d3),
            "bwd": 2 * per_edge + n * (2 * d1 + d3),
            "loss": 3 * (per_edge + n * d1),
            "dbwd": 3 * per_edge + n * (3 * d1 + d3)}


def byte_floor(wl: Workload, num_nodes: int, num_edges: int, itemsize: int) -> Dict[str, int]:
    """Minimum bytes of each pass: the sum of its autograd stages (``stage_elements`` times ``itemsize``) plus
    int32 sender and receiver indices once per stage that walks the edges (a floor: md_accel's kernels read
    int64 ones). Before session 28 the ``fwd_bwd`` floor was the backward stage's alone (the tables of
    sessions <= 28 in docs/benchmarks.md), and ``dbwd`` had none."""
    st = stage_elements(wl, num_nodes, num_edges)
    idx = 8 * num_edges
    return {p: itemsize * sum(st[s] for s in stages) + idx * sum(s != "loss" for s in stages)
            for p, stages in PASS_STAGES.items()}
