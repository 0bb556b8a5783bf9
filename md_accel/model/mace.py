"""MACE potential (hosts mace-torch's MACE / ScaleShiftMACE, one head), in md_accel's ops.

Per edge: Bessel basis of ``r`` (optionally of the Agnesi-transformed ``r``) times a polynomial
envelope, and spherical harmonics of mace's edge vector ``pos[receiver] - pos[sender]``, which
is ``-edge_vec`` in md_accel's convention. Per layer (``.notes/mace_math.md``)::

    sc  = skip(h, species)                                  # residual blocks
    m   = sum_{j -> i} TP_uvu(linear_up(h)[j], Y_ij; MLP(radial_ij))
    m   = linear(m) / avg_num_neighbors                     # or / (1 + density_i)
    m   = skip(m, species)                                  # plain (non-residual) blocks
    h   = product_linear(SymmetricContraction(m, species)) (+ sc)

Node energy: ``E0[species] + scale * (sum_layers readout_k(h_k) + zbl) + shift``. The spec is
JSON; learned values (weights, coupling tensors, E0, scale/shift, radii) live in the state dict.
"""
from typing import Dict, List, Optional

import torch

from ..o3 import Irreps, SphericalHarmonics
from ..ops import Graph, SymmetricContraction, TensorProductConv, per_edge, weight_rows
from . import register
from .activations import apply_activation
from .embedding import SpeciesEmbedding
from .linear import Linear
from .potential import LayeredPotential
from .radial import RadialMLP
from .species_linear import SpeciesLinear


def _envelope(r: torch.Tensor, r_max: torch.Tensor, p: float) -> torch.Tensor:
    """mace's ``PolynomialCutoff``, zero from ``r_max`` on (``r_max`` may be per edge)."""
    u = r / r_max
    env = (1.0 - (p + 1.0) * (p + 2.0) / 2.0 * torch.pow(u, p) + p * (p + 2.0) * torch.pow(u, p + 1.0)
           - p * (p + 1.0) / 2.0 * torch.pow(u, p + 2.0))
    return env * (r < r_max).to(r.dtype)


class MACERadial(torch.nn.Module):
    """``(bessel(r'), envelope(r))`` with ``bessel(x) = prefactor * sin(coeffs x) / x`` and
    ``r' = r`` or the Agnesi transform ``1 / (1 + a (r/r0)^q / (1 + (r/r0)^(q-p)))``,
    ``r0 = (radius[s] + radius[d]) / 2`` (``agnesi`` buffer: ``q, p, a``)."""

    def __init__(self, cutoff: float, num_basis: int, p: float, num_species: int, transform: str):
        super().__init__()
        if transform not in ("none", "agnesi"):
            raise ValueError(f"unknown distance transform {transform!r} (known: none, agnesi)")
        self.cutoff = float(cutoff)
        self.p = float(p)
        self.agnesi = transform == "agnesi"
        self.register_buffer("coeffs", torch.zeros(num_basis))
        self.register_buffer("prefactor", torch.zeros(()))
        self.register_buffer("transform_params", torch.zeros(3 if self.agnesi else 0))
        self.register_buffer("radii", torch.zeros(num_species if self.agnesi else 0))

    def forward(self, r: torch.Tensor, species: torch.Tensor, edge_src: torch.Tensor,
                edge_dst: torch.Tensor) -> List[torch.Tensor]:
        env = _envelope(r, torch.full_like(r, self.cutoff), self.p)
        x = r.unsqueeze(-1)
        if self.agnesi:
            rad = self.radii.index_select(0, species)
            r0 = 0.5 * (rad.index_select(0, edge_src) + rad.index_select(0, edge_dst))
            q, p, a = self.transform_params[0], self.transform_params[1], self.transform_params[2]
            t = r / r0
            x = (1.0 / (1.0 + a * torch.pow(t, q) / (1.0 + torch.pow(t, q - p)))).unsqueeze(-1)
        return [self.prefactor * (torch.sin(self.coeffs * x) / x), env]


class MACEZBL(torch.nn.Module):
    """mace's ``ZBLBasis``: per edge ``a = a_prefactor 0.529 / (Z_s^a_exp + Z_d^a_exp)``,
    ``v = 14.3996 Z_s Z_d / r * sum_k c_k exp(-d_k r / a) * envelope(r; radius_s + radius_d) / 2``,
    summed onto the receiver (both directions of a pair are edges)."""

    def __init__(self, num_species: int, p: float):
        super().__init__()
        self.p = float(p)
        self.register_buffer("z", torch.zeros(num_species))
        self.register_buffer("radii", torch.zeros(num_species))
        self.register_buffer("c", torch.zeros(4))
        self.register_buffer("a_exp", torch.zeros(()))
        self.register_buffer("a_prefactor", torch.zeros(()))

    def forward(self, species: torch.Tensor, r: torch.Tensor, edge_src: torch.Tensor,
                edge_dst: torch.Tensor) -> torch.Tensor:
        z = self.z.index_select(0, species)
        rad = self.radii.index_select(0, species)
        zs, zd = z.index_select(0, edge_src), z.index_select(0, edge_dst)
        a = self.a_prefactor * 0.529 / (torch.pow(zs, self.a_exp) + torch.pow(zd, self.a_exp))
        x = r / a
        phi = (self.c[0] * torch.exp(-3.2 * x) + self.c[1] * torch.exp(-0.9423 * x)
               + self.c[2] * torch.exp(-0.4028 * x) + self.c[3] * torch.exp(-0.2016 * x))
        r_max = rad.index_select(0, edge_src) + rad.index_select(0, edge_dst)
        v = 0.5 * (14.3996 * zs * zd) / r * phi * _envelope(r, r_max, self.p)
        return torch.zeros(species.shape[0], dtype=r.dtype, device=r.device).index_add(0, edge_dst, v)


