"""NequIP-style message-passing potential (hosts SevenNet and NequIP models, by options).

Per edge: radial embedding ``basis(r) * envelope(r)`` and spherical harmonics of ``edge_vec``.
Per layer (every block optional where NequIP/SevenNet differ)::

    sc  = self_connection(x)                        # "linear", "species_linear" or "none"
    h   = linear_in(x) (* sender_scale[species])    # NequIP's avg_num_neighbors norm
    h   = sum_{j -> i} TP_uvu(h[j], Y(r_ij); MLP(radial_ij) / denominator)
    h   = linear_out(h) + sc
    x   = gate(h)  (+ x if resnet)

NequIP normalises by the average neighbour count *before* the gather, with the sender's
species when the count is per species, so it is a per-node scale of ``linear_in``'s output
(``sender_scale``) rather than the receiver-side ``denominator`` SevenNet uses.

Readout: scalar features -> per-node energy through linears or an MLP, then per-species
``scale * e + shift``, then optional pair terms (ZBL). The spec is JSON; learned values
(weights, denominators, scales, scale/shift) live in the state dict.
"""
from typing import Dict, List, Optional, Union

import torch

from ..o3 import Irreps, SphericalHarmonics
from ..ops import Graph, TensorProductConv, per_edge, weight_rows
from . import register
from .embedding import ScaleShift, SpeciesEmbedding
from .gate import Gate
from .linear import Linear
from .potential import LayeredPotential
from .radial import RadialMLP, make_cutoff_fn, make_radial_basis
from .scalar_mlp import ScalarMLP
from .species_linear import SpeciesLinear
from .zbl import ZBL

SELF_CONNECTIONS = ("linear", "species_linear", "none")


def make_mlp(spec: Dict) -> Union[RadialMLP, ScalarMLP]:
    """e3nn ``FullyConnectedNet`` (default) or NequIP's ``ScalarMLP`` (``kind: scalar_mlp``)."""
    if spec.get("kind", "e3nn") == "scalar_mlp":
        return ScalarMLP(spec["hs"], spec["alphas"], spec["act"])
    return RadialMLP(spec["hs"], spec["act"])


class InteractionLayer(torch.nn.Module):
    """One convolution layer; ``spec`` keys: ``irreps_in``, ``irreps_tp_out``, ``instructions``
    (``[i_in1, i_in2, i_out]``, mode 'uvu'), ``radial_mlp`` (``hs``, ``act``), ``linear_in``,
    ``linear_out``, ``self_connection`` (``{"kind": "linear", "linear": ...}``, ``{"kind":
    "species_linear", "linear": SpeciesLinear spec}`` or ``{"kind": "none"}``), ``gate`` (with
    optional ``scalar_csts`` / ``gate_csts`` overriding the activations' normalisation
    constants), ``resnet``, ``sender_norm`` (bool; needs ``num_species``)."""

    def __init__(self, spec: Dict, irreps_sh: Irreps):
        super().__init__()
        self._spec = spec
        self.irreps_in = Irreps(spec["irreps_in"])
        self.linear_in = Linear.from_spec(spec["linear_in"])
        self.conv = TensorProductConv(
            self.irreps_in, irreps_sh, spec["irreps_tp_out"],
            [(i1, i2, io, "uvu", True) for i1, i2, io in spec["instructions"]],
        )
        self.radial_mlp = make_mlp(spec["radial_mlp"])
        if self.radial_mlp.hs[-1] != self.conv.weight_numel:
            raise ValueError(f"radial MLP gives {self.radial_mlp.hs[-1]} weights, TP needs {self.conv.weight_numel}")
        self.conv.fused_hidden = self.radial_mlp.hs[-2]  # the MLP's last layer can run inside the TP kernels
        self.linear_out = Linear.from_spec(spec["linear_out"])
        sc = spec["self_connection"]
        if sc["kind"] not in SELF_CONNECTIONS:
            raise ValueError(f"unknown self_connection {sc['kind']!r}; known: {SELF_CONNECTIONS}")
        self.has_sc = sc["kind"] == "linear"
        self.self_connection = Linear.from_spec(sc["linear"]) if self.has_sc else torch.nn.Identity()
        # 0 or 1 modules: a ModuleList keeps TorchScript away from the absent case
        self.species_sc = torch.nn.ModuleList(
            [SpeciesLinear.from_spec(sc["linear"])] if sc["kind"] == "species_linear" else [])
        self.gate = Gate.from_spec(spec["gate"])
        if "scalar_csts" in spec["gate"] or "gate_csts" in spec["gate"]:
            self.gate.set_constants(spec["gate"].get("scalar_csts", self.gate.scalar_csts),
                                    spec["gate"].get("gate_csts", self.gate.gate_csts))
        self.resnet = bool(spec.get("resnet", False))
        self.register_buffer("denominator", torch.ones(1))
        self.sender_norm = bool(spec.get("sender_norm", False))
        # persistent only when used, so files without it (SevenNet) load unchanged
        self.register_buffer("sender_scale", torch.ones(int(spec["num_species"]) if self.sender_norm else 0),
                             persistent=self.sender_norm)

    def forward(self, x: torch.Tensor, species: torch.Tensor, sh: torch.Tensor, radial: torch.Tensor,
                edge_src: torch.Tensor, edge_dst: torch.Tensor, graph: Optional[Graph]) -> torch.Tensor:
        h = self.linear_in(x)
        if self.sender_norm:
            h = h * self.sender_scale.index_select(0, species).unsqueeze(-1)
        # the TP is linear in its weights: 1 / denominator goes into the MLP's small last weight
        # matrix instead of a pass over the [nodes, TP output] features
        w_last = self.radial_mlp.last_weight() / self.denominator
        # the MLP sees only the length: one row per weight row of the graph (a pair's two edges share)
        hidden = self.radial_mlp.hidden(weight_rows(radial, graph))
        if self.conv.use_fused(h, edge_src.shape[0], graph):
            h = self.conv.forward_fused(h, sh, hidden, w_last, edge_src, edge_dst, x.shape[0], graph)
        else:
            w = per_edge(torch.ops.md_accel.linear_tf32x3(hidden, w_last), graph)
            h = self.conv(h, sh, w, edge_src, edge_dst, x.shape[0], graph)
        h = self.linear_out(h)
        if self.has_sc:
            h = h + self.self_connection(x)
        for sc in self.species_sc:
            h = h + sc.forward_species(x, species)
        h = self.gate(h)
        if self.resnet:
            h = h + x
        return h

    def spec(self) -> Dict:
        return self._spec


