"""Build a random-weight ScaleShiftMACE with mace-torch's own modules and save it as a .model.

``--shape medium`` (default) is shaped like MACE-MP-0 "medium": 89 elements (Z = 1..89),
hidden 128x0e+128x1o, max_ell 3, correlation 3, 2 RealAgnosticResidualInteractionBlocks
(4,688,656 parameters, the published MACE-MP-0 medium count), r_max 6, 10 Bessel, polynomial cutoff
p = 5, radial MLP [64, 64, 64], readout MLP 16x0e (SiLU), avg_num_neighbors 61.96.
``--shape small`` is a 3-element model (H, O, Cu) with 8 channels for fast tests.

Needs mace-torch 0.3.16 (e3nn 0.4.4). Weights are random (mace's own initialisation); the model is for
timing and conversion tests, not for physics. Nothing large is written unless asked:

    python build_mace_mp0_medium_shape.py OUT.model [--shape medium|small] [--dtype float64]
"""

import argparse

import mace.modules  # noqa: F401  (sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD for e3nn 0.4.4)
import numpy as np
import torch
from e3nn import o3
from mace.modules import RealAgnosticInteractionBlock, RealAgnosticResidualInteractionBlock
from mace.modules.models import ScaleShiftMACE

SHAPES = {
    "medium": dict(
        atomic_numbers=list(range(1, 90)),
        hidden_irreps="128x0e+128x1o",
        MLP_irreps="16x0e",
        max_ell=3,
        correlation=3,
        num_interactions=2,
        r_max=6.0,
        num_bessel=10,
        num_polynomial_cutoff=5,
        radial_MLP=[64, 64, 64],
        avg_num_neighbors=61.96,
    ),
    "small": dict(
        atomic_numbers=[1, 8, 29],
        hidden_irreps="8x0e+8x1o",
        MLP_irreps="8x0e",
        max_ell=3,
        correlation=3,
        num_interactions=2,
        r_max=5.0,
        num_bessel=8,
        num_polynomial_cutoff=5,
        radial_MLP=[16, 16],
        avg_num_neighbors=12.0,
    ),
}


def build(shape="medium", seed=0, plain_first=False, atomic_inter_scale=0.8,
          atomic_inter_shift=0.1, **overrides):
    """A ScaleShiftMACE of the named shape with seeded random weights, in the default dtype.
    ``overrides``: any ScaleShiftMACE argument (SHAPES entries, interaction classes, ...)."""
    cfg = {
        "interaction_cls_first": (RealAgnosticInteractionBlock if plain_first
                                  else RealAgnosticResidualInteractionBlock),
        "interaction_cls": RealAgnosticResidualInteractionBlock,
        **SHAPES[shape], **overrides,
    }
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    z = cfg.pop("atomic_numbers")
    model = ScaleShiftMACE(
        atomic_inter_scale=atomic_inter_scale,
        atomic_inter_shift=atomic_inter_shift,
        num_elements=len(z),
        atomic_numbers=z,
        atomic_energies=rng.uniform(-5.0, -1.0, len(z)),
        hidden_irreps=o3.Irreps(cfg.pop("hidden_irreps")),
        MLP_irreps=o3.Irreps(cfg.pop("MLP_irreps")),
        gate=torch.nn.functional.silu,
        use_reduced_cg=False,  # e3nn coupling basis whether or not cuequivariance is installed
        **cfg,
    )
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output .model path")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="medium")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plain-first", action="store_true",
                        help="first layer RealAgnosticInteractionBlock (mace_run_train's default)")
    args = parser.parse_args()
    torch.set_default_dtype(getattr(torch, args.dtype))
    model = build(args.shape, args.seed, args.plain_first)
    torch.save(model, args.out)
    n = sum(p.numel() for p in model.parameters())
    print(f"saved {args.shape} ScaleShiftMACE ({n} parameters, {args.dtype}) to {args.out}")


if __name__ == "__main__":
    main()
