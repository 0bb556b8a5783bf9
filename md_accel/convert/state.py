"""Loading mapped weights into a freshly built md_accel potential, strictly."""
from typing import Dict

import torch


def complete_state(pot: torch.nn.Module, state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Check the tensors a converter mapped against the module (every name present, every shape
    equal, nothing left over) and fill the empty ones (absent biases); a mismatch is a converter
    bug and raises."""
    own = pot.state_dict()
    out = {}
    for k, v in own.items():
        if k in state:
            if state[k].shape != v.shape:
                raise RuntimeError(f"converter bug: {k} has shape {tuple(state[k].shape)}, expected {tuple(v.shape)}")
            out[k] = state[k]
        elif v.numel() == 0:
            out[k] = v
        else:
            raise RuntimeError(f"converter bug: no value for {k}")
    extra = set(state) - set(own)
    if extra:
        raise RuntimeError(f"converter bug: unused tensors {sorted(extra)}")
    return out
