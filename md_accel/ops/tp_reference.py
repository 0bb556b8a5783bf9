"""Plain-torch reference of the tensor-product convolution: the specification of the kernels.

``F(x, y, w, g) = sum_e sum_p sum_(i,j,k) c * w[e,u] x[src,u,i] y[e,j] g[dst,u,k]`` is
multilinear, so

* forward  = dF/dg               -> ``tp_conv_fwd``
* backward = (dF/dx, dF/dy, dF/dw) -> ``tp_conv_bwd``
* double backward: the gradient of ``<gg_x, dF/dx> + <gg_y, dF/dy> + <gg_w, dF/dw>`` is the same
  contractions with one argument replaced by ``gg_*`` -> ``tp_conv_dbwd``.

Everything here is TorchScript-compatible and differentiable by autograd as well, so models
running on this path (CPU, LAMMPS without CUDA) get forces and Hessians from plain torch.
Paths are given as lists ``[in1_off, mul, l1, in2_off, l2, out_off, l3, w_off, w_stride]`` with a
dense CG block per path (``Plan.dense``).
"""
from __future__ import annotations

from typing import List, Tuple

import torch


def _blocks(path: List[int]) -> Tuple[int, int, int, int, int, int, int, int, int, int, int, int]:
    in1_off, mul, l1, in2_off, l2, out_off, l3, w_off, w_stride = path
    return in1_off, mul, 2 * l1 + 1, in2_off, 2 * l2 + 1, out_off, 2 * l3 + 1, w_off, w_stride, l1, l2, l3


def _path_weights(w: torch.Tensor, w_off: int, mul: int, w_stride: int) -> torch.Tensor:
    return w[:, w_off: w_off + (mul - 1) * w_stride + 1: w_stride]


def _split_points(starts: List[int], ends: List[int], total: int) -> List[int]:
    """Sorted unique block boundaries (0 and ``total`` included) of the given [start, end) blocks."""
    points = [0, total]
    for v in starts + ends:
        if v not in points:
            points.append(v)
    points.sort()
    return points


def _split(t: torch.Tensor, points: List[int]) -> List[torch.Tensor]:
    """Column blocks of ``t`` between consecutive ``points``; one split, so autograd
    concatenates the block gradients once instead of materialising a full-width zero per slice."""
    sizes: List[int] = []
    for i in range(len(points) - 1):
        sizes.append(points[i + 1] - points[i])
    return list(torch.split(t, sizes, dim=1))


def tp_conv_fwd_ref(
    x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
    num_nodes: int, paths: List[List[int]], cg: List[torch.Tensor], dim_out: int,
) -> torch.Tensor:
    """``out[n] = sum_{e: dst[e] = n} TP(x[src[e]], y[e]; w[e])``."""
    s1: List[int] = []
    e1: List[int] = []
    s2: List[int] = []
    e2: List[int] = []
    so: List[int] = []
    eo: List[int] = []
    sw: List[int] = []
    ew: List[int] = []
    for path in paths:
        in1_off, mul, d1, in2_off, d2, out_off, d3, w_off, w_stride, _, _, _ = _blocks(path)
        s1.append(in1_off)
        e1.append(in1_off + mul * d1)
        s2.append(in2_off)
        e2.append(in2_off + d2)
        so.append(out_off)
        eo.append(out_off + mul * d3)
        if w_stride == 1:
            sw.append(w_off)
            ew.append(w_off + mul)
    p1, p2, po, pw = (_split_points(s1, e1, x.shape[1]), _split_points(s2, e2, y.shape[1]),
                      _split_points(so, eo, dim_out), _split_points(sw, ew, w.shape[1]))
    x_blocks = _split(x.index_select(0, src), p1)
    y_blocks = _split(y, p2)
    w_blocks = _split(w, pw)
    msgs: List[List[torch.Tensor]] = [[] for _ in range(len(po) - 1)]
    for p in range(len(paths)):
        in1_off, mul, d1, in2_off, d2, out_off, d3, w_off, w_stride, _, _, _ = _blocks(paths[p])
        xs = x_blocks[p1.index(in1_off)].reshape(-1, mul, d1)
        yc = torch.einsum("ej,ijk->eik", y_blocks[p2.index(in2_off)], cg[p].to(x.dtype))
        ws = w_blocks[pw.index(w_off)] if w_stride == 1 else _path_weights(w, w_off, mul, w_stride)
        msg = torch.einsum("eui,eik->euk", xs, yc) * ws.unsqueeze(-1)
        msgs[po.index(out_off)].append(msg.reshape(-1, mul * d3))
    cols: List[torch.Tensor] = []
    for b in range(len(po) - 1):
        if len(msgs[b]) == 0:  # an output block no path writes
            cols.append(torch.zeros((src.shape[0], po[b + 1] - po[b]), dtype=x.dtype, device=x.device))
        else:
            total = msgs[b][0]
            for m in msgs[b][1:]:
                total = total + m
            cols.append(total)
    edge_out = torch.cat(cols, dim=1) if len(cols) > 0 else x.new_zeros((src.shape[0], 0))
    return torch.zeros((num_nodes, dim_out), dtype=x.dtype, device=x.device).index_add(0, dst, edge_out)


