"""Reading e3nn modules of a source model (whatever e3nn version or packaged copy made them)."""
from typing import Dict, Tuple, Type

import torch

from ..model.linear import linear_instructions
from ..o3 import Irreps


def irreps_of(irreps) -> Irreps:
    """md_accel irreps from an e3nn ``Irreps`` (installed or packaged copy)."""
    return Irreps([(int(mul), (int(ir.l), int(ir.p))) for mul, ir in irreps])


def linear_of(lin, unsupported: Type[Exception]) -> Tuple[Dict, torch.Tensor]:
    """e3nn ``o3.Linear`` without biases -> md_accel ``Linear`` spec and its float64 weight.
    Anything else (biases, non-default instructions, another layout) raises ``unsupported``."""
    if type(lin).__name__ != "Linear" or not hasattr(lin, "instructions"):
        raise unsupported(f"linear map {type(lin).__name__} (not an e3nn Linear; cueq layout?)")
    irreps_in, irreps_out = irreps_of(lin.irreps_in), irreps_of(lin.irreps_out)
    if lin.bias.numel() != 0:
        raise unsupported("e3nn Linear with biases")
    ins = linear_instructions(irreps_in, irreps_out)
    if len(ins) != len(lin.instructions) or not all(
            e.i_in == i and e.i_out == o and abs(e.path_weight - pw) <= 1e-15 * pw
            for (i, o, pw), e in zip(ins, lin.instructions)):
        raise unsupported(f"e3nn Linear {lin} with non-default instructions")
    spec = {"irreps_in": str(irreps_in), "irreps_out": str(irreps_out), "biases": False}
    return spec, lin.weight.detach().to(torch.float64).clone()
