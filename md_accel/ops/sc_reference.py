"""Sparse specification of MACE's symmetric contraction, and its plain-torch reference.

**Term list** (``lower``). The coupling tensors ``U_nu[d, i_1..i_nu, k]`` of every output irrep
``r`` are only ever contracted with ``nu`` copies of the same ``x``, so only their symmetrisation
over ``i_1..i_nu`` matters: for each monomial ``x_{i_1} .. x_{i_nu}`` (``i_1 <= .. <= i_nu``) the
U entries of all its index permutations are summed, and the non-zero sums are kept as terms
``(o, k, i_1..i_nu, value)``. ``o`` numbers the output components of all irreps in order
(``o = sum_{r' < r} D_r' + d``), ``k`` the weight columns of all (irrep, order) pairs in the
module's storage order (irrep-major, orders highest first). Then, with ``W [E, K, C]`` the
concatenated weights, ``s = species[n]``:

    out[n, c, o] = sum_{terms (o, k, i.., v)} v * W[s, k, c] * x[n, c, i_1] * .. * x[n, c, i_nu]

``terms`` is int32 ``[T, 2 + nu_max]`` (``-1`` pads lower orders), ``values`` float64 ``[T]``,
sorted by ``(k, o, i..)``. ``x`` and ``out`` are in e3nn's layout ``[N, C * I]`` / ``[N, C * O]``
(blocks of ``C x (2l+1)``, ``in_dims`` / ``out_dims`` give the ``2l+1``).

**Reference** (``sc_fwd_ref``): the distinct monomials ``M[n, c, m]`` of the terms, one dense
coefficient matrix ``A[m, g]`` over groups ``g = (o, k)``, ``P = M A``, then
``out_o = sum_{g: o_g = o} W[s, k_g, c] P_g`` -- scriptable, differentiable by autograd to any
order, device-agnostic; sums over nodes and columns are matmuls (deterministic).

**Gradients** (the kernels' specification). ``F = <grad_out, out>`` is a polynomial in ``x``,
linear in ``W``. With ``g_g = grad_out[o_g]`` and ``w_g = W[s, k_g]``:
``grad_W[e, k] = sum_{n: s = e} sum_{g: k_g = k} g_g P_g``,
``grad_x = sum_g g_g w_g dP_g/dx``. For the double backward with incoming ``(h, V)`` (the
gradients of ``grad_x`` and ``grad_W``), ``DP_g = dP_g/dx . h``:
``g_grad_out[o] = sum_{g: o} (w_g DP_g + V_g P_g)``,
``g_W[e, k] = sum_{n: s = e} sum_{g: k} g_g DP_g``,
``g_x = sum_g g_g (w_g d(DP_g)/dx + V_g dP_g/dx)``.
Monomial derivatives are taken position by position (``d/dx_{i_j}`` of ``prod_l x_{i_l}`` is
``prod_{l != j} x_{i_l}``, added to column ``i_j``), which handles repeated indices.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch


# --- the term list ------------------------------------------------------------------------------

def lower(in_dims: Sequence[int], u: Sequence[Sequence[torch.Tensor]]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Term list of coupling tensors ``u[r][j]`` (``[D_r, I, ..(nu).., I, K]``, the module's
    storage order: ``j``-th order of irrep ``r``, any order of ``nu``). Returns
    ``(terms int32 [T, 2 + nu_max], values float64 [T])``.

    Symmetrised sums that cancel to rounding (``|v| <= 8 eps |entries summed|``, eps of U's
    dtype) are dropped."""
    num_in = sum(int(d) for d in in_dims)
    blocks = []
    nu_max = max((t.dim() - 2 for ur in u for t in ur), default=1)
    o_base = k_base = 0
    for ur in u:
        dim_out = int(ur[0].shape[0]) if ur else 0
        for t in ur:
            nu = t.dim() - 2
            if t.shape[0] != dim_out or any(int(s) != num_in for s in t.shape[1:-1]):
                raise ValueError(f"coupling tensor of shape {tuple(t.shape)}: expected [{dim_out}, "
                                 f"{num_in} x {nu}, K]")
            k = int(t.shape[-1])
            t64 = t.detach().to("cpu", torch.float64)
            nz = t64.nonzero()
            if nz.shape[0] > 0:
                vals = t64[tuple(nz.t())]
                mono = nz[:, 1:1 + nu].sort(dim=1).values
                pad = torch.full((nz.shape[0], nu_max - nu), -1, dtype=torch.int64)
                key = torch.cat([nz[:, -1:] + k_base, nz[:, :1] + o_base, mono, pad], dim=1)
                uniq, inv = torch.unique(key, dim=0, return_inverse=True)
                sums = torch.zeros(uniq.shape[0], dtype=torch.float64).index_add_(0, inv, vals)
                mags = torch.zeros(uniq.shape[0], dtype=torch.float64).index_add_(0, inv, vals.abs())
                keep = sums.abs() > 8 * torch.finfo(t.dtype).eps * mags
                blocks.append((uniq[keep], sums[keep]))
            k_base += k
        o_base += dim_out
    if not blocks:
        return torch.zeros((0, 2 + nu_max), dtype=torch.int32), torch.zeros(0, dtype=torch.float64)
    # each block is sorted by (k, o, i..) and blocks follow k: the concatenation is sorted
    keys = torch.cat([b[0] for b in blocks])
    vals = torch.cat([b[1] for b in blocks])
    terms = torch.cat([keys[:, 1:2], keys[:, 0:1], keys[:, 2:]], dim=1)  # (o, k, i..)
    return terms.to(torch.int32).contiguous(), vals.contiguous()