def tp_conv_bwd_ref(
    grad_out: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, src: torch.Tensor,
    dst: torch.Tensor, paths: List[List[int]], cg: List[torch.Tensor],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dF/dx, dF/dy, dF/dw)`` with ``g = grad_out``."""
    grad_x = torch.zeros_like(x)
    grad_y = torch.zeros_like(y)
    grad_w = torch.zeros_like(w)
    xs_all = x.index_select(0, src)
    gs_all = grad_out.index_select(0, dst)
    for p in range(len(paths)):
        in1_off, mul, d1, in2_off, d2, out_off, d3, w_off, w_stride, _, _, _ = _blocks(paths[p])
        c = cg[p].to(x.dtype)
        xs = xs_all[:, in1_off: in1_off + mul * d1].reshape(-1, mul, d1)
        gs = gs_all[:, out_off: out_off + mul * d3].reshape(-1, mul, d3)
        ys = y[:, in2_off: in2_off + d2]
        ws = _path_weights(w, w_off, mul, w_stride)
        yc = torch.einsum("ej,ijk->eik", ys, c)
        gx = torch.einsum("euk,eik->eui", gs, yc) * ws.unsqueeze(-1)
        grad_x[:, in1_off: in1_off + mul * d1] += torch.zeros(
            (x.shape[0], mul * d1), dtype=x.dtype, device=x.device).index_add(0, src, gx.reshape(-1, mul * d1))
        xg = torch.einsum("eui,euk->eik", xs * ws.unsqueeze(-1), gs)
        grad_y[:, in2_off: in2_off + d2] += torch.einsum("eik,ijk->ej", xg, c)
        gw = torch.einsum("eui,eik,euk->eu", xs, yc, gs)
        grad_w[:, w_off: w_off + (mul - 1) * w_stride + 1: w_stride] += gw
    return grad_x, grad_y, grad_w


def tp_conv_dbwd_ref(
    gg_x: torch.Tensor, gg_y: torch.Tensor, gg_w: torch.Tensor, grad_out: torch.Tensor,
    x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, src: torch.Tensor, dst: torch.Tensor,
    paths: List[List[int]], cg: List[torch.Tensor], need_grad_out: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``<gg_x, dF/dx> + <gg_y, dF/dy> + <gg_w, dF/dw>`` w.r.t. (grad_out, x, y, w); the
    first is an empty ``[0, dim_out]`` unless ``need_grad_out``."""
    n = grad_out.shape[0]
    dim_out = grad_out.shape[1]
    if need_grad_out:
        g_grad_out = (
            tp_conv_fwd_ref(gg_x, y, w, src, dst, n, paths, cg, dim_out)
            + tp_conv_fwd_ref(x, gg_y, w, src, dst, n, paths, cg, dim_out)
            + tp_conv_fwd_ref(x, y, gg_w, src, dst, n, paths, cg, dim_out)
        )
    else:
        g_grad_out = grad_out.new_zeros((0, dim_out))
    gx_a, gy_a, gw_a = tp_conv_bwd_ref(grad_out, gg_x, y, w, src, dst, paths, cg)
    gx_b, gy_b, gw_b = tp_conv_bwd_ref(grad_out, x, gg_y, w, src, dst, paths, cg)
    gx_c, gy_c, gw_c = tp_conv_bwd_ref(grad_out, x, y, gg_w, src, dst, paths, cg)
    # d/dx collects the terms where x was not substituted, etc.
    return g_grad_out, gx_b + gx_c, gy_a + gy_c, gw_a + gw_b


def tp_conv_fused_fwd_ref(
    x: torch.Tensor, y: torch.Tensor, hidden: torch.Tensor, w_last: torch.Tensor, src: torch.Tensor,
    dst: torch.Tensor, num_nodes: int, paths: List[List[int]], cg: List[torch.Tensor], dim_out: int,
) -> torch.Tensor:
    """``tp_conv_fwd_ref`` with the per-edge weights ``w = hidden @ w_last`` (the radial MLP's last,
    linear layer fused in: ``tp_conv_fused_fwd``)."""
    return tp_conv_fwd_ref(x, y, hidden @ w_last, src, dst, num_nodes, paths, cg, dim_out)


def tp_conv_fused_bwd_ref(
    grad_out: torch.Tensor, x: torch.Tensor, y: torch.Tensor, hidden: torch.Tensor, w_last: torch.Tensor,
    src: torch.Tensor, dst: torch.Tensor, paths: List[List[int]], cg: List[torch.Tensor], need_grad_w_last: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dF/dx, dF/dy, dF/dhidden, dF/dw_last)`` of ``F = <grad_out, tp_conv_fused_fwd>``; the last is
    an empty ``[0, weight_numel]`` unless ``need_grad_w_last``."""
    gx, gy, gw = tp_conv_bwd_ref(grad_out, x, y, hidden @ w_last, src, dst, paths, cg)
    g_last = hidden.t() @ gw if need_grad_w_last else w_last.new_zeros((0, w_last.shape[1]))
    return gx, gy, gw @ w_last.t(), g_last
