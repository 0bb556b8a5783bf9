"""Build a random-weight NequIP checkpoint of benchmark size with nequip's own training module.

The trained copper models in ``models/nequip_cu`` are small (8-16 channels) so that CI can train,
convert and test them; a speed comparison wants the size people run. This script takes the
training checkpoint ``nequip_cu_l2.ckpt`` as the template (data, loss and training settings),
changes the model hyperparameters to the chosen shape, lets nequip's training module build
the model with its own initialisation, and writes a ``.ckpt`` that nequip's
``ModelFromCheckpoint`` / ``NequIPCalculator`` and md_accel's converter load like any other.

Default shape (``--shape benchmark``): ``NequIPGNNModel``, l_max 2 with parity, 4 conv layers,
64 channels, radial MLP 2 x 64, 8 trainable Bessel roots, p = 6, r_max 5 A (about 43 neighbours
per atom in fcc copper), float64 weights. ``--shape l3``: the same with l_max 3 and 32 channels.
Weights are random: for timing and conversion tests, not physics.

    python models/build_nequip_shape.py OUT.ckpt [--shape benchmark|l3] [--seed 0]

Needs nequip 0.19 (the main ``.venv``).
"""

import argparse
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "nequip_cu", "nequip_cu_l2.ckpt")

SHAPES = {
    "benchmark": dict(l_max=2, parity=True, num_layers=4, num_features=64,
                      radial_mlp_depth=2, radial_mlp_width=64, r_max=5.0),
    "l3": dict(l_max=3, parity=True, num_layers=4, num_features=32,
               radial_mlp_depth=2, radial_mlp_width=64, r_max=5.0),
}


def build(out: str, shape: str = "benchmark", seed: int = 0) -> dict:
    """Write the checkpoint; returns the model hyperparameters it holds. torch's default dtype
    (which nequip's global state sets to float64) is restored afterwards."""
    default_dtype = torch.get_default_dtype()
    try:
        return _build(out, shape, seed)
    finally:
        torch.set_default_dtype(default_dtype)


def _build(out: str, shape: str, seed: int) -> dict:
    import hydra
    from nequip.utils.global_state import set_global_state

    set_global_state()
    ckpt = torch.load(TEMPLATE, map_location="cpu", weights_only=False)  # our own trained file
    hp = ckpt["hyper_parameters"]
    model_cfgs = [hp["model"], hp["info_dict"]["training_module"]["model"]]
    for cfg in model_cfgs:
        cfg.update(SHAPES[shape], seed=seed)
    module_cls = hydra.utils.get_class(hp["info_dict"]["training_module"]["_target_"])
    torch.manual_seed(seed)
    module = module_cls(**hp)
    ckpt["state_dict"] = module.state_dict()
    # optimizer and scheduler states belong to the template's parameters: drop them
    for key in ("optimizer_states", "lr_schedulers", "callbacks", "loops"):
        ckpt.pop(key, None)
    torch.save(ckpt, out)
    return dict(model_cfgs[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", default="benchmark", choices=sorted(SHAPES))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = build(args.out, args.shape, args.seed)
    print(f"wrote {args.out}: " + ", ".join(f"{k}={cfg[k]}" for k in SHAPES[args.shape]))


if __name__ == "__main__":
    main()
