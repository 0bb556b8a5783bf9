"""Equivariant linear map with e3nn's ``o3.Linear`` semantics and weight layout.

Instructions connect every input block to every output block of the same irrep (in that
order: input block outer, output block inner). Each has a ``[mul_in, mul_out]`` weight, stored
flattened and concatenated in ``weight`` exactly as e3nn stores it, so e3nn / sevenn / nequip
weights load 1:1. The output of instruction ``(i, o)`` is scaled by ``path_weight =
1/sqrt(sum of mul_in over the instructions feeding o)`` (e3nn's "element" normalisation);
callers may pass explicit path weights (e.g. when constant inputs were folded into ``bias``).
``bias`` (e3nn layout, scalar ``0e`` output blocks only) is added unscaled.

On CUDA in float64 the whole map is one ``md_accel::species_linear_fwd`` call with one species:
its kernels read and write each block in the ``[n, mul, 2l+1]`` layout (no transposed copies, no
sums or concatenation of blocks) and multiply on the float64 tensor cores (DMMA, IEEE products and
sums). In float32 that op's CUDA-core tiles were slower than ``torch.mm`` on the wide linears
(session 23, benchmarks/linear.py), so float32 takes the per-instruction products below, as the
CPU does (``per_block`` selects them in float64 too, for comparisons).

The per-instruction products run through ``torch.mm`` (float32 or float64): on CUDA, 3xTF32 tensor cores
(``md_accel::linear_tf32x3``) only where ``MD_ACCEL_LINEAR_TF32X3=1`` was set when the module
was built (model files always store the ``torch.mm`` form). The tensor cores truncate as they
accumulate, a bias of ~2e-7 of every output that node-wise linears pass on from layer to layer
into every atom's energy; float32 products round to nearest and cost no measurable time here
(session 19: docs/benchmarks.md, benchmarks/precision_f32.py). ``torch.mm`` follows the user's
TF32 switch (``torch.backends.cuda.matmul.allow_tf32``, off by default), which md_accel leaves
alone: with it on, these products are 1xTF32 (~1e-3 relative error).
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ..o3 import Irrep, Irreps
from ..ops import _linear_ops, _sl_ops  # noqa: F401  (register torch.ops.md_accel.linear_tf32x3, species_linear_*)


def linear_instructions(irreps_in: Irreps, irreps_out: Irreps) -> List[Tuple[int, int, float]]:
    """e3nn's default instructions ``(i_in, i_out, path_weight)`` in e3nn's order."""
    pairs = [
        (i, o)
        for i, mi in enumerate(irreps_in)
        for o, mo in enumerate(irreps_out)
        if mi.ir == mo.ir
    ]
    fan_in: Dict[int, int] = {}
    for i, o in pairs:
        fan_in[o] = fan_in.get(o, 0) + irreps_in[i].mul
    return [(i, o, (fan_in[o] if fan_in[o] > 0 else 1) ** -0.5) for i, o in pairs]


def _op_fits(ins: List[List[int]]) -> bool:
    """Whether the ``species_linear`` kernels take this instruction table (``ins`` rows as in
    ``Linear``): irrep dimension <= 15, <= 64 blocks on either side, <= 32 instructions per block,
    <= 63 instructions (csrc/species_linear_kernels.cu); larger maps keep the per-block products."""
    active = [r for r in ins if r[1] > 0 and r[3] > 0]
    per_out = [sum(1 for r in active if r[2] == o) for o in {r[2] for r in active}]
    per_in = [sum(1 for r in active if r[0] == i) for i in {r[0] for r in active}]
    return (all(r[4] <= 15 for r in active) and len(active) <= 63 and len(per_out) <= 64 and len(per_in) <= 64
            and max(per_out + per_in + [0]) <= 32)


class Linear(torch.nn.Module):
    """``[..., irreps_in.dim] -> [..., irreps_out.dim]``, equal to ``e3nn.o3.Linear(irreps_in,
    irreps_out, biases=biases)`` with the same ``weight`` (and ``bias``)."""

    ins: List[List[int]]
    out_blocks: List[List[int]]
    path_weights: List[float]
    op_ins: List[int]
    bias_cols: List[List[int]]
    op_fits: bool

    def __init__(
        self,
        irreps_in,
        irreps_out,
        biases: bool = False,
        path_weights: Optional[Sequence[float]] = None,
    ):
        super().__init__()
        self.irreps_in = Irreps(irreps_in)
        self.irreps_out = Irreps(irreps_out)
        ins = linear_instructions(self.irreps_in, self.irreps_out)
        if path_weights is not None:
            if len(path_weights) != len(ins):
                raise ValueError(f"{len(path_weights)} path weights for {len(ins)} instructions")
            ins = [(i, o, float(pw)) for (i, o, _), pw in zip(ins, path_weights)]
        self.path_weights: List[float] = [pw for _, _, pw in ins]
        self.explicit_path_weights = path_weights is not None
        in_off, out_off = self.irreps_in.offsets(), self.irreps_out.offsets()
        # per instruction: in_block, mul_in, out_block, mul_out, dim, w_off. The input is split
        # into its blocks once (the gradient of a split is one concatenation, where per-block
        # slices would each zero-fill and accumulate a full-width gradient).
        self.in_sizes: List[int] = [mi.dim for mi in self.irreps_in]
        self.ins: List[List[int]] = []
        w_off = 0
        for i, o, _ in ins:
            mi, mo = self.irreps_in[i], self.irreps_out[o]
            self.ins.append([i, mi.mul, o, mo.mul, mi.ir.dim, w_off])
            w_off += mi.mul * mo.mul
        self.weight_numel = w_off
        self.biases = bool(biases)
        self.out_blocks: List[List[int]] = []  # mul, dim, bias offset (-1: none), has instructions
        b_off = 0
        fed = {o for _, o, _ in ins}
        for o, mo in enumerate(self.irreps_out):
            has_bias = self.biases and mo.ir == Irrep(0, 1) and mo.mul > 0
            self.out_blocks.append([mo.mul, mo.ir.dim, b_off if has_bias else -1, int(o in fed)])
            b_off += mo.dim if has_bias else 0
        self.bias_numel = b_off
        # the same map as md_accel::species_linear_* tables: (i_off, mul_in, o_off, mul_out, d, w_off)
        # per instruction, and (column, bias offset, width) per biased output block
        self.op_ins: List[int] = [v for r in self.ins for v in (in_off[r[0]], r[1], out_off[r[2]], r[3], r[4], r[5])]
        self.bias_cols: List[List[int]] = [[out_off[o], blk[2], blk[0] * blk[1]]
                                           for o, blk in enumerate(self.out_blocks) if blk[2] >= 0]
        self.op_fits = _op_fits(self.ins)
        self.dim_in = self.irreps_in.dim
        self.dim_out = self.irreps_out.dim
        self.weight = torch.nn.Parameter(torch.randn(self.weight_numel))
        self.bias = torch.nn.Parameter(torch.zeros(self.bias_numel))
        self.tensor_cores = os.environ.get("MD_ACCEL_LINEAR_TF32X3", "0") == "1"
        self.per_block = False  # True: the per-instruction products on CUDA too (comparisons)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.dim_in)
        if x2.is_cuda and x2.dtype == torch.float64 and self.op_fits and not self.per_block:
            out = self.forward_node_op(x2)
        else:
            out = self.forward_blocks(x2)
        return out.reshape(lead + (self.dim_out,))

    def forward_node_op(self, x2: torch.Tensor) -> torch.Tensor:
        """The whole map as one ``md_accel::species_linear_fwd`` call with one species: every block
        read and written in its ``[n, mul, d]`` layout, no transposed copies, sums or concatenation
        (its gradients are that op family's, closed under differentiation); then the biases."""
        one_species = torch.empty(0, dtype=torch.long, device=x2.device)
        out = torch.ops.md_accel.species_linear_fwd(x2.contiguous(), self.weight.view(1, -1), one_species,
                                                    one_species, self.op_ins, self.path_weights, self.dim_out)
        for c in self.bias_cols:
            out.narrow(1, c[0], c[2]).add_(self.bias.narrow(0, c[1], c[2]))
        return out

    def forward_blocks(self, x2: torch.Tensor) -> torch.Tensor:
        """One product per instruction (the CPU path and the reference of the CUDA op's use)."""
        n = x2.shape[0]
        parts: List[List[torch.Tensor]] = [[] for _ in range(len(self.out_blocks))]
        blocks = torch.split(x2, self.in_sizes, dim=-1)
        for k, ins in enumerate(self.ins):
            i, mul_in, o, mul_out, d, w_off = ins[0], ins[1], ins[2], ins[3], ins[4], ins[5]
            if mul_in == 0 or mul_out == 0:
                continue
            # the path weight scales the small weight block, not the [n, mul_out, d] product
            w = self.weight[w_off: w_off + mul_in * mul_out].view(mul_in, mul_out) * self.path_weights[k]
            # one [rows, mul_in] @ [mul_in, mul_out] product per instruction; an l > 0 block as
            # [n, mul_in, d]: md_accel::linear_tf32x3 multiplies it per component in that layout,
            # torch.mm as one product over (node, component) rows of a transposed copy
            if self.tensor_cores:
                if d == 1:
                    y = torch.ops.md_accel.linear_tf32x3(blocks[i], w)
                else:
                    y = torch.ops.md_accel.linear_tf32x3(blocks[i].view(n, mul_in, d), w)
            elif d == 1:
                y = torch.mm(blocks[i], w)
            else:
                rows = blocks[i].view(n, mul_in, d).transpose(1, 2).reshape(n * d, mul_in)
                y = torch.mm(rows, w).view(n, d, mul_out).transpose(1, 2)
            parts[o].append(y.reshape(n, mul_out * d))
        outs: List[torch.Tensor] = []
        for o, blk in enumerate(self.out_blocks):
            mul, d, b_off = blk[0], blk[1], blk[2]
            if mul == 0:
                continue
            terms = parts[o]
            if len(terms) == 0:
                y = x2.new_zeros((n, mul * d))
            else:
                y = terms[0]
                for t in terms[1:]:
                    y = y + t
            if b_off >= 0:
                y = y + self.bias[b_off: b_off + mul * d]
            outs.append(y)
        return torch.cat(outs, dim=-1) if len(outs) > 0 else x2.new_zeros((n, 0))

    def spec(self) -> Dict:
        out: Dict = {"irreps_in": str(self.irreps_in), "irreps_out": str(self.irreps_out), "biases": self.biases}
        if self.explicit_path_weights:
            out["path_weights"] = list(self.path_weights)
        return out

    @classmethod
    def from_spec(cls, spec: Dict) -> "Linear":
        return cls(spec["irreps_in"], spec["irreps_out"], spec.get("biases", False), spec.get("path_weights"))

    def extra_repr(self) -> str:
        return f"{self.irreps_in} -> {self.irreps_out}, weights={self.weight_numel}, bias={self.bias_numel}"

