"""MACE's symmetric contraction (the "product basis") as an md_accel operator.

For one output irrep (dimension ``D``) with correlation order ``nu_max``, input ``x[n, c, i]``
(``C`` channels, ``i`` running over the concatenated components of the input irreps, ``I`` in all)
and per-element weights ``W_nu[e, k, c]``:

    out[n, c, d] = sum_nu sum_{i_1..i_nu, k} U_nu[d, i_1..i_nu, k] W_nu[species[n], k, c] x_{i_1} .. x_{i_nu}

``U_nu`` are the generalised Clebsch-Gordan ("coupling") tensors. They are taken as data: mace
builds them from e3nn's Wigner 3j symbols (``U_matrix_real``) or, with cuequivariance and
``use_reduced_cg``, from another basis with other shapes; the trained weights only make sense in
the basis they were trained in, so the converter copies ``U_matrix_{nu}`` from the checkpoint.

U is 99.5 % zeros for MACE-MP-0 and only its symmetrisation over the ``i`` indices matters, so
the module lowers it (at construction and whenever U is loaded) to a term list
(``sc_reference.lower``: the specification) and evaluates that: on CUDA with md_accel's kernels
(``torch.ops.md_accel.symmetric_contraction_fwd``, generated per term structure), elsewhere with
the plain-torch reference (``sc_reference.sc_fwd_ref``), which TorchScript exports and autograd
differentiates.
"""
from __future__ import annotations

import warnings
from typing import List, Sequence

import torch

from .sc_reference import lower, reference_tables, sc_fwd_ref


class _Order(torch.nn.Module):
    """One correlation order of one output irrep: ``u [D, I, .., I, K]`` and ``w [E, K, C]``."""

    def __init__(self, u_shape: Sequence[int], num_elements: int, channels: int):
        super().__init__()
        self.register_buffer("u", torch.zeros(u_shape))
        self.w = torch.nn.Parameter(torch.zeros(num_elements, u_shape[-1], channels))


class _IrrepContraction(torch.nn.Module):
    """All correlation orders of one output irrep, highest first."""

    def __init__(self, dim_out: int, dim_in: int, num_params: Sequence[int], num_elements: int,
                 channels: int):
        super().__init__()
        self.orders = torch.nn.ModuleList([
            _Order([dim_out] + [dim_in] * nu + [num_params[nu - 1]], num_elements, channels)
            for nu in range(len(num_params), 0, -1)
        ])


_SPECIALISE_WARNED: List[bool] = []


def _specialise(module: "SymmetricContraction") -> None:
    """Build/load the CUDA kernels generated for the module's term list (cached on disk); the
    generic kernels serve it when that is not possible, with a one-time warning saying why."""
    from . import _cuda, _sc_codegen

    if not _cuda.available():
        return
    try:
        _sc_codegen.specialise(module.in_dims, module.out_dims, module.num_k, module.sc_terms,
                               module.sc_values, module.sc_terms.device)
    except Exception as e:  # no nvcc at run time, unsupported toolchain, ...
        if not _SPECIALISE_WARNED:
            _SPECIALISE_WARNED.append(True)
            warnings.warn(f"md_accel: symmetric contraction on the generic CUDA kernels ({type(e).__name__}: {e})")


class SymmetricContraction(torch.nn.Module):
    """``x [N, C * I] (e3nn layout) , species [N] -> [N, sum_r C * D_r]`` (e3nn layout).

    ``in_dims``: ``2l+1`` of each input irrep block, in order (all blocks have ``channels``
    copies, as in mace: e.g. ``[1, 3, 5, 7]`` for ``Cx0e+Cx1o+Cx2e+Cx3o``). ``out_dims``: ``2l+1``
    of each output irrep. ``num_params[r][nu-1]``: number of coupling paths ``K`` of output ``r``
    at order ``nu`` (its correlation is ``len(num_params[r])``). Buffers/parameters are zero
    until loaded: ``contractions.{r}.orders.{j}.u`` / ``.w`` hold order ``nu = correlation - j``.
    The term tables (non-persistent buffers ``sc_*``, ``ref_*``) are rebuilt from ``u`` whenever
    the state dict is loaded; ``sc_values`` stays float64 whatever the module's dtype.
    """

    def __init__(self, in_dims: Sequence[int], out_dims: Sequence[int], channels: int,
                 num_elements: int, num_params: Sequence[Sequence[int]]):
        super().__init__()
        if len(out_dims) != len(num_params):
            raise ValueError(f"{len(out_dims)} output irreps but {len(num_params)} num_params")
        self.in_dims: List[int] = [int(d) for d in in_dims]
        self.out_dims: List[int] = [int(d) for d in out_dims]
        self.channels = int(channels)
        self.num_k = int(sum(int(k) for p in num_params for k in p))
        dim_in = sum(self.in_dims)
        self.contractions = torch.nn.ModuleList([
            _IrrepContraction(d, dim_in, p, num_elements, channels)
            for d, p in zip(self.out_dims, num_params)
        ])
        self._build_tables()
        self.register_load_state_dict_post_hook(SymmetricContraction._after_load)

    def _build_tables(self) -> None:
        """Term list and reference tables from the current ``u`` buffers."""
        u = [[o.u for o in c.orders] for c in self.contractions]
        terms, values = lower(self.in_dims, u)
        mono, coeff, group_k, group_sel = reference_tables(terms, values, sum(self.in_dims),
                                                           sum(self.out_dims), self.num_k)
        like = self.contractions[0].orders[0].u
        self.register_buffer("sc_terms", terms.to(like.device), persistent=False)
        self.register_buffer("sc_values", values.to(like.device), persistent=False)
        self.register_buffer("ref_mono", mono.to(like.device), persistent=False)
        self.register_buffer("ref_coeff", coeff.to(like.device, like.dtype), persistent=False)
        self.register_buffer("ref_group_k", group_k.to(like.device), persistent=False)
        self.register_buffer("ref_group_sel", group_sel.to(like.device, like.dtype), persistent=False)

    @staticmethod
    def _after_load(module: "SymmetricContraction", incompatible_keys) -> None:
        module._build_tables()
        if module.sc_terms.is_cuda:
            _specialise(module)

    def _apply(self, fn, recurse=True):
        values = self.sc_values  # float64 whatever the module's dtype: the kernels are keyed by it
        out = super()._apply(fn, recurse)
        self.sc_values = values.to(self.sc_terms.device)
        if self.sc_terms.is_cuda:
            _specialise(self)
        return out

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
        module._build_tables()
        return module

    def weights(self) -> torch.Tensor:
        """All weights as one ``[E, K, C]`` tensor, columns in the term list's ``k`` order."""
        ws: List[torch.Tensor] = []
        for c in self.contractions:
            for o in c.orders:
                ws.append(o.w)
        return torch.cat(ws, dim=1)

    def forward(self, x: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        w = self.weights()
        if x.is_cuda:
            return torch.ops.md_accel.symmetric_contraction_fwd(
                x.contiguous(), species, w, self.sc_terms, self.sc_values, self.in_dims, self.out_dims)
        return sc_fwd_ref(x, species, w, self.ref_mono, self.ref_coeff, self.ref_group_k, self.ref_group_sel,
                          self.in_dims, self.out_dims)
