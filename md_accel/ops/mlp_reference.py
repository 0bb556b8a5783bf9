"""Plain-torch reference of the ``md_accel::mlp_hidden_*`` ops (the specification; the CUDA
kernels in ``csrc/mlp_hidden_kernels.cu`` must match it).

The hidden layers of a bias-free MLP with SiLU (e3nn ``FullyConnectedNet``, NequIP's scalar MLP):
``weights`` are the effective (already scaled) matrices ``[K0, H1], [H1, H2], ...`` and every
layer is followed by ``silu(z) * cst`` (``cst``: e3nn's second-moment constant, or 1):

    h_0 = x,   z_l = h_l @ W_l,   h_{l+1} = silu(z_l) * cst

``fwd`` returns the last ``h``; ``bwd`` is the gradient of ``<grad_h, fwd(x, W)>`` with respect to
``x``, written out (``silu'(z) = s (1 + z (1 - s))``, ``s = sigmoid(z)``) so that it is itself
differentiable and runs where autograd is off (below the dispatcher's autograd key).
"""
from typing import List

import torch


def mlp_hidden_fwd_ref(x: torch.Tensor, weights: List[torch.Tensor], cst: float) -> torch.Tensor:
    h = x
    for w in weights:
        h = torch.nn.functional.silu(h @ w) * cst
    return h


def mlp_hidden_bwd_ref(x: torch.Tensor, grad_h: torch.Tensor, weights: List[torch.Tensor],
                       cst: float) -> torch.Tensor:
    zs: List[torch.Tensor] = []
    h = x
    for w in weights:
        zs.append(h @ w)
        h = torch.nn.functional.silu(zs[-1]) * cst
    g = grad_h
    for w, z in zip(reversed(weights), reversed(zs)):
        s = torch.sigmoid(z)
        g = (g * (s * (1 + z * (1 - s))) * cst) @ w.t()
    return g
