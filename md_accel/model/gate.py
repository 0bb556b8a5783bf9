"""Gate nonlinearity with e3nn's ``nn.Gate`` semantics.

Input layout (as e3nn builds it): ``scalars + gates + gated``, then stably sorted by irrep and
simplified. Output: ``act_scalars(scalars)`` followed by ``gated * act_gates(gates)`` (one gate
scalar per gated irrep). Activations carry e3nn's second-moment normalisation.
"""

from typing import Dict, List, Sequence, Tuple

import torch

from ..o3 import Irreps
from .activations import apply_activation, second_moment_constant


def _sorted_positions(irreps: Irreps) -> List[int]:
    """Position of each block after e3nn's stable sort by irrep."""
    order = sorted(range(len(irreps)), key=lambda i: (irreps[i].ir, i))
    pos = [0] * len(irreps)
    for new, old in enumerate(order):
        pos[old] = new
    return pos


def _runs(blocks: List[int], names: List[str], csts: List[float]) -> Tuple[List[int], List[str], List[float]]:
    """Consecutive blocks with the same activation and factor merged: (sizes, activations, factors)."""
    sizes: List[int] = []
    acts: List[str] = []
    factors: List[float] = []
    for size, name, c in zip(blocks, names, csts):
        if sizes and acts[-1] == name and factors[-1] == c:
            sizes[-1] += size
        else:
            sizes.append(size)
            acts.append(name)
            factors.append(c)
    return sizes, acts, factors


