"""Copies the sevenn wheel's SevenNet-0 (11Jul2024) and SevenNet-l3i5 checkpoints with their optimizer state
dropped (model weights and config unchanged: 3.5 and 4.9 MB instead of 9.8 and 14), so that they fit a GPU
call's carry. sevenn's loaders read only the model's weights and config. The files are unpickled by torch with
weights_only=False: they are sevenn's own files from the installed wheel.

    .venv/bin/python tools/strip_sevenn_checkpoints.py OUT_DIR   # OUT_DIR/<sevenn's folder>/<file>.pth
"""
import os
import sys

import sevenn
import torch

CHECKPOINTS = [("SevenNet_0__11Jul2024", "checkpoint_sevennet_0.pth"), ("SevenNet_l3i5", "checkpoint_l3i5.pth")]


def main(out: str) -> None:
    src = os.path.join(os.path.dirname(sevenn.__file__), "pretrained_potentials")
    for folder, name in CHECKPOINTS:
        checkpoint = torch.load(os.path.join(src, folder, name), map_location="cpu", weights_only=False)
        checkpoint["optimizer_state_dict"] = None
        os.makedirs(os.path.join(out, folder), exist_ok=True)
        torch.save(checkpoint, os.path.join(out, folder, name))
        print(f"{folder}/{name}: {os.path.getsize(os.path.join(out, folder, name)) / 2**20:.1f} MiB")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
