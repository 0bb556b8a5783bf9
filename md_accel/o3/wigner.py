"""Clebsch-Gordan coefficients in the real spherical-harmonics basis of ``md_accel.o3``.

``wigner_3j(l1, l2, l3)`` is the O(3)-invariant tensor ``C[i, j, k]`` of unit Frobenius norm:
``sum_ijk C_ijk D1_ii' D2_jj' D3_kk' = C_i'j'k'`` for the real Wigner matrices of our harmonics.
It is built from the textbook complex Clebsch-Gordan coefficients (Racah's formula, exact
rational arithmetic) and the unitary map from complex to real harmonics. The overall sign of
each tensor follows e3nn's choice (e3nn's tensor products are the reference semantics): e3nn
keeps the phase ``(-i)^(l1 + l2 - l3)`` out of its real basis change, which we reproduce by the
phase factor below.
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import torch


def _su2_cg(j1: int, m1: int, j2: int, m2: int, j3: int, m3: int) -> float:
    """<j1 m1 j2 m2 | j3 m3> (Condon-Shortley), Racah's formula, integer spins."""
    if m3 != m1 + m2 or not (abs(j1 - j2) <= j3 <= j1 + j2):
        return 0.0
    if abs(m1) > j1 or abs(m2) > j2 or abs(m3) > j3:
        return 0.0
    f = math.factorial
    pre = Fraction((2 * j3 + 1) * f(j3 + j1 - j2) * f(j3 - j1 + j2) * f(j1 + j2 - j3), f(j1 + j2 + j3 + 1))
    pre *= Fraction(f(j3 + m3) * f(j3 - m3) * f(j1 - m1) * f(j1 + m1) * f(j2 - m2) * f(j2 + m2))
    total = Fraction(0)
    for k in range(0, j1 + j2 + j3 + 1):
        d = [k, j1 + j2 - j3 - k, j1 - m1 - k, j2 + m2 - k, j3 - j2 + m1 + k, j3 - j1 - m2 + k]
        if min(d) < 0:
            continue
        den = 1
        for x in d:
            den *= f(x)
        total += Fraction((-1) ** k, den)
    return float(math.copysign(math.sqrt(pre), 1.0) * total) if total != 0 else 0.0


def _complex_to_real(l: int) -> np.ndarray:
    """U with Y_real = U @ Y_complex (rows m = -l..l real, columns m = -l..l complex, CS phase)."""
    u = np.zeros((2 * l + 1, 2 * l + 1), dtype=np.complex128)
    s = 1 / math.sqrt(2)
    for m in range(-l, l + 1):
        r = m + l
        if m > 0:
            u[r, l - m] = s
            u[r, l + m] = s * (-1) ** m
        elif m < 0:
            u[r, l + m] = 1j * s
            u[r, l - m] = -1j * s * (-1) ** m
        else:
            u[r, l] = 1.0
    return u


@functools.lru_cache(maxsize=None)
def _wigner_3j_np(l1: int, l2: int, l3: int) -> np.ndarray:
    if not (abs(l1 - l2) <= l3 <= l1 + l2):
        raise ValueError(f"l3={l3} is not in the product of l1={l1} and l2={l2}")
    cg = np.zeros((2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1))
    for m1 in range(-l1, l1 + 1):
        for m2 in range(-l2, l2 + 1):
            m3 = m1 + m2
            if abs(m3) <= l3:
                cg[m1 + l1, m2 + l2, m3 + l3] = _su2_cg(l1, m1, l2, m2, l3, m3)
    u1, u2, u3 = _complex_to_real(l1), _complex_to_real(l2), _complex_to_real(l3)
    c = np.einsum("ai,bj,ck,ijk->abc", u1.conj(), u2.conj(), u3, cg)
    c = c * (-1j) ** (l1 + l2 - l3)  # e3nn's phase: makes the tensor real with e3nn's sign
    if np.abs(c.imag).max() > 1e-12:
        raise AssertionError("real-basis Clebsch-Gordan tensor is not real")
    c = c.real
    c[np.abs(c) < 1e-14] = 0.0
    return c / np.linalg.norm(c)


def wigner_3j(l1: int, l2: int, l3: int, dtype=torch.float64, device=None) -> torch.Tensor:
    """Real-basis Clebsch-Gordan tensor ``[2l1+1, 2l2+1, 2l3+1]`` with unit Frobenius norm."""
    return torch.tensor(_wigner_3j_np(int(l1), int(l2), int(l3)), dtype=dtype, device=device)
