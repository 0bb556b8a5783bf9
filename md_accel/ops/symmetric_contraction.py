"""MACE's symmetric contraction (the "product basis"), plain torch: the reference semantics.

For one output irrep (dimension ``D``) with correlation order ``nu_max``, input ``x[n, c, i]``
(``C`` channels, ``i`` running over the concatenated components of the input irreps, ``I`` in all)
and per-element weights ``W_nu[e, k, c]``:

    B_nu[n, c, d, i_1..i_nu] = sum_k U_nu[d, i_1..i_nu, k] * W_nu[species[n], k, c]
    out[n, c, d] = sum_{i_1} x_{i_1} (B_1 + sum_{i_2} x_{i_2} (B_2 + sum_{i_3} x_{i_3} (B_3 + ...)))

i.e. the sum over nu of ``U_nu . W_nu`` fully contracted with ``nu`` copies of ``x`` (the last
index of ``U`` first), written in Horner form. ``U_nu`` are the generalised Clebsch-Gordan
("coupling") tensors. They are taken as data: mace builds them from e3nn's Wigner 3j symbols
(``U_matrix_real``) or, when cuequivariance is installed and ``use_reduced_cg`` is set, from
cuequivariance's reduced basis, which has other shapes; the trained weights only make sense in
the basis they were trained in, so the converter copies ``U_matrix_{nu}`` from the checkpoint.

The top order is evaluated as one GEMM of ``z[n, c, (i, k)] = x[n, c, i] * W[species[n], k, c]``
against ``U`` viewed as ``[D * I^(nu-1), I * K]``, so the ``[N, C, D * I^nu]`` tensor that a naive
contraction materialises never exists. Everything is differentiable (to any order) by autograd.
"""

from typing import List, Optional, Sequence

import torch


class _Order(torch.nn.Module):
    """One correlation order of one output irrep: ``u [D, I, .., I, K]`` and ``w [E, K, C]``."""

    def __init__(self, u_shape: Sequence[int], num_elements: int, channels: int):
        super().__init__()
        self.register_buffer("u", torch.zeros(u_shape))
        self.w = torch.nn.Parameter(torch.zeros(num_elements, u_shape[-1], channels))

    def forward(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        """``[N, C, I] -> [N, C, D * I^(nu-1)]``: ``U . W`` contracted with ``x`` once."""
        n, c, i = x.shape
        k = self.w.shape[1]
        w = self.w.index_select(0, species).transpose(1, 2)  # [N, C, K]
        z = (x.unsqueeze(-1) * w.unsqueeze(2)).reshape(n, c, i * k)
        return torch.matmul(z, self.u.reshape(-1, i * k).t())


class _IrrepContraction(torch.nn.Module):
    """All correlation orders of one output irrep, highest first (Horner order)."""

    def __init__(self, dim_out: int, dim_in: int, num_params: Sequence[int], num_elements: int,
                 channels: int):
        super().__init__()
        orders = [
            _Order([dim_out] + [dim_in] * nu + [num_params[nu - 1]], num_elements, channels)
            for nu in range(len(num_params), 0, -1)
        ]
        self.orders = torch.nn.ModuleList(orders)

    def forward(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        """``[N, C, I] -> [N, C * D]`` (channel-major, e3nn's ``C x irrep`` layout)."""
        n, c, i = x.shape
        out: Optional[torch.Tensor] = None
        for order in self.orders:
            t = order(x, species)
            if out is not None:
                t = t + torch.matmul(out.reshape(n, c, -1, i), x.unsqueeze(-1)).squeeze(-1)
            out = t
        assert out is not None
        return out.reshape(n, -1)


class SymmetricContraction(torch.nn.Module):
    """``x [N, C * I] (e3nn layout) , species [N] -> [N, sum_r C * D_r]`` (e3nn layout).

    ``in_dims``: ``2l+1`` of each input irrep block, in order (all blocks have ``channels``
    copies, as in mace: e.g. ``[1, 3, 5, 7]`` for ``Cx0e+Cx1o+Cx2e+Cx3o``). ``out_dims``: ``2l+1``
    of each output irrep. ``num_params[r][nu-1]``: number of coupling paths ``K`` of output ``r``
    at order ``nu`` (its correlation is ``len(num_params[r])``). Buffers/parameters are zero
    until loaded: ``contractions.{r}.orders.{j}.u`` / ``.w`` hold order ``nu = correlation - j``.
    """

    def __init__(self, in_dims: Sequence[int], out_dims: Sequence[int], channels: int,
                 num_elements: int, num_params: Sequence[Sequence[int]]):
        super().__init__()
        if len(out_dims) != len(num_params):
            raise ValueError(f"{len(out_dims)} output irreps but {len(num_params)} num_params")
        self.in_dims: List[int] = [int(d) for d in in_dims]
        self.out_dims: List[int] = [int(d) for d in out_dims]
        self.channels = int(channels)
        dim_in = sum(self.in_dims)
        self.contractions = torch.nn.ModuleList([
            _IrrepContraction(d, dim_in, p, num_elements, channels)
            for d, p in zip(self.out_dims, num_params)
        ])

    @classmethod
    def from_tensors(cls, in_dims: Sequence[int], u: Sequence[Sequence[torch.Tensor]],
                     w: Sequence[Sequence[torch.Tensor]]) -> "SymmetricContraction":
        """Build from coupling tensors ``u[r][nu-1]`` (``[D_r, I, .., I, K]``; a missing leading
        ``D = 1`` axis is added) and weights ``w[r][nu-1]`` (``[E, K, C]``)."""
        u = [[t if t.dim() == nu + 2 else t.unsqueeze(0) for nu, t in enumerate(ur, start=1)]
             for ur in u]
        num_elements, _, channels = w[0][0].shape
        module = cls(in_dims, [ur[0].shape[0] for ur in u], channels, num_elements,
                     [[t.shape[-1] for t in ur] for ur in u])
        dtype = w[0][0].dtype
        with torch.no_grad():
            for contraction, ur, wr in zip(module.contractions, u, w):
                for order, ut, wt in zip(contraction.orders, reversed(ur), reversed(wr)):
                    order.u = ut.detach().to(dtype).clone()
                    order.w.data = wt.detach().clone()
        return module

    def forward(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        blocks = torch.split(x, [self.channels * d for d in self.in_dims], dim=1)
        xs = torch.cat([b.reshape(n, self.channels, d) for b, d in zip(blocks, self.in_dims)],
                       dim=2)
        return torch.cat([c(xs, species) for c in self.contractions], dim=1)
