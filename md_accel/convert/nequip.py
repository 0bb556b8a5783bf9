"""NequIP 0.19 model (``.ckpt`` training checkpoint or ``.nequip.zip`` package) -> md_accel
``nequip_like`` potential.

The file is loaded with nequip itself (``load_saved_model``: the EMA weights of a checkpoint,
the packaged code of a zip); the converter then reads the loaded modules one by one, by class
name and attributes (packaged classes are copies, not nequip's), and refuses whatever it does
not map exactly. What differs from SevenNet (details in ``.notes/nequip_math.md``):

* node features and attributes are a dense learned type embedding (not one-hot): the
  self-connection ``FCTP(h, emb)`` becomes one linear map per species (``SpeciesLinear``);
* ``1/sqrt(avg_num_neighbors)`` scales ``linear_1``'s output on the *sender* side, per species
  of the sender when per-type (``sender_scale``);
* Bessel roots ``w_n`` enter as ``sin(w_n pi r / r_max)``, MLPs are ``x @ (W * alpha)`` with
  plain SiLU (``ScalarMLP``), gates use the loaded module's normalisation constants;
* the ZBL pair term is added after the per-type scale/shift.

nequip changes torch's default dtype to float64 when it loads a model and builds its input
tensors in the default dtype; both are confined here (``_default_dtype``).
"""
from __future__ import annotations

import contextlib
import math
import os
import warnings
import zipfile
from typing import Dict, List, NamedTuple, Tuple

import torch

from ..model.nequip_like import NequIPLike
from ..o3 import Irreps
from ..model.linear import linear_instructions
from .e3nn_modules import irreps_of, linear_of
from .state import complete_state

EXTENSIONS = (".ckpt", ".nequip.zip")
COMPILED_EXTENSIONS = (".nequip.pth", ".nequip.pt2")
SUPPORTED_MODELS = ("nequip.model.NequIPGNNModel",)


class UnsupportedNequIPModel(ValueError):
    """The file holds a nequip model (or option) this converter does not map."""