class Gate(torch.nn.Module):
    """``Gate(irreps_scalars, act_scalars, irreps_gates, act_gates, irreps_gated)``; activation
    names as in ``md_accel.model.activations`` (one per block of the scalar / gate irreps)."""

    scalar_blocks: List[int]
    gate_blocks: List[int]
    act_scalar_names: List[str]
    act_gate_names: List[str]
    scalar_csts: List[float]
    gate_csts: List[float]
    gated_muls: List[int]
    gated_dims: List[int]
    scalar_runs: List[int]
    gate_runs: List[int]
    scalar_run_acts: List[str]
    gate_run_acts: List[str]
    scalar_run_csts: List[float]
    gate_run_csts: List[float]
    split_sizes: List[int]
    in_order: bool

    def __init__(
        self,
        irreps_scalars,
        act_scalars: Sequence[str],
        irreps_gates,
        act_gates: Sequence[str],
        irreps_gated,
    ):
        super().__init__()
        self.irreps_scalars, self.irreps_gates, self.irreps_gated = (
            Irreps(irreps_scalars), Irreps(irreps_gates), Irreps(irreps_gated))
        if len(self.irreps_scalars) != len(act_scalars) or len(self.irreps_gates) != len(act_gates):
            raise ValueError("one activation per block of irreps_scalars / irreps_gates is needed")
        if self.irreps_scalars.lmax > 0 or self.irreps_gates.lmax > 0:
            raise ValueError("scalars and gates must be l=0 irreps")
        if self.irreps_gates.num_irreps != self.irreps_gated.num_irreps:
            raise ValueError(f"{self.irreps_gates.num_irreps} gates for {self.irreps_gated.num_irreps} gated irreps")
        self.act_scalar_names = list(act_scalars)
        self.act_gate_names = list(act_gates)
        groups = [self.irreps_scalars.simplify(), self.irreps_gates.simplify(), self.irreps_gated.simplify()]
        concat = Irreps(tuple(groups[0]) + tuple(groups[1]) + tuple(groups[2]))
        pos = _sorted_positions(concat)
        sorted_blocks = [concat[i] for i in sorted(range(len(concat)), key=lambda i: pos[i])]
        sorted_irreps = Irreps(sorted_blocks)
        self.irreps_in = sorted_irreps.simplify()
        offs = sorted_irreps.offsets()
        # the input's components in the order scalars, gates, gated (the identity for the usual
        # layouts, where the sort keeps each group contiguous: then no gather)
        order: List[int] = []
        k = 0
        for group in groups:
            for mi in group:
                start = offs[pos[k]]
                order.extend(range(start, start + mi.dim))
                k += 1
        self.in_order = order == list(range(len(order)))
        self.register_buffer("order", torch.tensor(order, dtype=torch.long), persistent=False)
        self.gated_muls: List[int] = [mi.mul for mi in self.irreps_gated]
        self.gated_dims: List[int] = [mi.ir.dim for mi in self.irreps_gated]
        self.scalar_blocks: List[int] = [mi.mul for mi in self.irreps_scalars]
        self.gate_blocks: List[int] = [mi.mul for mi in self.irreps_gates]
        self.dim_in = self.irreps_in.dim
        self.has_gated = self.irreps_gated.dim > 0
        self.set_constants([second_moment_constant(a) for a in act_scalars],
                           [second_moment_constant(a) for a in act_gates])

    def set_constants(self, scalar_csts: Sequence[float], gate_csts: Sequence[float]) -> None:
        """The activations' factors per block (e3nn's normalisation unless a source model says
        otherwise). Consecutive blocks with one activation and factor are then applied as one.
        Change the factors only through here: ``forward`` reads the runs this derives, not
        ``scalar_csts`` / ``gate_csts``."""
        if len(scalar_csts) != len(self.scalar_blocks) or len(gate_csts) != len(self.gate_blocks):
            raise ValueError("one constant per block of irreps_scalars / irreps_gates is needed")
        self.scalar_csts = [float(c) for c in scalar_csts]
        self.gate_csts = [float(c) for c in gate_csts]
        self.scalar_runs, self.scalar_run_acts, self.scalar_run_csts = _runs(
            self.scalar_blocks, self.act_scalar_names, self.scalar_csts)
        self.gate_runs, self.gate_run_acts, self.gate_run_csts = _runs(
            self.gate_blocks, self.act_gate_names, self.gate_csts)
        # one split of the reordered input into every run and gated block: its backward is one
        # concatenation
        self.split_sizes = (self.scalar_runs + self.gate_runs
                            + [m * d for m, d in zip(self.gated_muls, self.gated_dims)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.dim_in)
        n = x2.shape[0]
        if not self.in_order:
            x2 = x2.index_select(1, self.order)
        parts = torch.split(x2, self.split_sizes, dim=-1)
        outs: List[torch.Tensor] = []
        for i in range(len(self.scalar_runs)):
            y = apply_activation(self.scalar_run_acts[i], parts[i])
            outs.append(y.mul(self.scalar_run_csts[i]) if self.scalar_run_csts[i] != 1.0 else y)
        if self.has_gated:
            ns, ng = len(self.scalar_runs), len(self.gate_runs)
            acts: List[torch.Tensor] = []
            for i in range(ng):
                y = apply_activation(self.gate_run_acts[i], parts[ns + i])
                acts.append(y.mul(self.gate_run_csts[i]) if self.gate_run_csts[i] != 1.0 else y)
            gates = torch.split(acts[0] if ng == 1 else torch.cat(acts, dim=-1), self.gated_muls, dim=-1)
            # each gated irrep times its gate, broadcast over the irrep's components (a gather
            # with repeated indices would sum its gradient with float atomics on CUDA)
            for k in range(len(self.gated_muls)):
                mul, dim = self.gated_muls[k], self.gated_dims[k]
                block = parts[ns + ng + k].reshape(n, mul, dim) * gates[k].unsqueeze(-1)
                outs.append(block.reshape(n, mul * dim))
        if len(outs) == 0:
            out = x2[:, :0]
        elif len(outs) == 1:
            out = outs[0]
        else:
            out = torch.cat(outs, dim=-1)
        return out.reshape(lead + (out.shape[-1],))

    def spec(self) -> Dict:
        return {
            "irreps_scalars": str(self.irreps_scalars),
            "act_scalars": self.act_scalar_names,
            "irreps_gates": str(self.irreps_gates),
            "act_gates": self.act_gate_names,
            "irreps_gated": str(self.irreps_gated),
        }

    @classmethod
    def from_spec(cls, spec: Dict) -> "Gate":
        return cls(spec["irreps_scalars"], spec["act_scalars"], spec["irreps_gates"], spec["act_gates"],
                   spec["irreps_gated"])
