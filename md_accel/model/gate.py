"""Gate nonlinearity with e3nn's ``nn.Gate`` semantics.

Input layout (as e3nn builds it): ``scalars + gates + gated``, then stably sorted by irrep and
simplified. Output: ``act_scalars(scalars)`` followed by ``gated * act_gates(gates)`` (one gate
scalar per gated irrep). Activations carry e3nn's second-moment normalisation.
"""

from typing import Dict, List, Sequence

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
        # gather index of each group's components in the sorted input
        index: List[List[int]] = [[], [], []]
        k = 0
        for g, group in enumerate(groups):
            for mi in group:
                start = offs[pos[k]]
                index[g].extend(range(start, start + mi.dim))
                k += 1
        self.register_buffer("idx_scalars", torch.tensor(index[0], dtype=torch.long), persistent=False)
        self.register_buffer("idx_gates", torch.tensor(index[1], dtype=torch.long), persistent=False)
        self.register_buffer("idx_gated", torch.tensor(index[2], dtype=torch.long), persistent=False)
        # each gated component takes the gate of its irrep; broadcast per block (an index_select
        # with repeated indices would sum its gradient with float atomics on CUDA)
        self.gated_muls: List[int] = [mi.mul for mi in self.irreps_gated]
        self.gated_dims: List[int] = [mi.ir.dim for mi in self.irreps_gated]
        self.scalar_blocks: List[int] = [mi.mul for mi in self.irreps_scalars]
        self.gate_blocks: List[int] = [mi.mul for mi in self.irreps_gates]
        self.scalar_csts: List[float] = [second_moment_constant(a) for a in act_scalars]
        self.gate_csts: List[float] = [second_moment_constant(a) for a in act_gates]
        self.dim_in = self.irreps_in.dim
        self.has_gated = self.irreps_gated.dim > 0

    def _acts(self, x: torch.Tensor, blocks: List[int], names: List[str], csts: List[float]) -> torch.Tensor:
        outs: List[torch.Tensor] = []
        parts = torch.split(x, blocks, dim=-1)  # one concatenation in the backward, not a slice each
        for i in range(len(blocks)):
            y = apply_activation(names[i], parts[i])
            outs.append(y.mul(csts[i]) if csts[i] != 1.0 else y)
        if len(outs) == 0:
            return x[:, :0]
        return torch.cat(outs, dim=-1)

    def _expand(self, gates: torch.Tensor) -> torch.Tensor:
        """[n, num_gated_irreps] -> [n, dim(irreps_gated)]: each gate repeated over its irrep."""
        outs: List[torch.Tensor] = []
        parts = torch.split(gates, self.gated_muls, dim=-1)
        for k, dim in enumerate(self.gated_dims):
            mul = self.gated_muls[k]
            g = parts[k].unsqueeze(-1).expand(gates.shape[0], mul, dim)
            outs.append(g.reshape(gates.shape[0], mul * dim))
        return torch.cat(outs, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.dim_in)
        scalars = self._acts(x2.index_select(1, self.idx_scalars), self.scalar_blocks, self.act_scalar_names,
                             self.scalar_csts)
        if not self.has_gated:
            return scalars.reshape(lead + (scalars.shape[-1],))
        gates = self._acts(x2.index_select(1, self.idx_gates), self.gate_blocks, self.act_gate_names, self.gate_csts)
        gated = x2.index_select(1, self.idx_gated) * self._expand(gates)
        out = torch.cat([scalars, gated], dim=-1)
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