class MACELayer(torch.nn.Module):
    """One interaction + product. ``spec`` keys: ``residual``, ``density``, ``linear_up``,
    ``conv`` (``irreps_in1``, ``irreps_out``, ``instructions`` ``[i1, i2, i_out]``),
    ``radial_mlp`` (``hs``), ``linear``, ``skip`` (``SpeciesLinear`` spec), ``product``
    (``in_dims``, ``out_dims``, ``channels``, ``num_elements``, ``num_params``, ``agnostic``),
    ``product_linear``, ``use_sc``. ``cutoff_weights``: mace's ``apply_cutoff=False``, the
    envelope multiplies the TP weights and edge densities instead of the radial features."""

    def __init__(self, spec: Dict, irreps_sh: Irreps, cutoff_weights: bool = False):
        super().__init__()
        self._spec = spec
        self.residual = bool(spec["residual"])
        self.add_sc = self.residual and bool(spec["use_sc"])
        self.cutoff_weights = bool(cutoff_weights)
        self.linear_up = Linear.from_spec(spec["linear_up"])
        conv = spec["conv"]
        self.conv = TensorProductConv(conv["irreps_in1"], irreps_sh, conv["irreps_out"],
                                      [(i1, i2, io, "uvu", True) for i1, i2, io in conv["instructions"]])
        self.radial_mlp = RadialMLP(spec["radial_mlp"]["hs"], "silu")
        if self.radial_mlp.hs[-1] != self.conv.weight_numel:
            raise ValueError(f"radial MLP gives {self.radial_mlp.hs[-1]} weights, TP needs {self.conv.weight_numel}")
        self.conv.fused_hidden = self.radial_mlp.hs[-2]  # the MLP's last layer can run inside the TP kernels
        self.density_fn = torch.nn.ModuleList(
            [RadialMLP([self.radial_mlp.hs[0], 1], "silu")] if spec["density"] else [])
        self.linear = Linear.from_spec(spec["linear"])
        self.skip = SpeciesLinear.from_spec(spec["skip"])
        self.register_buffer("avg_num_neighbors", torch.ones(()))
        prod = spec["product"]
        self.agnostic = bool(prod.get("agnostic", False))
        self.product = SymmetricContraction(prod["in_dims"], prod["out_dims"], prod["channels"],
                                            prod["num_elements"], prod["num_params"])
        self.product_linear = Linear.from_spec(spec["product_linear"])

    def forward(self, h: torch.Tensor, species: torch.Tensor, sh: torch.Tensor, radial: torch.Tensor,
                env: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor,
                graph: Optional[Graph]) -> torch.Tensor:
        n = h.shape[0]
        x = self.linear_up(h)
        # the MLP sees only the length: one row per weight row of the graph (a pair's two edges share)
        rows = weight_rows(radial, graph)
        if self.conv.use_fused(x, edge_src.shape[0], graph):  # w = hidden @ W_last in the TP op (env scales hidden rows)
            hid = self.radial_mlp.hidden(rows)
            if self.cutoff_weights:
                hid = hid * weight_rows(env, graph).unsqueeze(-1)
            m = self.conv.forward_fused(x, sh, hid, self.radial_mlp.last_weight(), edge_src, edge_dst, n, graph)
        else:
            w = self.radial_mlp(rows)
            if self.cutoff_weights:
                w = w * weight_rows(env, graph).unsqueeze(-1)
            m = self.conv(x, sh, per_edge(w, graph), edge_src, edge_dst, n, graph)
        m = self.linear(m)
        if len(self.density_fn) > 0:
            for fn in self.density_fn:
                d = torch.tanh(fn(radial) ** 2)
                if self.cutoff_weights:
                    d = d * env.unsqueeze(-1)
                density = torch.zeros((n, 1), dtype=m.dtype, device=m.device).index_add(0, edge_dst, d)
                m = m / (density + 1)
        else:
            m = m / self.avg_num_neighbors
        if self.residual:
            sc = self.skip.forward_species(h, species)
        else:
            m = self.skip.forward_species(m, species)
            sc = m
        out = self.product_linear(self.product(m, torch.zeros_like(species) if self.agnostic else species))
        if self.add_sc:
            out = out + sc
        return out