@register("nequip_like")
class NequIPLike(LayeredPotential):
    """Spec keys: ``elements``, ``cutoff``, ``radial_basis`` (e.g. ``{"name": "bessel",
    "num_basis": 8, "trainable": true}``), ``cutoff_fn`` (``{"name": "xplor", "r_on": 4.5}`` or
    ``{"name": "polynomial", "p": 6}``), ``sh`` (``lmax``, ``parity``, ``normalize``),
    ``irreps_embed``, ``layers`` (see ``InteractionLayer``), ``readout`` (``{"kind":
    "linear", "linears": [...]}``, ``{"kind": "mlp", "hs": [...], "act": ...}`` or ``{"kind":
    "scalar_mlp", "hs", "alphas", "act"}``), optional ``pair`` (list of pair terms, ``{"name":
    "zbl", "atomic_numbers", "prefactor", "p"}``) added after the scale/shift."""

    def __init__(self, spec: Dict):
        super().__init__()
        self._spec = dict(spec)
        self.elements: List[str] = list(spec["elements"])
        self.cutoff: float = float(spec["cutoff"])
        self.num_layers: int = len(spec["layers"])
        n_species = len(self.elements)
        self.radial_basis = make_radial_basis(self.cutoff, spec["radial_basis"])
        self.cutoff_fn = make_cutoff_fn(self.cutoff, spec["cutoff_fn"])
        sh = spec["sh"]
        self.irreps_sh = Irreps.spherical_harmonics(int(sh["lmax"]), int(sh.get("parity", -1)))
        self.sh = SphericalHarmonics(int(sh["lmax"]), bool(sh.get("normalize", True)), "component")
        self.embedding = SpeciesEmbedding(n_species, Irreps(spec["irreps_embed"]).dim)
        self.layers = torch.nn.ModuleList([InteractionLayer(ls, self.irreps_sh) for ls in spec["layers"]])
        readout = spec["readout"]
        self.readout_kind: str = readout["kind"]
        if self.readout_kind == "linear":
            self.readout = torch.nn.Sequential(*[Linear.from_spec(s) for s in readout["linears"]])
        elif self.readout_kind == "mlp":
            self.readout = RadialMLP(readout["hs"], readout["act"])
        elif self.readout_kind == "scalar_mlp":
            self.readout = make_mlp(readout)
        else:
            raise ValueError(f"unknown readout kind {self.readout_kind!r} (known: linear, mlp, scalar_mlp)")
        self.scale_shift = ScaleShift(n_species)
        pairs = []
        for p in spec.get("pair", []):
            if p.get("name") != "zbl":
                raise ValueError(f"unknown pair term {p.get('name')!r} (known: zbl)")
            pairs.append(ZBL(self.cutoff, p["atomic_numbers"], p["prefactor"], p.get("p", 6.0)))
        self.pair = torch.nn.ModuleList(pairs)

    def spec(self) -> Dict:
        return dict(self._spec, type="nequip_like")

    # -- the layered interface (see Potential) -----------------------------------------------
    @torch.jit.export
    def feature_dims(self) -> List[int]:
        dims = [self.embedding.dim]
        for layer in self.layers:
            gate = layer.gate
            dim = 0
            for mul in gate.scalar_blocks:
                dim += mul
            for mul, ir_dim in zip(gate.gated_muls, gate.gated_dims):
                dim += mul * ir_dim
            dims.append(dim)
        return dims

    @torch.jit.export
    def edge_features(self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor,
                      edge_dst: torch.Tensor) -> List[torch.Tensor]:
        """``[r, sh, radial]``."""
        r = torch.linalg.norm(edge_vec, dim=-1)
        radial = self.radial_basis(r) * self.cutoff_fn(r).unsqueeze(-1)
        sh = self.sh(edge_vec)
        return [r, sh, radial]

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
                out = layer(h, species, edge_feats[1], edge_feats[2], edge_src, edge_dst, graph)
        return out

    @torch.jit.export
    def readout_energies(self, species: torch.Tensor, features: List[torch.Tensor], edge_feats: List[torch.Tensor],
                         edge_src: torch.Tensor, edge_dst: torch.Tensor) -> torch.Tensor:
        """Readout of the last layer's features, per-species scale/shift, pair terms (ZBL)."""
        e = self.readout(features[-1]).squeeze(-1)
        e = self.scale_shift(e, species)
        for pair in self.pair:
            e = e + pair(species, edge_feats[0], edge_src, edge_dst)
        return e