def reference_tables(terms: torch.Tensor, values: torch.Tensor, num_in: int, num_out: int,
                     num_k: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference's tables from a term list: ``mono [M, nu_max]`` int64 (distinct monomials;
    ``num_in`` pads: a constant-one column), ``coeff [M, G]`` float64, ``group_k [G]`` int64 and
    ``group_sel [G, O]`` float64 (one-hot of ``o_g``), over the groups ``g = (o, k)``."""
    terms = terms.to("cpu", torch.int64)
    values = values.to("cpu", torch.float64)
    nu_max = terms.shape[1] - 2
    if terms.shape[0] and (int(terms[:, 0].max()) >= num_out or int(terms[:, 1].max()) >= num_k
                           or int(terms[:, 2:].max()) >= num_in or int(terms[:, :3].min()) < 0):
        raise ValueError(f"term list out of range for {num_in} inputs, {num_out} outputs, {num_k} weights")
    idx = torch.where(terms[:, 2:] < 0, torch.full_like(terms[:, 2:], num_in), terms[:, 2:])
    mono, m_of = torch.unique(idx.reshape(-1, nu_max), dim=0, return_inverse=True)
    groups, g_of = torch.unique(terms[:, :2], dim=0, return_inverse=True)
    coeff = torch.zeros(mono.shape[0], groups.shape[0], dtype=torch.float64)
    coeff.index_put_((m_of, g_of), values, accumulate=True)
    sel = torch.nn.functional.one_hot(groups[:, 0], num_out).to(torch.float64)
    return mono.contiguous(), coeff, groups[:, 1].contiguous(), sel


# --- layouts ------------------------------------------------------------------------------------

def components(x: torch.Tensor, dims: List[int]) -> torch.Tensor:
    """e3nn layout ``[N, C * sum(dims)]`` -> ``[N, C, sum(dims)]``."""
    n = x.shape[0]
    total = 0
    for d in dims:
        total += d
    c = x.shape[1] // total
    sizes: List[int] = []
    for d in dims:
        sizes.append(c * d)
    parts: List[torch.Tensor] = []
    for b, d in zip(torch.split(x, sizes, dim=1), dims):
        parts.append(b.reshape(n, c, d))
    return torch.cat(parts, dim=2)


def layout(y: torch.Tensor, dims: List[int]) -> torch.Tensor:
    """``[N, C, sum(dims)]`` -> e3nn layout ``[N, C * sum(dims)]``."""
    n, c = y.shape[0], y.shape[1]
    parts: List[torch.Tensor] = []
    for b, d in zip(torch.split(y, dims, dim=2), dims):
        parts.append(b.reshape(n, c * d))
    return torch.cat(parts, dim=1)


def _factors(xs: torch.Tensor, mono: torch.Tensor, pad: float) -> List[torch.Tensor]:
    """``[xs_pad[..., mono[:, j]] for j]`` with ``xs_pad`` = ``xs`` plus a constant column."""
    n, c = xs.shape[0], xs.shape[1]
    xp = torch.cat([xs, torch.full((n, c, 1), pad, dtype=xs.dtype, device=xs.device)], dim=2)
    out: List[torch.Tensor] = []
    for j in range(mono.shape[1]):
        out.append(xp.index_select(2, mono[:, j]))
    return out


def _prod(f: List[torch.Tensor], skip: List[int]) -> torch.Tensor:
    """Product of the factors except positions ``skip`` (ones when none is left)."""
    out = torch.ones_like(f[0])
    for j in range(len(f)):
        if j not in skip:
            out = out * f[j]
    return out


def _gathered(w: torch.Tensor, species: torch.Tensor, group_k: torch.Tensor) -> torch.Tensor:
    """``W[species[n], k_g, c]`` as ``[N, C, G]``."""
    return w.index_select(0, species).index_select(1, group_k).transpose(1, 2)


# --- forward, backward, double backward -----------------------------------------------------------

def sc_fwd_ref(x: torch.Tensor, species: torch.Tensor, w: torch.Tensor, mono: torch.Tensor, coeff: torch.Tensor,
               group_k: torch.Tensor, group_sel: torch.Tensor, in_dims: List[int], out_dims: List[int]) -> torch.Tensor:
    """``out [N, C * O]`` (e3nn layout) of ``x [N, C * I]``, ``W [E, K, C]``."""
    f = _factors(components(x, in_dims), mono, 1.0)
    p = torch.matmul(_prod(f, []), coeff)
    return layout(torch.matmul(p * _gathered(w, species, group_k), group_sel), out_dims)


def _per_element(q: torch.Tensor, species: torch.Tensor, group_k: torch.Tensor, num_elements: int,
                 num_k: int) -> torch.Tensor:
    """``sum_{n: species = e} sum_{g: k_g = k} q[n, c, g]`` as ``[E, K, C]`` (matmuls only)."""
    n, c = q.shape[0], q.shape[1]
    qk = torch.matmul(q, torch.nn.functional.one_hot(group_k, num_k).to(q.dtype))  # [N, C, K]
    onehot = torch.nn.functional.one_hot(species, num_elements).to(q.dtype)       # [N, E]
    return torch.matmul(onehot.t(), qk.reshape(n, c * num_k)).reshape(num_elements, c, num_k).transpose(1, 2)


def _scatter(parts: List[torch.Tensor], mono: torch.Tensor, num_in: int) -> torch.Tensor:
    """``sum_j parts[j]`` added into column ``mono[:, j]`` of ``[N, C, num_in]`` (pad dropped)."""
    out = torch.zeros(parts[0].shape[0], parts[0].shape[1], num_in + 1, dtype=parts[0].dtype,
                      device=parts[0].device)
    for j in range(len(parts)):
        onehot = torch.nn.functional.one_hot(mono[:, j], num_in + 1).to(out.dtype)
        out = out + torch.matmul(parts[j], onehot)
    return out[:, :, :num_in]


def sc_bwd_ref(grad_out: torch.Tensor, x: torch.Tensor, species: torch.Tensor, w: torch.Tensor, mono: torch.Tensor,
               coeff: torch.Tensor, group_k: torch.Tensor, group_sel: torch.Tensor, in_dims: List[int],
               out_dims: List[int], need_w: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(grad_x, grad_W)``; ``grad_W`` is zeros when ``need_w`` is False."""
    num_in = sum(in_dims)
    f = _factors(components(x, in_dims), mono, 1.0)
    gg = torch.matmul(components(grad_out, out_dims), group_sel.t())  # [N, C, G]
    cm = torch.matmul(gg * _gathered(w, species, group_k), coeff.t())  # [N, C, M]
    parts = [cm * _prod(f, [j]) for j in range(len(f))]
    grad_x = layout(_scatter(parts, mono, num_in), in_dims)
    if not need_w:
        return grad_x, torch.zeros_like(w)
    p = torch.matmul(_prod(f, []), coeff)
    return grad_x, _per_element(gg * p, species, group_k, w.shape[0], w.shape[1])


