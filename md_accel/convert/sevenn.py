"""SevenNet checkpoint -> md_accel ``nequip_like`` potential.

The checkpoint is loaded and the model built with sevenn itself (so its backward-compatibility
patches of old checkpoints apply); the converter then reads the built modules one by one and
refuses anything it does not map exactly. SevenNet specifics that matter:

* edges: sevenn's ``edge_idx[0]`` is the receiver and ``[1]`` the sender; its edge vector is
  ``pos[sender] - pos[receiver] + shift``, i.e. md_accel's ``edge_vec`` (no translation needed
  in the model, only in how graphs are fed).
* the convolution divides the neighbour sum by a per-layer ``denominator`` stored in the state
  dict (sqrt of the average neighbour count for SevenNet-0, an explicit number for l3i5/MF-0).
* gates: l > 0 irreps are gated by extra scalars, all even (``0e``) when even scalars exist;
  e3nn's ``Gate`` sorts its input (scalars, gates, gated) by irrep.
* radial: Bessel basis with trainable wavenumbers, times an XPLOR (SevenNet-0, MF-0) or
  polynomial p=6 (l3i5) envelope; spherical harmonics of the raw (SevenNet-0 of 22 May 2024)
  or normalised edge vector (``_normalize_sph``).
* multi-fidelity (MF-0): a one-hot of the modality is appended to the inputs of some linears
  and the shift is per modality; the modality is fixed at conversion, which turns those inputs
  into constant biases (exact: one-hot products are row lookups).
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from ..model.linear import linear_instructions
from ..model.nequip_like import NequIPLike
from ..o3 import Irreps
from .state import complete_state

KNOWN_MODELS = {
    "sevennet-0": ("SevenNet_0__11Jul2024", "checkpoint_sevennet_0.pth"),
    "sevennet-0-22may2024": ("SevenNet_0__22May2024", "checkpoint_sevennet_0.pth"),
    "sevennet-l3i5": ("SevenNet_l3i5", "checkpoint_l3i5.pth"),
    "sevennet-mf-0": ("SevenNet_MF_0", "checkpoint_sevennet_mf_0.pth"),
}
_ALIASES = {"sevennet-0-11jul2024": "sevennet-0"}


class UnsupportedSevenNetModel(ValueError):
    """The checkpoint uses a sevenn option this converter does not map."""


def resolve_checkpoint(name_or_path) -> str:
    """A ``.pth`` path, or one of ``KNOWN_MODELS`` (``7net-`` works for ``sevennet-``)."""
    text = str(name_or_path)
    if os.path.isfile(text):
        return text
    key = text.lower().replace("_", "-")
    if key.startswith("7net-"):
        key = "sevennet-" + key[len("7net-"):]
    key = _ALIASES.get(key, key)
    if key not in KNOWN_MODELS:
        raise ValueError(f"unknown SevenNet model {text!r} (not a file); known names: {sorted(KNOWN_MODELS)}")
    import sevenn

    folder, fname = KNOWN_MODELS[key]
    path = os.path.join(os.path.dirname(sevenn.__file__), "pretrained_potentials", folder, fname)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{key}: checkpoint {path} is not in the installed sevenn package")
    return path


class SevenNetSource(NamedTuple):
    """A checkpoint as sevenn loads it: path, resolved config, and the e3nn-backend model."""

    path: str
    config: Dict
    model: torch.nn.Module


def load_sevenn(name_or_path, dtype: torch.dtype = torch.float64) -> SevenNetSource:
    """Load and build the model with sevenn (CPU, eval mode), then cast it to ``dtype``.

    e3nn bakes its Clebsch-Gordan tensors into buffers in the default dtype (float32) and sevenn
    stores them in the checkpoint, so a cast alone would leave float32-rounded coefficients
    (~1e-9 relative error) in a "float64" model: they are recomputed in ``dtype`` (keeping each
    stored tensor's sign, which old checkpoints flip).
    """
    from sevenn.util import load_checkpoint

    path = resolve_checkpoint(name_or_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cp = load_checkpoint(path)
        config = cp.config
        _check_config(config)
        model = cp.build_model()
    model = model.to(dtype).eval()
    if dtype == torch.float64:
        _recompute_w3j(model, dtype)
    return SevenNetSource(path, config, model)


def _recompute_w3j(model: torch.nn.Module, dtype: torch.dtype) -> None:
    from e3nn.o3 import wigner_3j

    for module in model.modules():
        for name, buf in list(module._buffers.items()):
            m = _W3J_BUFFER.fullmatch(name)
            if m is None or buf is None:
                continue
            exact = wigner_3j(*(int(g) for g in m.groups()), dtype=dtype)
            sign = 1.0 if float((exact * buf.to(dtype)).sum()) >= 0 else -1.0
            if not torch.allclose(buf.to(dtype), sign * exact, atol=1e-6):
                raise RuntimeError(f"unexpected Clebsch-Gordan buffer {name} in the sevenn model")
            module._buffers[name] = sign * exact


_W3J_BUFFER = re.compile(r"_w3j_(\d+)_(\d+)_(\d+)")


def _source(name_or_source) -> SevenNetSource:
    return name_or_source if isinstance(name_or_source, SevenNetSource) else load_sevenn(name_or_source)


def _check_config(config: Dict) -> None:
    def bad(option: str, value, supported) -> None:
        raise UnsupportedSevenNetModel(
            f"sevenn option {option}={value!r} is not supported by md_accel (supported: {supported})")

    if config.get("_model_type", "E3_equivariant_model") != "E3_equivariant_model":
        bad("_model_type", config.get("_model_type"), "E3_equivariant_model")
    if config.get("interaction_type", "nequip") != "nequip":
        bad("interaction_type", config["interaction_type"], "nequip")
    sc = config.get("self_connection_type", "linear")
    for value in [sc] if isinstance(sc, str) else sc:
        if value != "linear":
            bad("self_connection_type", value, "linear")
    if config.get("use_bias_in_linear", False):
        bad("use_bias_in_linear", True, "False")
    if config.get("use_modal_node_embedding", False):
        bad("use_modal_node_embedding", True, "False")
    rb = config["radial_basis"].get("radial_basis_name")
    if rb != "bessel":
        bad("radial_basis", rb, "bessel")
    cf = config["cutoff_function"].get("cutoff_function_name")
    if cf not in ("poly_cut", "XPLOR"):
        bad("cutoff_function", cf, "poly_cut, XPLOR")


def _activation_name(fn) -> str:
    """Name of a sevenn activation callable (possibly wrapped in e3nn's normalize2mom)."""
    from sevenn._const import ACTIVATION

    inner = getattr(fn, "f", fn)
    for name, f in ACTIVATION.items():
        if f is inner:
            return name
    raise UnsupportedSevenNetModel(f"activation {inner!r} has no md_accel equivalent")


def _linear(lin, n_x_blocks: Optional[int] = None, modal_idx: Optional[int] = None) -> Tuple[Dict, Dict]:
    """Spec and tensors of an e3nn ``Linear``; with ``modal_idx`` the trailing modality one-hot
    block(s) of its input (all blocks from ``n_x_blocks`` on) are folded into the bias."""
    irreps_in, irreps_out = Irreps(str(lin.irreps_in)), Irreps(str(lin.irreps_out))
    weight = lin.weight.detach().double()
    ins = linear_instructions(irreps_in, irreps_out)
    weighted = [e for e in lin.instructions if e.i_in != -1]
    if len(weighted) != len(ins) or not all(_same_instruction(i, o, pw, e) for (i, o, pw), e in zip(ins, weighted)):
        raise UnsupportedSevenNetModel(f"e3nn Linear {lin} has non-default instructions")
    bias_e3nn = lin.bias.detach().double() if lin.bias_numel > 0 else None
    if modal_idx is None:
        spec = {"irreps_in": str(irreps_in), "irreps_out": str(irreps_out), "biases": bias_e3nn is not None}
        return spec, {"weight": weight, **({"bias": bias_e3nn} if bias_e3nn is not None else {})}
    x_irreps = Irreps(irreps_in[:n_x_blocks])
    scalar_blocks = [o for o, mo in enumerate(irreps_out) if mo.ir.l == 0 and mo.ir.p == 1 and mo.mul > 0]
    bias_off = {o: sum(irreps_out[b].dim for b in scalar_blocks if b < o) for o in scalar_blocks}
    bias = torch.zeros(sum(irreps_out[o].dim for o in scalar_blocks), dtype=torch.float64)
    if bias_e3nn is not None:
        bias += bias_e3nn
    w_x: List[torch.Tensor] = []
    pws: List[float] = []
    off = 0
    for i, o, pw in ins:
        n = irreps_in[i].mul * irreps_out[o].mul
        w = weight[off: off + n]
        off += n
        if i < n_x_blocks:
            w_x.append(w)
            pws.append(pw)
        else:  # one-hot modality block: its product with the fixed one-hot is one weight row
            w = w.view(irreps_in[i].mul, irreps_out[o].mul)
            bias[bias_off[o]: bias_off[o] + irreps_out[o].dim] += w[modal_idx] * pw
    spec = {"irreps_in": str(x_irreps), "irreps_out": str(irreps_out), "biases": True, "path_weights": pws}
    return spec, {"weight": torch.cat(w_x) if w_x else weight[:0], "bias": bias}


def _same_instruction(i: int, o: int, pw: float, e) -> bool:
    return e.i_in == i and e.i_out == o and abs(e.path_weight - pw) <= 1e-15 * abs(pw)


def _mlp(fcn) -> Tuple[Dict, Dict]:
    hs = [int(h) for h in fcn.hs]
    act = _activation_name(fcn.layer0.act) if len(hs) > 2 else "identity"
    for k in range(len(hs) - 1):
        layer = getattr(fcn, f"layer{k}")
        if layer.var_in != 1 or layer.var_out != 1:
            raise UnsupportedSevenNetModel("FullyConnectedNet with variance_in/out != 1")
    tensors = {f"layers.{k}.weight": getattr(fcn, f"layer{k}").weight.detach().double() for k in range(len(hs) - 1)}
    return {"hs": hs, "act": act}, tensors


def _paths_irreps(paths) -> str:
    """Irreps of an e3nn ``Activation``'s ``paths`` (``(mul, (l, p), act)``), blocks kept."""
    return str(Irreps([(mul, (l, p)) for mul, (l, p), _ in paths]))


def _modal_index(config: Dict, modal: Optional[str]) -> Optional[int]:
    modal_map = config.get("_modal_map") or {}
    if not config.get("use_modality", False) or not modal_map:
        if modal is not None:
            raise ValueError(f"modal={modal!r} given but this SevenNet model has no modalities")
        return None
    if modal is None:
        raise ValueError(f"this is a multi-fidelity SevenNet model: choose modal= one of {sorted(modal_map)}")
    for name, idx in modal_map.items():
        if name.lower() == str(modal).lower():
            return int(idx)
    raise ValueError(f"unknown modal {modal!r} for this SevenNet model; available: {sorted(modal_map)}")


def _elements(config: Dict) -> List[str]:
    from ase.data import chemical_symbols

    type_map = config["_type_map"]
    elements = [""] * len(type_map)
    for z, idx in type_map.items():
        elements[int(idx)] = chemical_symbols[int(z)]
    return elements


def _edge_spec(model) -> Dict:
    from sevenn.nn.edge_embedding import BesselBasis, PolynomialCutoff, XPLORCutoff

    emb = model._modules["edge_embedding"]
    basis, env, sph = emb.basis_function, emb.cutoff_function, emb.spherical
    if not isinstance(basis, BesselBasis):
        raise UnsupportedSevenNetModel(f"radial basis {type(basis).__name__}")
    out: Dict = {"radial_basis": {"name": "bessel", "num_basis": basis.num_basis,
                                  "trainable": isinstance(basis.coeffs, torch.nn.Parameter)}}
    if isinstance(env, XPLORCutoff):
        out["cutoff_fn"] = {"name": "xplor", "r_on": float(env.r_on)}
    elif isinstance(env, PolynomialCutoff):
        out["cutoff_fn"] = {"name": "polynomial", "p": float(env.p)}
    else:
        raise UnsupportedSevenNetModel(f"cutoff function {type(env).__name__}")
    if sph.sph.normalization != "component":
        raise UnsupportedSevenNetModel(f"spherical harmonics normalization {sph.sph.normalization!r}")
    irreps_sh = sph.irreps_out
    parity = irreps_sh[1].ir.p if len(irreps_sh) > 1 else -1
    out["sh"] = {"lmax": int(sph.lmax), "parity": int(parity), "normalize": bool(sph.sph.normalize)}
    return out


def convert_sevenn(name_or_path, modal: Optional[str] = None, dtype: torch.dtype = torch.float64) -> NequIPLike:
    """Convert a SevenNet checkpoint (name from ``KNOWN_MODELS``, ``.pth`` path, or a loaded
    ``SevenNetSource``) to a ``nequip_like`` potential in ``dtype``; ``modal`` picks the
    fidelity of multi-fidelity models."""
    src = _source(name_or_path)
    config, model = src.config, src.model
    modal_idx = _modal_index(config, modal)
    mods = model._modules
    _check_modules(mods, int(config["num_convolution_layer"]))
    elements = _elements(config)
    state: Dict[str, torch.Tensor] = {}
    spec: Dict = {"type": "nequip_like", "elements": elements, "cutoff": float(config["cutoff"])}
    spec.update(_edge_spec(model))
    state["radial_basis.coeffs"] = mods["edge_embedding"].basis_function.coeffs.detach().double()

    emb = mods["onehot_to_feature_x"]
    if emb.num_modalities > 1:
        raise UnsupportedSevenNetModel("modality input to the node embedding (use_modal_node_embedding)")
    emb_spec, emb_t = _linear(emb.linear)
    if "bias" in emb_t:
        raise UnsupportedSevenNetModel("bias in the node embedding")
    n_species = Irreps(emb_spec["irreps_in"]).dim
    spec["irreps_embed"] = emb_spec["irreps_out"]
    state["embedding.weight"] = emb_t["weight"].view(n_species, -1)

    def modal_linear(module) -> Tuple[Dict, Dict]:
        if module.num_modalities > 1:
            n_x = len(Irreps(str(module._irreps_in_wo_modal)))
            return _linear(module.linear, n_x, modal_idx)
        return _linear(module.linear)

    layers = []
    n_layers = int(config["num_convolution_layer"])
    for t in range(n_layers):
        prefix = f"layers.{t}."
        sc_mod = mods[f"{t}_self_connection_intro"]
        sc_spec, sc_t = _linear(sc_mod.linear)
        lin_in_spec, lin_in_t = modal_linear(mods[f"{t}_self_interaction_1"])
        conv = mods[f"{t}_convolution"]
        kw = conv.convolution_kwargs
        instructions = []
        for ins in kw["instructions"]:
            i1, i2, io, mode, has_w = ins[:5]
            if mode != "uvu" or not has_w:
                raise UnsupportedSevenNetModel(f"convolution instruction {ins}")
            instructions.append([int(i1), int(i2), int(io)])
        mlp_spec, mlp_t = _mlp(conv.weight_nn)
        lin_out_spec, lin_out_t = modal_linear(mods[f"{t}_self_interaction_2"])
        gate = mods[f"{t}_equivariant_gate"].gate
        gate_spec = {
            "irreps_scalars": _paths_irreps(gate.act_scalars.paths),
            "act_scalars": [_activation_name(a) for _, _, a in gate.act_scalars.paths],
            "irreps_gates": _paths_irreps(gate.act_gates.paths),
            "act_gates": [_activation_name(a) for _, _, a in gate.act_gates.paths],
            "irreps_gated": str(gate.irreps_gated),
        }
        layers.append({
            "irreps_in": str(kw["irreps_in1"]),
            "irreps_tp_out": str(kw["irreps_out"]),
            "instructions": instructions,
            "radial_mlp": mlp_spec,
            "linear_in": lin_in_spec,
            "linear_out": lin_out_spec,
            "self_connection": {"kind": "linear", "linear": sc_spec},
            "gate": gate_spec,
            "resnet": False,
        })
        for name, tensors in (("linear_in", lin_in_t), ("linear_out", lin_out_t), ("self_connection", sc_t)):
            for k, v in tensors.items():
                state[f"{prefix}{name}.{k}"] = v
        for k, v in mlp_t.items():
            state[f"{prefix}radial_mlp.{k}"] = v
        state[f"{prefix}denominator"] = conv.denominator.detach().double().reshape(1)
    spec["layers"] = layers

    if "readout_FCN" in mods:
        ro_spec, ro_t = _mlp(mods["readout_FCN"].fcn)
        spec["readout"] = {"kind": "mlp", **ro_spec}
        state.update({f"readout.{k}": v for k, v in ro_t.items()})
    else:
        linears = []
        for k, name in enumerate(("reduce_input_to_hidden", "reduce_hidden_to_energy")):
            ls, lt = modal_linear(mods[name])
            linears.append(ls)
            state.update({f"readout.{k}.{n}": v for n, v in lt.items()})
        spec["readout"] = {"kind": "linear", "linears": linears}

    scale, shift = _scale_shift(mods["rescale_atomic_energy"], len(elements), modal_idx)
    state["scale_shift.scale"], state["scale_shift.shift"] = scale, shift

    pot = NequIPLike(spec).double()  # load_state_dict copies into the existing dtype
    pot.load_state_dict(complete_state(pot, state), strict=True)
    return pot.to(dtype).eval()


_MODULE_NAMES = {"edge_embedding", "onehot_idx_to_onehot", "one_hot_modality", "onehot_to_feature_x",
                 "reduce_input_to_hidden", "reduce_hidden_to_energy", "readout_FCN", "rescale_atomic_energy",
                 "reduce_total_enegy", "force_output"}
_LAYER_MODULES = ("self_connection_intro", "self_interaction_1", "convolution", "self_interaction_2",
                  "self_connection_outro", "equivariant_gate")


def _check_modules(mods, n_layers: int) -> None:
    """Refuse built models with modules the converter does not know (rather than drop them)."""
    from sevenn.nn.convolution import IrrepsConvolution

    known = _MODULE_NAMES | {f"{t}_{m}" for t in range(n_layers) for m in _LAYER_MODULES}
    unknown = [k for k in mods if k not in known]
    if unknown:
        raise UnsupportedSevenNetModel(f"sevenn modules {unknown} have no md_accel mapping")
    for t in range(n_layers):
        if type(mods[f"{t}_convolution"]) is not IrrepsConvolution:
            raise UnsupportedSevenNetModel(f"convolution {type(mods[f'{t}_convolution']).__name__} (build with e3nn)")


def _scale_shift(module, n: int, modal_idx: Optional[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    from sevenn.nn.scale import ModalWiseRescale, Rescale, SpeciesWiseRescale

    shift = module.shift.detach().double()
    scale = module.scale.detach().double()
    if isinstance(module, ModalWiseRescale):
        if module.use_modal_wise_shift:
            shift = shift[modal_idx]
        if module.use_modal_wise_scale:
            scale = scale[modal_idx]
    elif not isinstance(module, (Rescale, SpeciesWiseRescale)):
        raise UnsupportedSevenNetModel(f"energy rescaling {type(module).__name__}")
    return _per_species(scale, n), _per_species(shift, n)


def _per_species(values: torch.Tensor, n: int) -> torch.Tensor:
    return values.expand(n).clone() if values.numel() == 1 else values


def cast_species_onehot(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """``model`` with forward hooks casting the output of sevenn's species one-hot embedding
    (hard-coded float32 by ``.float()``) to ``dtype``; returns ``model``."""
    from sevenn.nn.node_embedding import OnehotEmbedding

    def cast(module, inputs, data):
        for key in (module.key_output, module.key_additional_output):
            if key is not None and key in data:
                data[key] = data[key].to(dtype)
        return data

    for module in model.modules():
        if isinstance(module, OnehotEmbedding):
            module.register_forward_hook(cast)
    return model


def sevenn_calculator(name_or_path, modal: Optional[str] = None, dtype: torch.dtype = torch.float64):
    """sevenn's own ``SevenNetCalculator`` (CPU) running its model in ``dtype`` (the dtype of
    ``name_or_path`` if that is a loaded ``SevenNetSource``).

    SevenNet models are float32. For float64 the model is built in float64 (``load_sevenn``) and
    two places where sevenn hard-codes float32 are bypassed: the input graph (``dtype_correct``
    casts edge vectors to float32, so the graph from sevenn's own builder is cast to ``dtype``
    instead) and the species one-hot (``.float()``; a forward hook casts it). Every other
    operation is sevenn's.
    """
    from ase.calculators.calculator import Calculator, all_changes
    from sevenn.atom_graph_data import AtomGraphData
    from sevenn.calculator import SevenNetCalculator
    from sevenn.train.dataload import unlabeled_atoms_to_graph
    from sevenn.util import dtype_correct

    src = name_or_path if isinstance(name_or_path, SevenNetSource) else load_sevenn(name_or_path, dtype)
    dtype = next(iter(src.model.parameters())).dtype

    class _Calc(SevenNetCalculator):
        def calculate(self, atoms=None, properties=None, system_changes=all_changes):
            Calculator.calculate(self, atoms, properties, system_changes)
            graph = unlabeled_atoms_to_graph(atoms, self.cutoff, with_shift=False)
            data = AtomGraphData(**{k: dtype_correct(v, float_dtype=dtype) for k, v in graph.items()})
            if self.modal:
                data["data_modality"] = self.modal
            self.results = self.output_to_results(self.model(data))

    # a model of its own for the hooks (not a deepcopy: e3nn modules may hold ScriptFunctions,
    # which cannot be copied once another library, e.g. nequip, switched e3nn to scripting)
    model = cast_species_onehot(load_sevenn(src.path, dtype).model, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _Calc(model=model, file_type="model_instance", modal=modal, device="cpu")