class NequIPSource(NamedTuple):
    """A loaded nequip model: path, model config (``_target_`` and hyperparameters), module."""

    path: str
    config: Dict
    model: torch.nn.Module


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def model_config(path: str) -> Dict:
    """The model's config from the file, without building it (to refuse early and by name)."""
    path = os.fspath(path)
    if path.endswith(COMPILED_EXTENSIONS):
        raise UnsupportedNequIPModel(f"{path}: compiled nequip models cannot be converted; "
                                     f"convert the .ckpt or .nequip.zip it was compiled from")
    if path.endswith(".nequip.zip"):
        import yaml

        try:
            with zipfile.ZipFile(path) as z:
                names = [n for n in z.namelist() if n.endswith("/model/config.yaml")]
                if not names:
                    raise ValueError("no model/config.yaml in the archive")
                config = yaml.safe_load(z.read(names[0]))
            model = config["training_module"]["model"]
        except (zipfile.BadZipFile, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a nequip package (.nequip.zip): {e}") from e
    elif path.endswith(".ckpt"):
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
            model = ckpt["hyper_parameters"]["info_dict"]["training_module"]["model"]
        except Exception as e:  # torch.load raises many kinds on foreign files
            raise ValueError(f"{path} is not a nequip training checkpoint (.ckpt): {e!r}") from e
    else:
        raise ValueError(f"{path}: not a nequip model file ({', '.join(EXTENSIONS)})")
    target = str(model.get("_target_", ""))
    if "allegro" in target.lower():
        raise UnsupportedNequIPModel(f"{path}: Allegro models ({target}) are not supported yet; "
                                     f"supported: {', '.join(SUPPORTED_MODELS)}")
    if target not in SUPPORTED_MODELS:
        raise UnsupportedNequIPModel(f"{path}: model {target!r} is not supported; "
                                     f"supported: {', '.join(SUPPORTED_MODELS)}")
    return dict(model)


def load_nequip(path) -> NequIPSource:
    """Load with nequip (CPU, eval mode) after checking the model kind."""
    from nequip.model.saved_models.load_utils import load_saved_model
    from nequip.utils.global_state import set_global_state

    path = os.fspath(path)
    config = model_config(path)
    with _default_dtype(torch.get_default_dtype()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        set_global_state()
        model = load_saved_model(path, compile_mode="eager").eval()
    return NequIPSource(path, config, model)


def nequip_calculator(path):
    """nequip's own ASE calculator (``NequIPCalculator._from_saved_model``, CPU, chemical
    symbols as type names), made independent of the process's default dtype."""
    from nequip.integrations.ase import NequIPCalculator

    class _Calc(NequIPCalculator):
        def calculate(self, *args, **kwargs):
            with _default_dtype(torch.float64):
                super().calculate(*args, **kwargs)

    path = os.fspath(path)
    model_config(path)
    with _default_dtype(torch.get_default_dtype()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _Calc._from_saved_model(path, device="cpu", chemical_species_to_atom_type_map=True)


def source_from_calculator(calc, path) -> NequIPSource:
    """The loaded model of a ``nequip_calculator`` as a source (no second load)."""
    return NequIPSource(os.fspath(path), model_config(path), calc.model)


# -- module mapping ------------------------------------------------------------------------------

_TOP = ("type_embed", "spharm", "edge_norm", "bessel_encode", "factor")
_TAIL = ("per_atom_energy_readout", "per_type_energy_scale_shift", "pair_potential", "total_energy_sum")
_ACTIVATIONS = {"silu": "silu", "tanh": "tanh", "SiLU": "silu", "Tanh": "tanh", "ReLU": "relu",
                "Sigmoid": "sigmoid", "abs": "abs", "relu": "relu", "sigmoid": "sigmoid"}


def _kind(module) -> str:
    return type(module).__name__


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise UnsupportedNequIPModel(what)


def _act_name(fn) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    _require(name in _ACTIVATIONS, f"activation {fn!r} has no md_accel equivalent")
    return _ACTIVATIONS[name]


def _linear(lin) -> Tuple[Dict, torch.Tensor]:
    return linear_of(lin, UnsupportedNequIPModel)


def _species_linear(sc, emb: torch.Tensor) -> Tuple[Dict, torch.Tensor]:
    """e3nn ``FullyConnectedTensorProduct(h, T x 0e)`` ('uvw') with the type embedding as
    second operand -> one linear map per species."""
    from e3nn.o3 import wigner_3j

    irreps_in, irreps_out = irreps_of(sc.irreps_in1), irreps_of(sc.irreps_out)
    n_types = emb.shape[1]
    _require(str(irreps_of(sc.irreps_in2)) == f"{n_types}x0e", f"self-connection second operand {sc.irreps_in2}")
    ins = linear_instructions(irreps_in, irreps_out)
    _require(len(ins) == len(sc.instructions), f"self-connection {sc} with non-default instructions")
    weights, pws = [], []
    off = 0
    for (i, o, _), e in zip(ins, sc.instructions):
        _require(e.i_in1 == i and e.i_in2 == 0 and e.i_out == o and e.connection_mode == "uvw" and e.has_weight,
                 f"self-connection instruction {e}")
        m1, mo = irreps_in[i].mul, irreps_out[o].mul
        w = sc.weight.detach().double()[off: off + m1 * n_types * mo].view(m1, n_types, mo)
        off += m1 * n_types * mo
        l = irreps_in[i].ir.l
        c = wigner_3j(l, 0, l, dtype=torch.float64)[:, 0, :]
        _require(torch.allclose(c, torch.eye(2 * l + 1, dtype=torch.float64) * c[0, 0], rtol=0, atol=1e-15),
                 "unexpected w3j(l, 0, l)")
        pws.append(float(e.path_weight) * float(c[0, 0]))
        weights.append(torch.einsum("uvw,sv->suw", w, emb).reshape(emb.shape[0], -1))
    spec = {"irreps_in": str(irreps_in), "irreps_out": str(irreps_out), "num_species": emb.shape[0],
            "path_weights": pws}
    return spec, torch.cat(weights, dim=1)


def _scalar_mlp(fn) -> Tuple[Dict, Dict[str, torch.Tensor]]:
    """nequip ``ScalarMLPFunction`` -> ``ScalarMLP`` spec and tensors."""
    _require(_kind(fn) == "ScalarMLPFunction", f"MLP {_kind(fn)} (e.g. DeepLinearMLP) is not supported")
    hs: List[int] = []
    alphas: List[float] = []
    acts = set()
    tensors = {}
    for layer in fn.mlp:
        if _kind(layer) == "ScalarLinearLayer":
            _require(getattr(layer, "bias", None) is None, "MLP layer with bias")
            if not hs:
                hs.append(int(layer.in_features))
            _require(int(layer.in_features) == hs[-1], "MLP layer widths do not chain")
            tensors[f"layers.{len(alphas)}.weight"] = layer.weight.detach().double()
            alphas.append(float(layer.alpha))
            hs.append(int(layer.out_features))
        else:
            acts.add(_act_name(layer))
    _require(len(acts) <= 1 and (len(acts) == 1) == (len(alphas) > 1), f"MLP {fn} activation layout")
    return {"kind": "scalar_mlp", "hs": hs, "alphas": alphas, "act": acts.pop() if acts else "silu"}, tensors


def _gate(gate) -> Dict:
    """e3nn ``Gate`` -> ``Gate`` spec with the module's own normalisation constants."""
    def acts(a) -> Tuple[List[str], List[float]]:
        names = [_act_name(f.f) for f in a.acts]
        csts = [1.0 if f._is_id else float(f.cst) for f in a.acts]
        return names, csts

    s_names, s_csts = acts(gate.act_scalars)
    g_names, g_csts = acts(gate.act_gates)
    # the activations' irreps keep the blocks (one activation each); Gate's own are simplified
    return {"irreps_scalars": str(irreps_of(gate.act_scalars.irreps_in)), "act_scalars": s_names,
            "irreps_gates": str(irreps_of(gate.act_gates.irreps_in)), "act_gates": g_names,
            "irreps_gated": str(irreps_of(gate.irreps_gated)), "scalar_csts": s_csts, "gate_csts": g_csts}


def _per_type(t: torch.Tensor, n: int) -> torch.Tensor:
    t = t.detach().double().reshape(-1)
    return t.expand(n).clone() if t.numel() == 1 else t.clone()


def convert_nequip(source, dtype: torch.dtype = torch.float64) -> NequIPLike:
    """Map a loaded nequip ``NequIPGNNModel`` (a ``NequIPSource`` or a path) onto ``NequIPLike``."""
    from ase.data import atomic_numbers

    src = source if isinstance(source, NequIPSource) else load_nequip(source)
    gm = src.model
    _require(_kind(gm) == "GraphModel" and _kind(gm.model) == "ForceStressOutput",
             f"expected a GraphModel with ForceStressOutput, got {_kind(gm)}")
    f = gm.model.func
    mods = dict(f.named_children())
    n_layers = sum(1 for k in mods if k.startswith("layer") and k.endswith("_convnet"))
    expected = list(_TOP) + [f"layer{k}_convnet" for k in range(n_layers)] + list(_TAIL)
    unknown = [k for k in mods if k not in expected]
    _require(not unknown, f"nequip modules {unknown} have no md_accel mapping")

    type_names = str(gm.metadata["type_names"]).split(" ")
    for t in type_names:
        _require(t in atomic_numbers, f"type name {t!r} is not a chemical symbol")
    n = len(type_names)
    r_max = float(gm.metadata["r_max"])
    state: Dict[str, torch.Tensor] = {}

    # edges: r/r_max, Bessel sin(w pi r / r_max) * 2/r_max / r (incl. `factor`), polynomial cutoff
    _require(mods["edge_norm"]._rmax_recip.numel() == 1, "per_edge_type_cutoff is not supported")
    _require(abs(float(mods["edge_norm"]._rmax_recip) * r_max - 1) < 1e-12, "edge_norm r_max != metadata r_max")
    be = mods["bessel_encode"]
    _require(_kind(be) == "BesselEdgeLengthEncoding", f"edge length encoding {_kind(be)}")
    _require(abs(float(mods["factor"].factor) * r_max ** 2 / (2 * math.pi) - 1) < 1e-12,
             "edge embedding factor != 2 pi / r_max^2")
    w = be.bessel_weights.detach().double().reshape(-1)
    state["radial_basis.coeffs"] = w * math.pi / r_max
    sh_mod = mods["spharm"]
    _require(sh_mod.sh.normalize and sh_mod.sh.normalization == "component",
             "spherical harmonics must be normalize=True, normalization='component'")
    irreps_sh = irreps_of(sh_mod.irreps_edge_sh)
    _require(irreps_sh == Irreps.spherical_harmonics(irreps_sh.lmax, -1), f"edge SH irreps {irreps_sh}")

    te = mods["type_embed"]
    _require(_kind(te) == "NodeTypeEmbed" and te.set_features, "type embedding must also set the node features")
    emb = te.embed_module.weight.detach().double()  # [T, F]
    spec: Dict = {
        "elements": type_names, "cutoff": r_max,
        "radial_basis": {"name": "bessel", "num_basis": int(w.numel()),
                         "trainable": isinstance(be.bessel_weights, torch.nn.Parameter)},
        "cutoff_fn": {"name": "polynomial", "p": float(be.cutoff.p)},
        "sh": {"lmax": irreps_sh.lmax, "parity": -1, "normalize": True},
        "irreps_embed": f"{emb.shape[1]}x0e",
    }
    state["embedding.weight"] = emb * math.sqrt(n)  # SpeciesEmbedding scales by n**-0.5

    layers = []
    for k in range(n_layers):
        layer = mods[f"layer{k}_convnet"]
        conv = layer.conv
        _require(_kind(layer) == "ConvNetLayer" and _kind(conv) == "InteractionBlock",
                 f"layer {k}: {_kind(layer)}/{_kind(conv)}")
        prefix = f"layers.{k}."
        tp = conv.tp_scatter.tp
        instructions = []
        for e in tp.instructions:
            _require(e.connection_mode == "uvu" and e.has_weight, f"tensor product instruction {e}")
            _require(abs(e.path_weight - math.sqrt(2 * irreps_of(tp.irreps_out)[e.i_out].ir.l + 1)) < 1e-12,
                     f"non-default tensor product path weight {e.path_weight}")
            instructions.append([int(e.i_in1), int(e.i_in2), int(e.i_out)])
        _require(irreps_of(tp.irreps_in2) == irreps_sh, "tensor product second input is not the edge SH")
        mlp_spec, mlp_t = _scalar_mlp(conv.edge_mlp)
        lin_in, state[prefix + "linear_in.weight"] = _linear(conv.linear_1)
        lin_out, state[prefix + "linear_out.weight"] = _linear(conv.linear_2)
        if conv.sc is not None:
            sc_spec, state[prefix + "species_sc.0.weight"] = _species_linear(conv.sc, emb)
            sc = {"kind": "species_linear", "linear": sc_spec}
        else:
            sc = {"kind": "none"}
        gate = layer.equivariant_nonlin
        _require(_kind(gate) == "Gate", f"layer {k}: nonlinearity {_kind(gate)}")
        layers.append({
            "irreps_in": str(irreps_of(tp.irreps_in1)), "irreps_tp_out": str(irreps_of(tp.irreps_out)),
            "instructions": instructions, "radial_mlp": mlp_spec, "linear_in": lin_in, "linear_out": lin_out,
            "self_connection": sc, "gate": _gate(gate), "resnet": bool(layer.resnet),
            "sender_norm": True, "num_species": n,
        })
        state.update({f"{prefix}radial_mlp.{key}": v for key, v in mlp_t.items()})
        state[prefix + "sender_scale"] = _per_type(conv.avg_num_neighbors_norm.norm_const, n)
        state[prefix + "denominator"] = torch.ones(1, dtype=torch.float64)
    spec["layers"] = layers

    ro_spec, ro_t = _scalar_mlp(mods["per_atom_energy_readout"].mlp_module)
    _require(ro_spec["hs"][-1] == 1, "readout must give one energy per atom")
    spec["readout"] = ro_spec
    state.update({f"readout.{key}": v for key, v in ro_t.items()})
    ss = mods["per_type_energy_scale_shift"]
    _require(_kind(ss) == "PerTypeScaleShift", f"energy scale/shift {_kind(ss)}")
    state["scale_shift.scale"] = _per_type(ss.scales, n) if ss.has_scales else torch.ones(n, dtype=torch.float64)
    state["scale_shift.shift"] = _per_type(ss.shifts, n) if ss.has_shifts else torch.zeros(n, dtype=torch.float64)
    spec["pair"] = []
    if "pair_potential" in mods:
        pp = mods["pair_potential"]
        _require(_kind(pp) == "ZBL", f"pair potential {_kind(pp)} is not supported (supported: ZBL)")
        spec["pair"].append({"name": "zbl", "atomic_numbers": [int(round(float(z))) for z in pp.atomic_numbers],
                             "prefactor": float(pp._qqr2exesquare), "p": float(pp.cutoff.p)})
    _require(_kind(mods["total_energy_sum"]) == "AtomwiseReduce", "total energy must be a plain sum")

    pot = NequIPLike(spec).double()
    pot.load_state_dict(complete_state(pot, state), strict=True)
    return pot.to(dtype).eval()