def sc_dbwd_ref(gg_x: torch.Tensor, gg_w: torch.Tensor, grad_out: torch.Tensor, x: torch.Tensor,
                species: torch.Tensor, w: torch.Tensor, mono: torch.Tensor, coeff: torch.Tensor,
                group_k: torch.Tensor, group_sel: torch.Tensor, in_dims: List[int],
                out_dims: List[int]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(g_grad_out, g_x, g_W)``: gradients of ``<gg_x, grad_x> + <gg_w, grad_W>``."""
    num_in = sum(in_dims)
    f = _factors(components(x, in_dims), mono, 1.0)
    hf = _factors(components(gg_x, in_dims), mono, 0.0)
    nu = len(f)
    m = _prod(f, [])
    dm = torch.zeros_like(m)
    for j in range(nu):
        dm = dm + hf[j] * _prod(f, [j])
    p, dp = torch.matmul(m, coeff), torch.matmul(dm, coeff)
    wg, vg = _gathered(w, species, group_k), _gathered(gg_w, species, group_k)
    g_grad_out = layout(torch.matmul(wg * dp + vg * p, group_sel), out_dims)
    gg = torch.matmul(components(grad_out, out_dims), group_sel.t())
    c1, c2 = torch.matmul(gg * wg, coeff.t()), torch.matmul(gg * vg, coeff.t())
    parts: List[torch.Tensor] = []
    for j in range(nu):
        ddm = torch.zeros_like(m)
        for i in range(nu):
            if i != j:
                ddm = ddm + hf[i] * _prod(f, [i, j])
        parts.append(c1 * ddm + c2 * _prod(f, [j]))
    g_x = layout(_scatter(parts, mono, num_in), in_dims)
    return g_grad_out, g_x, _per_element(gg * dp, species, group_k, w.shape[0], w.shape[1])