class MACEReadout(torch.nn.Module):
    """Energy per node from the features of layer ``spec["layer"]``: ``linear`` (kind
    ``linear``) or ``linear_2(act(linear_1(x)) * cst)`` (kind ``mlp``; ``act``, ``cst``)."""

    def __init__(self, spec: Dict):
        super().__init__()
        self._spec = spec
        self.layer = int(spec["layer"])
        self.linear_1 = Linear.from_spec(spec["linear_1"])
        self.mlp = spec["kind"] == "mlp"
        self.act: str = str(spec.get("act", "identity"))
        self.cst = float(spec.get("cst", 1.0))
        self.linear_2 = torch.nn.ModuleList([Linear.from_spec(spec["linear_2"])] if self.mlp else [])
        apply_activation(self.act, torch.zeros(1))  # unknown names fail here, not at run time

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_1(x)
        for lin in self.linear_2:
            y = lin(apply_activation(self.act, y) * self.cst)
        return y.squeeze(-1)


@register("mace")
class MACE(LayeredPotential):
    """Spec keys: ``elements``, ``cutoff``, ``radial`` (``num_basis``, ``p``, ``transform``:
    ``none`` / ``agnesi``, ``apply_cutoff``), ``lmax``, ``channels``, ``layers`` (see ``MACELayer``),
    ``readouts`` (see ``MACEReadout``), ``zbl`` (bool; ``p``)."""

    def __init__(self, spec: Dict):
        super().__init__()
        self._spec = dict(spec)
        self.elements: List[str] = list(spec["elements"])
        self.cutoff: float = float(spec["cutoff"])
        self.num_layers: int = len(spec["layers"])
        n = len(self.elements)
        rad = spec["radial"]
        self.radial = MACERadial(self.cutoff, int(rad["num_basis"]), float(rad["p"]), n, rad.get("transform", "none"))
        self.sh = SphericalHarmonics(int(spec["lmax"]), True, "component")
        irreps_sh = Irreps.spherical_harmonics(int(spec["lmax"]), -1)
        self.embedding = SpeciesEmbedding(n, int(spec["channels"]))
        self.apply_cutoff = bool(rad.get("apply_cutoff", True))
        self.layers = torch.nn.ModuleList(
            [MACELayer(ls, irreps_sh, not self.apply_cutoff) for ls in spec["layers"]])
        self.readouts = torch.nn.ModuleList([MACEReadout(rs) for rs in spec["readouts"]])
        self.zbl = torch.nn.ModuleList([MACEZBL(n, float(rad["p"]))] if spec.get("zbl", False) else [])
        self.register_buffer("e0", torch.zeros(n))
        self.register_buffer("scale", torch.ones(()))
        self.register_buffer("shift", torch.zeros(()))

    def spec(self) -> Dict:
        return dict(self._spec, type="mace")

    # -- the layered interface (see Potential) -----------------------------------------------
    @torch.jit.export
    def feature_dims(self) -> List[int]:
        dims = [self.embedding.dim]
        for layer in self.layers:
            dims.append(layer.product_linear.dim_out)
        return dims

    @torch.jit.export
    def edge_features(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor) -> List[torch.Tensor]:
        """``[r, sh, radial, envelope]``."""
        r = torch.linalg.norm(edge_vec, dim=-1)
        radial, env = self.radial(r, species, edge_src, edge_dst)
        if self.apply_cutoff:
            radial = radial * env.unsqueeze(-1)
        sh = self.sh(-edge_vec)  # mace's edge vector points from sender to receiver
        return [r, sh, radial, env]

    @torch.jit.export
    def embed(self, species: torch.Tensor) -> torch.Tensor:
        return self.embedding(species)

    @torch.jit.export
    def interaction(self, k: int, h: torch.Tensor, species: torch.Tensor, edge_feats: List[torch.Tensor],
                    edge_src: torch.Tensor, edge_dst: torch.Tensor, graph: Optional[Graph] = None) -> torch.Tensor:
        if k < 0 or k >= self.num_layers:
            raise ValueError("interaction: no such layer")
        out = h
        for i, layer in enumerate(self.layers):  # TorchScript indexes a ModuleList by constants only
            if i == k:
                out = layer(h, species, edge_feats[1], edge_feats[2], edge_feats[3], edge_src, edge_dst, graph)
        return out

    @torch.jit.export
    def readout_energies(self, species: torch.Tensor, features: List[torch.Tensor], edge_feats: List[torch.Tensor],
                         edge_src: torch.Tensor, edge_dst: torch.Tensor) -> torch.Tensor:
        """``E0 + scale * (sum of the readouts of the layers they read + ZBL) + shift``."""
        e = torch.zeros(species.shape[0], dtype=edge_feats[0].dtype, device=edge_feats[0].device)
        for readout in self.readouts:
            e = e + readout(features[readout.layer])
        for zbl in self.zbl:
            e = e + zbl(species, edge_feats[0], edge_src, edge_dst)
        return self.e0.index_select(0, species) + self.scale * e + self.shift
