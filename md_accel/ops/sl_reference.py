"""Plain-torch reference of the ``md_accel::species_linear_*`` ops (the specification; the CUDA
kernels in ``csrc/species_linear_kernels.cu`` must match it).

``out[n] = Linear_{species[n]}(x[n])`` in e3nn's ``Linear`` layout. The instruction table
``ins`` holds 6 integers per instruction ``(i_off, mul_in, o_off, mul_out, d, w_off)``: input
block ``x[:, i_off : i_off + mul_in*d]`` (multiplicity-major, ``d = 2l+1``), output block at
``o_off`` with ``mul_out`` channels, weights ``weight[s, w_off : w_off + mul_in*mul_out]`` as a
row-major ``[mul_in, mul_out]`` matrix, scaled by ``path_weights[k]``:

    out[n, o_off + w*d + i] += pw_k * sum_u weight[species[n], w_off + u*mul_out + w] * x[n, i_off + u*d + i]

Output columns no instruction writes are zero. Empty ``species`` and ``order`` stand for one
species (``weight`` ``[1, numel]``): ``Linear`` runs on CUDA as this op. ``bwd_x`` and ``bwd_w`` are the gradients of
``<g, fwd(x, W)>`` with respect to ``x`` and ``W``; together with ``fwd`` they are closed under
differentiation (see ``csrc/species_linear_ops.cpp``).
"""
from typing import List, Tuple

import torch


def instructions(ins: List[int]) -> List[List[int]]:
    """The flat table as rows ``[i_off, mul_in, o_off, mul_out, d, w_off]``."""
    if len(ins) % 6 != 0:
        raise ValueError("ins must hold 6 integers per instruction")
    return [list(ins[6 * k: 6 * k + 6]) for k in range(len(ins) // 6)]


def weight_numel(ins: List[int]) -> int:
    return max([r[5] + r[1] * r[3] for r in instructions(ins)] + [0])


def _species_groups(species: torch.Tensor, num_species: int, n: int) -> List[Tuple[int, torch.Tensor]]:
    """``(s, node indices of species s)`` for every species with nodes, of ``n`` nodes. An empty
    ``species`` with ``n > 0`` nodes means one species: a plain ``Linear`` (weight ``[1, numel]``)."""
    if species.numel() == 0 and n > 0:
        if num_species != 1:
            raise ValueError("without species the weight must have one row")
        return [(0, torch.arange(n, device=species.device))]
    if species.numel() > 0 and (int(species.min()) < 0 or int(species.max()) >= num_species):
        raise ValueError(f"species outside [0, {num_species})")
    order = torch.argsort(species, stable=True)
    counts = torch.bincount(species, minlength=num_species).tolist()
    return [(s, idx) for s, idx in enumerate(torch.split(order, counts)) if idx.numel() > 0]


def _apply(t: torch.Tensor, weight: torch.Tensor, species: torch.Tensor, ins: List[int], path_weights: List[float],
           dim: int, transpose: bool) -> torch.Tensor:
    """Each node's rows through its species' paths: x -> out, or (``transpose``) grad_out -> grad_x, the
    same weights read as [mi, mo] either way."""
    out = t.new_zeros((t.shape[0], dim))
    for s, idx in _species_groups(species, weight.shape[0], t.shape[0]):
        ts = t.index_select(0, idx)
        ys = t.new_zeros((idx.numel(), dim))
        for (i_off, mi, o_off, mo, d, w_off), pw in zip(instructions(ins), path_weights):
            if mi == 0 or mo == 0:
                continue
            w = weight[s, w_off: w_off + mi * mo].view(mi, mo)
            (a, ma), (b, mb) = ((o_off, mo), (i_off, mi)) if transpose else ((i_off, mi), (o_off, mo))
            block = ts[:, a: a + ma * d].reshape(-1, ma, d)
            y = torch.einsum("uw,nwi->nui", w, block) if transpose else torch.einsum("uw,nui->nwi", w, block)
            ys[:, b: b + mb * d] += pw * y.reshape(-1, mb * d)
        out.index_copy_(0, idx, ys)
    return out


def species_linear_fwd_ref(x: torch.Tensor, weight: torch.Tensor, species: torch.Tensor, ins: List[int],
                           path_weights: List[float], dim_out: int) -> torch.Tensor:
    return _apply(x, weight, species, ins, path_weights, dim_out, transpose=False)


def species_linear_bwd_x_ref(grad_out: torch.Tensor, weight: torch.Tensor, species: torch.Tensor, ins: List[int],
                             path_weights: List[float], dim_in: int) -> torch.Tensor:
    return _apply(grad_out, weight, species, ins, path_weights, dim_in, transpose=True)


def species_linear_bwd_w_ref(x: torch.Tensor, grad_out: torch.Tensor, species: torch.Tensor, ins: List[int],
                             path_weights: List[float], num_species: int) -> torch.Tensor:
    gw = x.new_zeros((num_species, weight_numel(ins)))
    for s, idx in _species_groups(species, num_species, x.shape[0]):
        xs, gs = x.index_select(0, idx), grad_out.index_select(0, idx)
        for (i_off, mi, o_off, mo, d, w_off), pw in zip(instructions(ins), path_weights):
            if mi == 0 or mo == 0:
                continue
            xb = xs[:, i_off: i_off + mi * d].reshape(-1, mi, d)
            gb = gs[:, o_off: o_off + mo * d].reshape(-1, mo, d)
            gw[s, w_off: w_off + mi * mo] = pw * torch.einsum("nui,nwi->uw", xb, gb).reshape(-1)
    return gw
