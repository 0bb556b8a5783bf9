"""Problem description of the 'uvu' tensor-product convolution, and its lowering to the PLAN
tensors that the reference and the CUDA kernels read (see docs/architecture.md).

Normalisation follows e3nn's ``TensorProduct`` (``irrep_normalization`` in component/norm/none,
``path_normalization`` in element/path/none, optional per-instruction ``path_weight``); the
coefficients are folded into the Clebsch-Gordan values so kernels see one constant per non-zero.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import torch

from ..o3 import Irreps
from ..o3.wigner import wigner_3j

# columns of the ``paths`` table
PATH_FIELDS = ("in1_off", "mul", "l1", "in2_off", "l2", "out_off", "l3", "w_off", "w_stride")


@dataclass(frozen=True)
class Instruction:
    i_in1: int
    i_in2: int
    i_out: int
    connection_mode: str = "uvu"
    has_weight: bool = True
    path_weight: float = 1.0

    @classmethod
    def parse(cls, ins) -> "Instruction":
        if isinstance(ins, Instruction):
            return ins
        ins = tuple(ins)
        if len(ins) == 5:
            return cls(int(ins[0]), int(ins[1]), int(ins[2]), str(ins[3]), bool(ins[4]))
        if len(ins) == 6:
            return cls(int(ins[0]), int(ins[1]), int(ins[2]), str(ins[3]), bool(ins[4]), float(ins[5]))
        raise ValueError(f"instruction must be (i_in1, i_in2, i_out, mode, has_weight[, path_weight]), got {ins}")


@dataclass(frozen=True)
class TPProblem:
    irreps_in1: Irreps
    irreps_in2: Irreps
    irreps_out: Irreps
    instructions: Tuple[Instruction, ...]
    irrep_normalization: str = "component"
    path_normalization: str = "element"
    _checked: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def create(
        cls,
        irreps_in1,
        irreps_in2,
        irreps_out,
        instructions: Sequence,
        irrep_normalization: str = "component",
        path_normalization: str = "element",
    ) -> "TPProblem":
        p = cls(
            Irreps(irreps_in1),
            Irreps(irreps_in2),
            Irreps(irreps_out),
            tuple(Instruction.parse(i) for i in instructions),
            irrep_normalization,
            path_normalization,
        )
        p.validate()
        return p

    @classmethod
    def all_uvu(cls, irreps_in1, irreps_in2, lmax_out: int, parity_filter: bool = False) -> "TPProblem":
        """Every 'uvu' path with l_out <= lmax_out, one output block per instruction (with
        ``parity_filter`` only outputs of parity (-1)^l, as MACE's target irreps): the problems of the
        kernel tests and of the code generators' command lines."""
        i1, i2 = Irreps(irreps_in1), Irreps(irreps_in2)
        out, ins = [], []
        for a, m1 in enumerate(i1):
            for b, m2 in enumerate(i2):
                p = m1.ir.p * m2.ir.p
                for l3 in range(abs(m1.ir.l - m2.ir.l), min(m1.ir.l + m2.ir.l, lmax_out) + 1):
                    if parity_filter and (-1) ** l3 != p:
                        continue
                    ins.append((a, b, len(out), "uvu", True))
                    out.append(f"{m1.mul}x{l3}{'e' if p == 1 else 'o'}")
        return cls.create(i1, i2, "+".join(out), ins)

    def validate(self) -> None:
        if self.irrep_normalization not in ("component", "norm", "none"):
            raise ValueError(f"irrep_normalization must be component/norm/none, got {self.irrep_normalization!r}")
        if self.path_normalization not in ("element", "path", "none"):
            raise ValueError(f"path_normalization must be element/path/none, got {self.path_normalization!r}")
        for ins in self.instructions:
            for i, irreps, name in (
                (ins.i_in1, self.irreps_in1, "i_in1"),
                (ins.i_in2, self.irreps_in2, "i_in2"),
                (ins.i_out, self.irreps_out, "i_out"),
            ):
                if not 0 <= i < len(irreps):
                    raise ValueError(f"instruction {ins}: {name}={i} out of range for {irreps}")
            if ins.connection_mode != "uvu":
                raise NotImplementedError(f"only 'uvu' instructions are supported, got {ins.connection_mode!r}")
            if not ins.has_weight:
                raise NotImplementedError("TensorProductConv needs per-edge weights on every path")
            m1, m2, mo = self.irreps_in1[ins.i_in1], self.irreps_in2[ins.i_in2], self.irreps_out[ins.i_out]
            if mo.mul != m1.mul:
                raise ValueError(f"instruction {ins}: 'uvu' needs mul_out == mul_in1 ({mo.mul} != {m1.mul})")
            if m1.ir.p * m2.ir.p != mo.ir.p or not abs(m1.ir.l - m2.ir.l) <= mo.ir.l <= m1.ir.l + m2.ir.l:
                raise ValueError(f"instruction {ins}: {m1.ir} x {m2.ir} does not contain {mo.ir}")

    # --- normalisation (e3nn TensorProduct semantics, unit input/output variances) -------------
    def _num_elements(self, ins: Instruction) -> int:
        return self.irreps_in2[ins.i_in2].mul  # 'uvu'

    def path_coefficients(self) -> List[float]:
        coeffs = []
        for ins in self.instructions:
            m1, m2, mo = self.irreps_in1[ins.i_in1], self.irreps_in2[ins.i_in2], self.irreps_out[ins.i_out]
            alpha = {"component": mo.ir.dim, "norm": m1.ir.dim * m2.ir.dim, "none": 1}[self.irrep_normalization]
            if self.path_normalization == "element":
                x = sum(self._num_elements(i) for i in self.instructions if i.i_out == ins.i_out)
            elif self.path_normalization == "path":
                x = self._num_elements(ins) * sum(1 for i in self.instructions if i.i_out == ins.i_out)
            else:
                x = 1
            if x > 0:
                alpha /= x
            alpha *= ins.path_weight
            coeffs.append(math.sqrt(alpha))
        return coeffs

    @property
    def weight_numel(self) -> int:
        return sum(self.irreps_in1[i.i_in1].mul * self.irreps_in2[i.i_in2].mul for i in self.instructions)

    def key(self) -> str:
        """Stable hash of the problem (cache key for generated kernels)."""
        text = repr((str(self.irreps_in1), str(self.irreps_in2), str(self.irreps_out), self.instructions,
                     self.irrep_normalization, self.path_normalization))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # --- lowering ------------------------------------------------------------------------------
    def lower(self) -> "Plan":
        """Paths table and non-zero CG coefficients; an in2 multiplicity V > 1 becomes V paths."""
        off1, off2, offo = self.irreps_in1.offsets(), self.irreps_in2.offsets(), self.irreps_out.offsets()
        paths: List[List[int]] = []
        cg_ptr = [0]
        cg_idx: List[List[int]] = []
        cg_val: List[float] = []
        dense: List[torch.Tensor] = []
        w_off = 0
        for ins, coeff in zip(self.instructions, self.path_coefficients()):
            m1, m2, mo = self.irreps_in1[ins.i_in1], self.irreps_in2[ins.i_in2], self.irreps_out[ins.i_out]
            c = wigner_3j(m1.ir.l, m2.ir.l, mo.ir.l) * coeff
            nz = torch.nonzero(c).tolist()
            for v in range(m2.mul):
                paths.append([off1[ins.i_in1], m1.mul, m1.ir.l, off2[ins.i_in2] + v * m2.ir.dim, m2.ir.l,
                              offo[ins.i_out], mo.ir.l, w_off + v, m2.mul])
                for i, j, k in nz:
                    cg_idx.append([i, j, k])
                    cg_val.append(float(c[i, j, k]))
                cg_ptr.append(len(cg_idx))
                dense.append(c)
            w_off += m1.mul * m2.mul
        return Plan(
            paths=torch.tensor(paths, dtype=torch.int32).reshape(-1, len(PATH_FIELDS)),
            cg_ptr=torch.tensor(cg_ptr, dtype=torch.int32),
            cg_idx=torch.tensor(cg_idx, dtype=torch.int32).reshape(-1, 3),
            cg_val=torch.tensor(cg_val, dtype=torch.float64),
            dense=dense,
            dim_in1=self.irreps_in1.dim,
            dim_in2=self.irreps_in2.dim,
            dim_out=self.irreps_out.dim,
            weight_numel=w_off,
        )


@dataclass
class Plan:
    paths: torch.Tensor  # int32 [P, 9], columns PATH_FIELDS
    cg_ptr: torch.Tensor  # int32 [P + 1]
    cg_idx: torch.Tensor  # int32 [nnz, 3]
    cg_val: torch.Tensor  # float64 [nnz]
    dense: List[torch.Tensor]  # per path [2l1+1, 2l2+1, 2l3+1], coefficient folded in (reference)
    dim_in1: int
    dim_in2: int
    dim_out: int
    weight_numel: int
