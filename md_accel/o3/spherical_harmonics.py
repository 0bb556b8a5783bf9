"""Real spherical harmonics in e3nn's basis, written as plain (TorchScript-able) torch.

e3nn's real harmonics are the textbook real harmonics (no Condon-Shortley phase) with the polar
axis along y: ``Y_e3nn(x, y, z) = Y_std(x'=z, y'=x, z'=y)``. We evaluate them as homogeneous
polynomials: ``Y_lm = N_lm * Q_l^|m|(z', r^2) * {C_m, S_m}(x', y')`` with ``C_m + i S_m =
(x' + i y')^m`` and ``Q`` from the stable three-term recurrence of associated Legendre
polynomials divided by ``sin^m``. Polynomials are smooth everywhere, so autograd gives exact
derivatives of any order (forces, Hessians) with no singularity at the poles.
"""
from __future__ import annotations

import math
from typing import List

import torch

NORMALIZATIONS = ("integral", "component", "norm")


def _norm_factors(lmax: int, normalization: str) -> List[List[float]]:
    """``N_lm`` for m = 0..l such that the chosen normalisation holds."""
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    out: List[List[float]] = []
    for l in range(lmax + 1):
        row = []
        for m in range(l + 1):
            n = math.sqrt((2 * l + 1) / (4 * math.pi) * math.factorial(l - m) / math.factorial(l + m))
            if m > 0:
                n *= math.sqrt(2.0)
            if normalization == "component":
                n *= math.sqrt(4 * math.pi)
            elif normalization == "norm":
                n *= math.sqrt(4 * math.pi / (2 * l + 1))
            row.append(n)
        out.append(row)
    return out


def _double_factorial_odd(m: int) -> float:
    """(2m - 1)!!"""
    out = 1.0
    for k in range(1, 2 * m, 2):
        out *= k
    return out


def spherical_harmonics(
    vec: torch.Tensor, lmax: int, normalize: bool = True, normalization: str = "integral"
) -> torch.Tensor:
    """``[..., 3] -> [..., (lmax + 1)^2]``, equal to ``e3nn.o3.spherical_harmonics(range(lmax+1), ...)``."""
    if vec.shape[-1] != 3:
        raise ValueError(f"spherical_harmonics expects vectors of shape [..., 3], got {tuple(vec.shape)}")
    if lmax < 0:
        raise ValueError("lmax must be >= 0")
    if normalize:
        # e3nn's convention: normalise with the plain norm (zero vectors give NaN, as in e3nn)
        vec = vec / torch.linalg.norm(vec, dim=-1, keepdim=True)
    return _homogeneous_sh(vec, lmax, _norm_factors(lmax, normalization))


def _homogeneous_sh(vec: torch.Tensor, lmax: int, norms: List[List[float]]) -> torch.Tensor:
    # textbook frame: x' = z, y' = x, z' = y
    xs = vec[..., 2]
    ys = vec[..., 0]
    zs = vec[..., 1]
    r2 = xs * xs + ys * ys + zs * zs
    one = torch.ones_like(xs)
    # azimuthal parts C_m + i S_m = (x' + i y')^m
    cos_m = [one]
    sin_m = [torch.zeros_like(xs)]
    for m in range(1, lmax + 1):
        c, s = cos_m[m - 1], sin_m[m - 1]
        cos_m.append(c * xs - s * ys)
        sin_m.append(c * ys + s * xs)
    # Q[l][m] = P_l^m(z'/r) * r^l / sin^m, as a polynomial in z' and r^2
    q: List[List[torch.Tensor]] = [[one] for _ in range(lmax + 1)]
    for l in range(1, lmax + 1):
        q[l] = [one] * (l + 1)
    for m in range(lmax + 1):
        q[m][m] = one * _double_factorial_odd(m)
        if m + 1 <= lmax:
            q[m + 1][m] = (2 * m + 1) * zs * q[m][m]
        for l in range(m + 2, lmax + 1):
            q[l][m] = ((2 * l - 1) * zs * q[l - 1][m] - (l + m - 1) * r2 * q[l - 2][m]) / (l - m)
    blocks: List[torch.Tensor] = []
    for l in range(lmax + 1):
        comps: List[torch.Tensor] = []
        for m in range(-l, l + 1):
            a = abs(m)
            az = sin_m[a] if m < 0 else cos_m[a]
            comps.append(norms[l][a] * q[l][a] * az)
        blocks.append(torch.stack(comps, dim=-1))
    return torch.cat(blocks, dim=-1)


class SphericalHarmonics(torch.nn.Module):
    """Module form, with e3nn's arguments: ``SphericalHarmonics(lmax, normalize, normalization)``."""

    def __init__(self, lmax: int, normalize: bool = True, normalization: str = "integral"):
        super().__init__()
        if lmax < 0:
            raise ValueError("lmax must be >= 0")
        self.lmax = int(lmax)
        self.normalize = bool(normalize)
        self.normalization = normalization
        self._norms = _norm_factors(self.lmax, normalization)

    def forward(self, vec: torch.Tensor) -> torch.Tensor:
        if vec.shape[-1] != 3:
            raise ValueError("SphericalHarmonics expects vectors of shape [..., 3]")
        if self.normalize:
            vec = vec / torch.linalg.norm(vec, dim=-1, keepdim=True)
        return _homogeneous_sh(vec, self.lmax, self._norms)

    def extra_repr(self) -> str:
        return f"lmax={self.lmax}, normalize={self.normalize}, normalization={self.normalization!r}"
