"""Converters from source checkpoints (SevenNet, NequIP, MACE) to md_accel potentials,
and the check that a converted potential reproduces its source before it is written."""
import os
from typing import Dict, Optional

import torch

from .verify import ConversionMismatch, compare_to_reference

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _family(source: str) -> str:
    """Which library a checkpoint file (by extension) or a model name belongs to."""
    from .mace import EXTENSIONS as MACE_EXTENSIONS
    from .nequip import COMPILED_EXTENSIONS as NEQUIP_COMPILED
    from .nequip import EXTENSIONS as NEQUIP_EXTENSIONS
    from .sevenn import KNOWN_MODELS, resolve_checkpoint

    if os.path.isfile(source):
        if source.endswith(NEQUIP_EXTENSIONS + NEQUIP_COMPILED):
            return "nequip"
        if source.endswith(".pth"):
            return "sevenn"
        if source.endswith(MACE_EXTENSIONS):
            return "mace"
    else:
        try:
            resolve_checkpoint(source)
            return "sevenn"
        except ValueError:
            pass
    raise ValueError(f"cannot tell which library {source!r} comes from; supported: SevenNet checkpoints "
                     f"(.pth) and the names {sorted(KNOWN_MODELS)}, NequIP models "
                     f"({', '.join(NEQUIP_EXTENSIONS)}), MACE models ({', '.join(MACE_EXTENSIONS)})")


def _check_elements(elements, preferred=("Cu", "O")):
    """Two elements of the model to build the check structures from."""
    if all(e in elements for e in preferred):
        return list(preferred)
    return list(elements[:2])


def convert(source, output, dtype="float64", modal: Optional[str] = None, verify: bool = True,
            elements=None, seed: int = 0, head: Optional[str] = None) -> Dict:
    """Convert ``source``, check it against its own library on ``standard_structures`` (of
    ``elements``, default two of the model's), and write ``output`` (.mdx). Returns the file's
    metadata. Raises ``ConversionMismatch`` (and writes nothing) if the check fails.
    ``modal``: modality of a multi-fidelity SevenNet model; ``head``: head of a multi-head MACE."""
    from .. import io
    from .structures import standard_structures

    torch_dtype = _DTYPES[dtype] if isinstance(dtype, str) else dtype
    source = os.fspath(source)
    family = _family(source)
    if head is not None and family != "mace":
        raise ValueError("head= applies to multi-head MACE models only")
    if family == "sevenn":
        import sevenn

        from .sevenn import convert_sevenn, load_sevenn, sevenn_calculator

        src = load_sevenn(source, torch_dtype)
        potential = convert_sevenn(src, modal=modal, dtype=torch_dtype)
        reference = sevenn_calculator(src, modal=modal) if verify else None
        provenance = {"source": src.path, "library": "sevenn", "library_version": sevenn.__version__,
                      "checkpoint_version": str(src.config.get("version")), "modal": modal}
    elif family == "nequip":
        import nequip

        from .nequip import convert_nequip, nequip_calculator, source_from_calculator

        if modal is not None:
            raise ValueError("modal= applies to multi-fidelity SevenNet models only")
        reference = nequip_calculator(source)  # loads the model once, for the check and the mapping
        src = source_from_calculator(reference, source)
        potential = convert_nequip(src, dtype=torch_dtype)
        provenance = {"source": os.path.abspath(source), "library": "nequip",
                      "library_version": nequip.__version__, "model": src.config.get("_target_")}
    elif family == "mace":
        from .mace import convert_mace, load_mace, mace_calculator

        if modal is not None:
            raise ValueError("modal= applies to multi-fidelity SevenNet models only (MACE: head=)")
        src = load_mace(source)  # says how to get mace-torch when it is missing
        import mace

        potential = convert_mace(src, head=head, dtype=torch_dtype)
        reference = mace_calculator(src.model, head=head) if verify else None
        provenance = {"source": os.path.abspath(source), "library": "mace-torch",
                      "library_version": mace.__version__, "model": type(src.model).__name__,
                      "head": potential.spec()["head"]}
    verification = None
    if verify:
        els = list(elements) if elements else _check_elements(potential.elements)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny check graphs: extra threads only cost (and contend)
        try:
            rows = compare_to_reference(reference, potential, standard_structures(els, seed))
        finally:
            torch.set_num_threads(threads)
        verification = {"elements": els, "seed": seed,
                        "max_rel_err": {q: max(r["rel_err"] for r in rows if r["quantity"] == q)
                                        for q in ("energy", "forces", "stress")},
                        "tolerances": {r["quantity"]: r["tol"] for r in rows}}
    provenance["verification"] = verification
    return io.save(potential, output, provenance)


__all__ = ["ConversionMismatch", "compare_to_reference", "convert"]


class _CallableModule(type(os)):
    """Lets ``md_accel.convert(...)`` call ``convert`` although ``md_accel.convert`` is a package."""

    def __call__(self, *args, **kwargs):
        return convert(*args, **kwargs)


import sys as _sys  # noqa: E402

_sys.modules[__name__].__class__ = _CallableModule
