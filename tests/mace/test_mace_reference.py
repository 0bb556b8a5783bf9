"""The executable form of .notes/mace_math.md: ScaleShiftMACE's node energies recomputed in
plain torch from the module's tensors, with md_accel's conventions (edge_vec = pos[src] -
pos[dst] + shift, src = sender), md_accel.o3 harmonics / 3j symbols and md_accel's symmetric
contraction; every normalisation constant comes from the formulas in the notes, not from
e3nn's objects. Compared with mace-torch 0.3.16 in float64. Skipped without mace-torch."""
import importlib.util
import math
from pathlib import Path

import pytest
import torch

mace_modules = pytest.importorskip("mace.modules")
from ase.build import bulk  # noqa: E402
from mace import data as mace_data  # noqa: E402
from mace.tools import torch_geometric, utils  # noqa: E402

from md_accel.model.activations import second_moment_constant  # noqa: E402
from md_accel.o3 import spherical_harmonics  # noqa: E402
from md_accel.o3.wigner import wigner_3j  # noqa: E402
from md_accel.ops.symmetric_contraction import SymmetricContraction  # noqa: E402
from test_symmetric_contraction import extract  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SILU = second_moment_constant("silu")  # e3nn's normalize2mom(silu).cst


def _builder():
    spec = importlib.util.spec_from_file_location(
        "build_mace", ROOT / "models" / "build_mace_mp0_medium_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(x, irreps):
    """[N, irreps.dim] -> list of [N, mul, 2l+1]."""
    out, off = [], 0
    for mul, ir in irreps:
        out.append(x[:, off:off + mul * ir.dim].reshape(-1, mul, ir.dim))
        off += mul * ir.dim
    return out


def linear(lin, x):
    """e3nn 0.4.4 o3.Linear: instructions (i_in outer, i_out inner) over equal irreps, weights
    [mul_in, mul_out] concatenated flat, output scaled by 1/sqrt(sum of mul_in into i_out)."""
    xs, w, off = blocks(x, lin.irreps_in), lin.weight, 0
    out = [x.new_zeros(x.shape[0], m, ir.dim) for m, ir in lin.irreps_out]
    pairs = [(i, o) for i, (_, a) in enumerate(lin.irreps_in)
             for o, (_, b) in enumerate(lin.irreps_out) if a == b]
    for i, o in pairs:
        mi, mo = lin.irreps_in[i].mul, lin.irreps_out[o].mul
        fan_in = sum(lin.irreps_in[j].mul for j, oo in pairs if oo == o)
        wm = w[off:off + mi * mo].reshape(mi, mo)
        off += mi * mo
        out[o] = out[o] + torch.einsum("nui,uv->nvi", xs[i], wm) / math.sqrt(fan_in)
    return torch.cat([b.reshape(x.shape[0], -1) for b in out], dim=1)


def fctp(tp, x, y):
    """e3nn 0.4.4 FullyConnectedTensorProduct ('uvw', component/element normalisation)."""
    x1s, x2s = blocks(x, tp.irreps_in1), blocks(y, tp.irreps_in2)
    out = [x.new_zeros(x.shape[0], m, ir.dim) for m, ir in tp.irreps_out]
    ins = [(i1, i2, o) for i1, (_, a) in enumerate(tp.irreps_in1)
           for i2, (_, b) in enumerate(tp.irreps_in2)
           for o, (_, c) in enumerate(tp.irreps_out) if c in a * b]
    off = 0
    for i1, i2, o in ins:
        m1, m2, mo = tp.irreps_in1[i1].mul, tp.irreps_in2[i2].mul, tp.irreps_out[o].mul
        fan = sum(tp.irreps_in1[a].mul * tp.irreps_in2[b].mul for a, b, oo in ins if oo == o)
        l1, l2, lo = tp.irreps_in1[i1].ir.l, tp.irreps_in2[i2].ir.l, tp.irreps_out[o].ir.l
        cg = wigner_3j(l1, l2, lo) * math.sqrt((2 * lo + 1) / fan)
        wm = tp.weight[off:off + m1 * m2 * mo].reshape(m1, m2, mo)
        off += m1 * m2 * mo
        out[o] = out[o] + torch.einsum("uvw,ijk,nui,nvj->nwk", wm, cg, x1s[i1], x2s[i2])
    return torch.cat([b.reshape(x.shape[0], -1) for b in out], dim=1)


def radial_mlp(net, x):
    """e3nn FullyConnectedNet: x @ W / sqrt(fan_in), SiLU * SILU between layers, none after."""
    layers = [getattr(net, f"layer{i}") for i in range(len(net.hs) - 1)]
    for k, layer in enumerate(layers):
        x = x @ layer.weight / math.sqrt(layer.weight.shape[0])
        if k < len(layers) - 1:
            x = torch.nn.functional.silu(x) * SILU
    return x


def conv(inter, h, y, w, src, dst, n):
    """'uvu' TP over x[sender] with per-edge weights, summed into receivers."""
    tp = inter.conv_tp
    xs, ys = blocks(h[src], tp.irreps_in1), blocks(y, tp.irreps_in2)
    out = [h.new_zeros(n, m, ir.dim) for m, ir in tp.irreps_out]
    off = 0
    for ins in tp.instructions:  # already sorted by i_out (mace sorts irreps_mid)
        mul = tp.irreps_in1[ins.i_in1].mul
        l1, l2 = tp.irreps_in1[ins.i_in1].ir.l, tp.irreps_in2[ins.i_in2].ir.l
        lo = tp.irreps_out[ins.i_out].ir.l
        cg = wigner_3j(l1, l2, lo) * math.sqrt(2 * lo + 1)  # one path per output block
        m = torch.einsum("eu,ijk,eui,ej->euk", w[:, off:off + mul], cg, xs[ins.i_in1],
                         ys[ins.i_in2][:, 0])
        off += mul
        out[ins.i_out] = out[ins.i_out].index_add(0, dst, m)
    return torch.cat([b.reshape(n, -1) for b in out], dim=1)


def node_energies(model, species, edge_vec, src, dst):
    n, num_el = len(species), len(model.atomic_numbers)
    onehot = torch.nn.functional.one_hot(species, num_el).double()
    vec = -edge_vec  # mace's vectors point from sender to receiver
    r = vec.norm(dim=1, keepdim=True)
    rb = model.radial_embedding
    r_max, p = float(rb.cutoff_fn.r_max), int(rb.cutoff_fn.p)
    nb = rb.bessel_fn.bessel_weights.numel()
    zs = model.atomic_numbers[species]
    rb_arg = r
    if hasattr(rb, "distance_transform"):  # Agnesi
        t = rb.distance_transform
        r0 = 0.5 * (t.covalent_radii[zs[src]] + t.covalent_radii[zs[dst]]).unsqueeze(1)
        rb_arg = 1 / (1 + t.a * (r / r0)**t.q / (1 + (r / r0)**(t.q - t.p)))
    bessel = math.sqrt(2 / r_max) * torch.sin(
        torch.arange(1, nb + 1, dtype=r.dtype) * math.pi / r_max * rb_arg) / rb_arg
    u = r / r_max
    env = (1 - (p + 1) * (p + 2) / 2 * u**p + p * (p + 2) * u**(p + 1)
           - p * (p + 1) / 2 * u**(p + 2)) * (r < r_max)
    edge_feats = bessel * env
    y = spherical_harmonics(vec, int(model.spherical_harmonics._lmax), True, "component")

    h = model.node_embedding.linear.weight.reshape(num_el, -1)[species] / math.sqrt(num_el)
    energy = model.atomic_energies_fn.atomic_energies[species]
    inter_e = torch.zeros_like(energy)
    feats = []
    for inter, prod in zip(model.interactions, model.products):
        residual = "Residual" in type(inter).__name__
        sc = fctp(inter.skip_tp, h, onehot) if residual else None
        w = radial_mlp(inter.conv_tp_weights, edge_feats)
        msg = conv(inter, linear(inter.linear_up, h), y, w, src, dst, n)
        if "Density" in type(inter).__name__:
            d = radial_mlp(inter.density_fn, edge_feats)
            density = torch.zeros(n, 1).index_add(0, dst, torch.tanh(d**2))
            msg = linear(inter.linear, msg) / (density + 1)
        else:
            msg = linear(inter.linear, msg) / inter.avg_num_neighbors
        if not residual:
            msg = fctp(inter.skip_tp, msg, onehot)
        in_dims, uu, ww = extract(prod.symmetric_contractions)
        sym = SymmetricContraction.from_tensors(in_dims, uu, ww)
        h = linear(prod.linear, sym(msg, species))
        if prod.use_sc and sc is not None:
            h = h + sc
        feats.append(h)
    for k, readout in enumerate(model.readouts):
        if hasattr(readout, "linear_1"):
            hid = torch.nn.functional.silu(linear(readout.linear_1, feats[k])) * SILU
            inter_e = inter_e + linear(readout.linear_2, hid)[:, 0]
        else:
            inter_e = inter_e + linear(readout.linear, feats[k])[:, 0]
    scale, shift = model.scale_shift.scale, model.scale_shift.shift
    return energy + scale * inter_e + shift


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


VARIANTS = {  # MACE-MP-0 medium's layers; mace_run_train's default first layer; MP-0b2's kind
    "residual": dict(max_ell=3),
    "plain_first": dict(plain_first=True, max_ell=2),
    "density_agnesi": dict(interaction_cls_first=mace_modules.RealAgnosticDensityInteractionBlock,
                           interaction_cls=mace_modules.RealAgnosticDensityResidualInteractionBlock,
                           distance_transform="Agnesi", max_ell=1),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_reference_matches_mace(float64, variant):
    model = _builder().build("small", seed=1, **VARIANTS[variant])
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((2, 1, 1))
    atoms.symbols[[0, 3]] = "O"
    atoms.symbols[5] = "H"
    atoms.rattle(0.1, seed=2)
    z_table = utils.AtomicNumberTable([1, 8, 29])
    cfg = mace_data.config_from_atoms(atoms)
    data = mace_data.AtomicData.from_config(cfg, z_table=z_table, cutoff=5.0)
    batch = next(iter(torch_geometric.dataloader.DataLoader([data], batch_size=1))).to_dict()
    out = model(batch, compute_force=True)

    sender, receiver = batch["edge_index"]
    pos = batch["positions"].detach().clone().requires_grad_(True)
    species = batch["node_attrs"].argmax(dim=1)
    # md_accel: edge_vec = pos[src] - pos[dst] + shift; mace: pos[recv] - pos[send] + shifts
    edge_vec = pos[sender] - pos[receiver] - batch["shifts"]
    ours = node_energies(model, species, edge_vec, sender, receiver)
    ref = out["node_energy"].detach()
    assert (ours.detach() - ref).abs().max() <= 1e-12 * ref.abs().max()
    forces = -torch.autograd.grad(ours.sum(), pos)[0]
    assert (forces - out["forces"]).abs().max() <= 1e-10 * out["forces"].abs().max()

    # e3nn 0.4.4 flips the sign of some odd l1+l2+l3 3j symbols relative to md_accel (e3nn >=
    # 0.5); MACE's conv paths are all even (target parities (-1)^l), so they agree there.
    for inter in model.interactions:
        for name, buf in inter.conv_tp.named_buffers():
            if "_w3j_" in name:
                l1, l2, l3 = map(int, name.rsplit("_w3j_", 1)[1].split("_"))
                assert (l1 + l2 + l3) % 2 == 0
                assert (buf - wigner_3j(l1, l2, l3)).abs().max() < 1e-14
