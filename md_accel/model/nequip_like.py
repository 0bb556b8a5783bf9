"""NequIP-style message-passing potential (hosts SevenNet models; NequIP variants by options).

Per edge: radial embedding ``basis(r) * envelope(r)`` and spherical harmonics of ``edge_vec``.
Per layer (every block optional where NequIP/SevenNet differ)::

    sc  = self_connection(x)                        # "linear" or "none"
    h   = linear_in(x)
    h   = sum_{j -> i} TP_uvu(h[j], Y(r_ij); MLP(radial_ij)) / denominator
    h   = linear_out(h) + sc
    x   = gate(h)  (+ x if resnet)

Readout: scalar features -> per-node energy through linears (or an MLP), then per-species
``scale * e + shift``. The spec is JSON; learned values (weights, denominators, scale/shift)
live in the state dict.
"""
from typing import Dict, List

import torch

from ..o3 import Irreps, SphericalHarmonics
from ..ops import TensorProductConv
from . import register
from .embedding import ScaleShift, SpeciesEmbedding
from .gate import Gate
from .linear import Linear
from .potential import Potential
from .radial import RadialMLP, make_cutoff_fn, make_radial_basis

SELF_CONNECTIONS = ("linear", "none")


class InteractionLayer(torch.nn.Module):
    """One convolution layer; ``spec`` keys: ``irreps_in``, ``irreps_tp_out``, ``instructions``
    (``[i_in1, i_in2, i_out]``, mode 'uvu'), ``radial_mlp`` (``hs``, ``act``), ``linear_in``,
    ``linear_out``, ``self_connection`` (``{"kind": "linear", "linear": ...}`` or
    ``{"kind": "none"}``), ``gate``, ``resnet``."""

    def __init__(self, spec: Dict, irreps_sh: Irreps):
        super().__init__()
        self._spec = spec
        self.irreps_in = Irreps(spec["irreps_in"])
        self.linear_in = Linear.from_spec(spec["linear_in"])
        self.conv = TensorProductConv(
            self.irreps_in, irreps_sh, spec["irreps_tp_out"],
            [(i1, i2, io, "uvu", True) for i1, i2, io in spec["instructions"]],
        )
        self.radial_mlp = RadialMLP(spec["radial_mlp"]["hs"], spec["radial_mlp"]["act"])
        if self.radial_mlp.hs[-1] != self.conv.weight_numel:
            raise ValueError(f"radial MLP gives {self.radial_mlp.hs[-1]} weights, TP needs {self.conv.weight_numel}")
        self.linear_out = Linear.from_spec(spec["linear_out"])
        sc = spec["self_connection"]
        if sc["kind"] not in SELF_CONNECTIONS:
            raise ValueError(f"unknown self_connection {sc['kind']!r}; known: {SELF_CONNECTIONS}")
        self.has_sc = sc["kind"] == "linear"
        self.self_connection = Linear.from_spec(sc["linear"]) if self.has_sc else torch.nn.Identity()
        self.gate = Gate.from_spec(spec["gate"])
        self.resnet = bool(spec.get("resnet", False))
        self.register_buffer("denominator", torch.ones(1))

    def forward(self, x: torch.Tensor, sh: torch.Tensor, radial: torch.Tensor, edge_src: torch.Tensor,
                edge_dst: torch.Tensor) -> torch.Tensor:
        h = self.linear_in(x)
        w = self.radial_mlp(radial)
        h = self.conv(h, sh, w, edge_src, edge_dst, x.shape[0])
        h = h.div(self.denominator)
        h = self.linear_out(h)
        if self.has_sc:
            h = h + self.self_connection(x)
        h = self.gate(h)
        if self.resnet:
            h = h + x
        return h

    def spec(self) -> Dict:
        return self._spec


@register("nequip_like")
class NequIPLike(Potential):
    """Spec keys: ``elements``, ``cutoff``, ``radial_basis`` (e.g. ``{"name": "bessel",
    "num_basis": 8, "trainable": true}``), ``cutoff_fn`` (``{"name": "xplor", "r_on": 4.5}`` or
    ``{"name": "polynomial", "p": 6}``), ``sh`` (``lmax``, ``parity``, ``normalize``),
    ``irreps_embed``, ``layers`` (see ``InteractionLayer``), ``readout`` (``{"kind":
    "linear", "linears": [...]}`` or ``{"kind": "mlp", "hs": [...], "act": ...}``)."""

    # re-declared with real types: TorchScript cannot resolve the base class's string annotations
    elements: List[str]
    cutoff: float
    num_layers: int

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
        else:
            raise ValueError(f"unknown readout kind {self.readout_kind!r} (known: linear, mlp)")
        self.scale_shift = ScaleShift(n_species)

    @classmethod
    def from_spec(cls, spec: Dict) -> Potential:
        return cls(spec)

    def spec(self) -> Dict:
        return dict(self._spec, type="nequip_like")

    def node_energies(
        self, species: torch.Tensor, edge_vec: torch.Tensor, edge_src: torch.Tensor, edge_dst: torch.Tensor
    ) -> torch.Tensor:
        r = torch.linalg.norm(edge_vec, dim=-1)
        radial = self.radial_basis(r) * self.cutoff_fn(r).unsqueeze(-1)
        sh = self.sh(edge_vec)
        x = self.embedding(species)
        for layer in self.layers:
            x = layer(x, sh, radial, edge_src, edge_dst)
        e = self.readout(x).squeeze(-1)
        return self.scale_shift(e, species)
