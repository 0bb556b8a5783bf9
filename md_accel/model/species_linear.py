"""Equivariant linear map whose weights depend on the node's species.

NequIP's self-connection is a fully connected tensor product of the node features with the
(dense, learned) type embedding. The embedding is constant per species, so the product is one
e3nn-style ``Linear`` per species: ``W_s[u, w] = sum_v W[u, v, w] * emb[s, v]``, precomputed
by the converter. Instructions, path weights and the per-species weight layout are those of
``Linear``.

On CUDA ``forward_species`` runs the fused ``md_accel::species_linear_fwd`` op (nodes grouped by
species, each species' weights read once per tile of nodes); elsewhere the reference below,
which gathers each node's weight row.
"""
from typing import Dict, List, Optional, Sequence

import torch

from ..ops import _sl_ops  # noqa: F401  (registers torch.ops.md_accel.species_linear_*)
from .linear import Linear


class SpeciesLinear(Linear):
    """``out[n] = Linear_{species[n]}(x[n])``; ``weight`` is ``[num_species, weight_numel]``
    (row ``s`` in ``Linear``'s flat layout). No biases."""

    def __init__(self, irreps_in, irreps_out, num_species: int, path_weights: Optional[Sequence[float]] = None):
        super().__init__(irreps_in, irreps_out, False, path_weights)
        self.num_species = int(num_species)
        self.weight = torch.nn.Parameter(torch.randn(self.num_species, self.weight_numel))

    def forward_species(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            order = torch.argsort(species, stable=True)
            return torch.ops.md_accel.species_linear_fwd(x.contiguous(), self.weight, species, order, self.op_ins,
                                                         self.path_weights, self.dim_out)
        return self.forward_species_reference(x, species)

    def forward_species_reference(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        """Gather each node's weight row, then one batched product per instruction."""
        n = x.shape[0]
        w_all = self.weight.index_select(0, species)
        parts: List[List[torch.Tensor]] = [[] for _ in range(len(self.out_blocks))]
        blocks = torch.split(x, self.in_sizes, dim=-1)
        for k, ins in enumerate(self.ins):
            i, mul_in, o, mul_out, d, w_off = ins[0], ins[1], ins[2], ins[3], ins[4], ins[5]
            if mul_in == 0 or mul_out == 0:
                continue
            w = w_all[:, w_off: w_off + mul_in * mul_out].view(n, mul_in, mul_out)
            xb = blocks[i].reshape(n, mul_in, d)
            y = torch.einsum("nuw,nui->nwi", w, xb) * self.path_weights[k]
            parts[o].append(y.reshape(n, mul_out * d))
        outs: List[torch.Tensor] = []
        for o, blk in enumerate(self.out_blocks):
            mul, d = blk[0], blk[1]
            if mul == 0:
                continue
            terms = parts[o]
            if len(terms) == 0:
                outs.append(x.new_zeros((n, mul * d)))
                continue
            y = terms[0]
            for t in terms[1:]:
                y = y + t
            outs.append(y)
        return torch.cat(outs, dim=-1) if len(outs) > 0 else x.new_zeros((n, 0))

    def spec(self) -> Dict:
        out = super().spec()
        out.pop("biases")
        out["num_species"] = self.num_species
        return out

    @classmethod
    def from_spec(cls, spec: Dict) -> "SpeciesLinear":
        return cls(spec["irreps_in"], spec["irreps_out"], spec["num_species"], spec.get("path_weights"))
