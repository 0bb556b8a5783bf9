"""Irreducible representations of O(3) and their direct sums, in e3nn's notation ("16x0e+8x1o").

Only what md_accel needs: parsing, printing, dimensions and offsets. The layout of a feature
vector is e3nn's (see docs/architecture.md).
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator, List, NamedTuple, Tuple, Union

_IRREP_RE = re.compile(r"^\s*(\d+)\s*([eo])\s*$")
_MUL_IRREP_RE = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(\d+\s*[eo])\s*$")


class Irrep(NamedTuple):
    """Degree ``l`` and parity ``p`` (+1 even, -1 odd)."""

    l: int
    p: int

    @classmethod
    def parse(cls, text: Union[str, "Irrep", Tuple[int, int]]) -> "Irrep":
        if isinstance(text, Irrep):
            return text
        if isinstance(text, tuple):
            return cls(int(text[0]), int(text[1]))
        m = _IRREP_RE.match(text)
        if m is None:
            raise ValueError(f"cannot parse irrep {text!r} (expected e.g. '1o' or '2e')")
        return cls(int(m.group(1)), 1 if m.group(2) == "e" else -1)

    @property
    def dim(self) -> int:
        return 2 * self.l + 1

    def __str__(self) -> str:
        return f"{self.l}{'e' if self.p == 1 else 'o'}"

    def __mul__(self, other: "Irrep") -> Iterator["Irrep"]:
        """The irreps in the tensor product of two irreps (selection rules)."""
        p = self.p * other.p
        for l in range(abs(self.l - other.l), self.l + other.l + 1):
            yield Irrep(l, p)


class MulIrrep(NamedTuple):
    mul: int
    ir: Irrep

    @property
    def dim(self) -> int:
        return self.mul * self.ir.dim

    def __str__(self) -> str:
        return f"{self.mul}x{self.ir}"


class Irreps(tuple):
    """A direct sum of irreps with multiplicities, e.g. ``Irreps("32x0e+16x1o")``."""

    def __new__(cls, spec: Union[str, "Irreps", Iterable] = ()) -> "Irreps":
        if isinstance(spec, Irreps):
            return super().__new__(cls, spec)
        items: List[MulIrrep] = []
        if isinstance(spec, str):
            if spec.strip():
                for part in spec.split("+"):
                    m = _MUL_IRREP_RE.match(part)
                    if m is None:
                        raise ValueError(f"cannot parse irreps {spec!r} at {part!r}")
                    items.append(MulIrrep(int(m.group(1) or 1), Irrep.parse(m.group(2))))
        else:
            for entry in spec:
                if isinstance(entry, MulIrrep):
                    items.append(entry)
                elif isinstance(entry, Irrep):
                    items.append(MulIrrep(1, entry))
                elif isinstance(entry, str):
                    items.append(MulIrrep(1, Irrep.parse(entry)))
                else:
                    mul, ir = entry
                    items.append(MulIrrep(int(mul), Irrep.parse(ir)))
        for item in items:
            if item.mul < 0 or item.ir.l < 0:
                raise ValueError(f"invalid irreps entry {item}")
        return super().__new__(cls, items)

    @classmethod
    def spherical_harmonics(cls, lmax: int, p: int = -1) -> "Irreps":
        """``1x0e + 1x1o + 1x2e + ...`` (parity ``p**l``)."""
        return cls([(1, (l, p**l)) for l in range(lmax + 1)])

    @property
    def dim(self) -> int:
        return sum(mi.dim for mi in self)

    @property
    def num_irreps(self) -> int:
        return sum(mi.mul for mi in self)

    @property
    def lmax(self) -> int:
        return max((mi.ir.l for mi in self), default=-1)

    def offsets(self) -> List[int]:
        """Start index of each block in the flat feature vector (plus the total at the end)."""
        out = [0]
        for mi in self:
            out.append(out[-1] + mi.dim)
        return out

    def simplify(self) -> "Irreps":
        """Merge consecutive blocks of the same irrep and drop empty ones."""
        out: List[MulIrrep] = []
        for mi in self:
            if mi.mul == 0:
                continue
            if out and out[-1].ir == mi.ir:
                out[-1] = MulIrrep(out[-1].mul + mi.mul, mi.ir)
            else:
                out.append(mi)
        return Irreps(out)

    def __add__(self, other) -> "Irreps":
        return Irreps(tuple(self) + tuple(Irreps(other)))

    def __str__(self) -> str:
        return "+".join(str(mi) for mi in self)

    def __repr__(self) -> str:
        return f"Irreps('{self}')"

    def __eq__(self, other) -> bool:
        try:
            return tuple(self) == tuple(Irreps(other))
        except (ValueError, TypeError):
            return False

    def __hash__(self) -> int:
        return hash(tuple(self))
