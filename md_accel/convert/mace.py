"""mace-torch 0.3.16 model (``.model``: ``torch.save`` of the module) -> md_accel ``mace`` potential.

The file is unpickled with mace itself; the converter then reads the loaded modules by class
name and attributes and refuses by name whatever it does not map exactly (details in
``.notes/mace_math.md``). What matters:

* mace's edge vector is ``pos[receiver] - pos[sender]`` = md_accel's ``-edge_vec`` (handled in
  the model, which takes harmonics of ``-edge_vec``);
* the one-hot node attributes become species indices: the skip tensor product with the
  one-hot is a per-species linear map (``SpeciesLinear``), the embedding a row lookup;
* e3nn 0.4.4's 3j symbols differ in sign from md_accel's for some odd ``l1 + l2 + l3``; a
  convolution path where they do gets its weight columns (last radial-MLP layer) negated;
* symmetric-contraction coupling tensors are copied, never regenerated (their basis depends on
  how mace built them);
* multi-head models: one head is converted (its E0, scale/shift and readout slices).
"""
from __future__ import annotations

import math
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from ..model.activations import second_moment_constant
from ..model.mace import MACE
from ..o3 import Irreps
from ..o3.wigner import wigner_3j
from ..model.linear import linear_instructions
from .e3nn_modules import irreps_of, linear_of
from .state import complete_state

EXTENSIONS = (".model",)
SUPPORTED_MODELS = ("MACE", "ScaleShiftMACE")
_PLAIN = ("RealAgnosticInteractionBlock", "RealAgnosticDensityInteractionBlock")
_RESIDUAL = ("RealAgnosticResidualInteractionBlock", "RealAgnosticDensityResidualInteractionBlock")
_ACTS = {"silu": "silu", "tanh": "tanh", "relu": "relu", "sigmoid": "sigmoid", "abs": "abs"}


class UnsupportedMACEModel(ValueError):
    """The file holds a mace model (or option) this converter does not map."""


class MACESource(NamedTuple):
    """A loaded mace model and where it came from."""

    path: str
    model: torch.nn.Module


def _require(cond: bool, what: str) -> None:
    if not cond:
        raise UnsupportedMACEModel(what)


def _kind(module) -> str:
    return type(module).__name__


def load_mace(path) -> MACESource:
    """Unpickle a mace ``.model`` file (CPU) and check that it is a supported MACE."""
    try:
        import mace  # noqa: F401  (sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which e3nn 0.4.4 needs)
    except ImportError as e:
        raise ValueError(f"converting MACE models needs mace-torch (pip install mace-torch==0.3.16; it pins "
                         f"e3nn 0.4.4, so use a separate environment): {e}") from e

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"mace model file {path!r} does not exist")
    try:
        model = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch.load raises many kinds on foreign or damaged files
        raise ValueError(f"{path} is not a readable mace model file (torch.save of a MACE module): {e!r}") from e
    if not isinstance(model, torch.nn.Module) or _kind(model) not in SUPPORTED_MODELS:
        raise UnsupportedMACEModel(f"{path} holds a {_kind(model)}, not a mace model; supported: "
                                   f"{', '.join(SUPPORTED_MODELS)}")
    return MACESource(path, model.eval())


def heads(model) -> List[str]:
    return list(getattr(model, "heads", None) or ["Default"])


def head_index(model, head: Optional[str]) -> int:
    """Position of ``head`` in the model's heads (the only one when ``None`` and single-head)."""
    names = heads(model)
    if head is None:
        if len(names) == 1:
            return 0
        raise ValueError(f"this mace model has {len(names)} heads; choose one with head=NAME "
                         f"(-O head=NAME on the command line): {names}")
    if head not in names:
        raise ValueError(f"head {head!r} is not in this mace model; its heads: {names}")
    return names.index(head)


def mace_calculator(model, head: Optional[str] = None):
    """mace's own ASE calculator on a float64 copy of ``model`` (CPU)."""
    import io
    import logging

    from mace.calculators import MACECalculator

    buf = io.BytesIO()  # a pickle round trip: deepcopy fails on mace's zeroed-weight parameters
    torch.save(model, buf)
    buf.seek(0)
    model = torch.load(buf, map_location="cpu", weights_only=False).double()
    previous = logging.getLogger().level
    logging.getLogger().setLevel(logging.WARNING)  # mace logs its setup at INFO
    class _Calc(MACECalculator):
        # mace's ZBL computes 14.3996 * Z_u * Z_v (integers) in the process's default dtype:
        # float32 rounding in a float64 model unless the default is float64 while it runs
        def calculate(self, *args, **kwargs):
            previous_dtype = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                super().calculate(*args, **kwargs)
            finally:
                torch.set_default_dtype(previous_dtype)

    try:
        return _Calc(models=model, device="cpu", default_dtype="float64",
                     head=heads(model)[head_index(model, head)])
    finally:
        logging.getLogger().setLevel(previous)


# -- module mapping ------------------------------------------------------------------------------

def _t(x) -> torch.Tensor:
    return x.detach().to(torch.float64).clone()


def _linear(lin) -> Tuple[Dict, torch.Tensor]:
    return linear_of(lin, UnsupportedMACEModel)


def _head_linear(lin, h: int, num_heads: int, out_per_head: int, in_slice: Optional[int] = None
                 ) -> Tuple[Dict, torch.Tensor]:
    """A readout linear restricted to head ``h``: output columns ``[h*k, (h+1)*k)`` of its
    scalar output block (``k = out_per_head``), inputs restricted to the ``in_slice``-wide
    slice of head ``h`` when given (the rows ``mask_head`` keeps); e3nn's path weights kept."""
    spec, w = _linear(lin)
    irreps_in, irreps_out = Irreps(spec["irreps_in"]), Irreps(spec["irreps_out"])
    _require(len(irreps_out) == 1 and irreps_out[0].ir.l == 0 and irreps_out[0].mul == num_heads * out_per_head,
             f"readout output {irreps_out} for {num_heads} heads")
    if in_slice is not None:
        _require(len(irreps_in) == 1 and irreps_in[0].mul == num_heads * in_slice,
                 f"readout hidden irreps {irreps_in} for {num_heads} heads")
    blocks, pws, off = [], [], 0
    for i, _, pw in linear_instructions(irreps_in, irreps_out):
        mi, mo = irreps_in[i].mul, irreps_out[0].mul
        blk = w[off: off + mi * mo].view(mi, mo)[:, h * out_per_head:(h + 1) * out_per_head]
        off += mi * mo
        if in_slice is not None:
            blk = blk[h * in_slice:(h + 1) * in_slice]
        blocks.append(blk.reshape(-1))
        pws.append(pw)
    new_in = irreps_in if in_slice is None else Irreps(f"{in_slice}x0e")
    return ({"irreps_in": str(new_in), "irreps_out": f"{out_per_head}x0e", "biases": False, "path_weights": pws},
            torch.cat(blocks))


def _species_linear(tp, num_elements: int) -> Tuple[Dict, torch.Tensor]:
    """e3nn ``FullyConnectedTensorProduct(x, E x 0e)`` with the one-hot species -> a linear map
    per species: ``W_s = W[:, s, :]`` with path weight ``path_weight * w3j(l, 0, l)``."""
    _require(_kind(tp) == "FullyConnectedTensorProduct", f"skip connection {_kind(tp)}")
    irreps_in, irreps_out = irreps_of(tp.irreps_in1), irreps_of(tp.irreps_out)
    _require(str(irreps_of(tp.irreps_in2)) == f"{num_elements}x0e", f"skip connection second operand {tp.irreps_in2}")
    ins = linear_instructions(irreps_in, irreps_out)
    _require(len(ins) == len(tp.instructions), f"skip connection {tp} with non-default instructions")
    weights, pws, off = [], [], 0
    for (i, o, _), e in zip(ins, tp.instructions):
        _require(e.i_in1 == i and e.i_in2 == 0 and e.i_out == o and e.connection_mode == "uvw" and e.has_weight,
                 f"skip connection instruction {e}")
        m1, mo = irreps_in[i].mul, irreps_out[o].mul
        w = _t(tp.weight)[off: off + m1 * num_elements * mo].view(m1, num_elements, mo)
        off += m1 * num_elements * mo
        l = irreps_in[i].ir.l
        pws.append(float(e.path_weight) * float(wigner_3j(l, 0, l)[0, 0, 0]))
        weights.append(w.permute(1, 0, 2).reshape(num_elements, -1))
    spec = {"irreps_in": str(irreps_in), "irreps_out": str(irreps_out), "num_species": num_elements,
            "path_weights": pws}
    return spec, torch.cat(weights, dim=1)


def _fc_net(net, what: str) -> Tuple[List[int], List[torch.Tensor]]:
    """e3nn ``FullyConnectedNet`` with normalised SiLU -> ``RadialMLP`` widths and weights."""
    _require(_kind(net) == "FullyConnectedNet", f"{what}: {_kind(net)} is not supported")
    hs = [int(h) for h in net.hs]
    layers = [getattr(net, f"layer{k}") for k in range(len(hs) - 1)]
    for k, layer in enumerate(layers):
        act = getattr(layer, "act", None)
        if k < len(layers) - 1:
            _require(act is not None and getattr(act.f, "__name__", "") == "silu"
                     and abs(float(act.cst) - second_moment_constant("silu")) < 1e-15,
                     f"{what}: hidden activation {act} (supported: e3nn-normalised SiLU)")
        else:
            _require(act is None, f"{what}: activation after the last layer")
    return hs, [_t(layer.weight) for layer in layers]


def _conv(inter, irreps_sh: Irreps, hs_weights: List[torch.Tensor]) -> Dict:
    """The 'uvu' convolution; negates the weight columns of paths whose e3nn 0.4.4 3j symbol
    has the opposite sign of md_accel's (in ``hs_weights[-1]``, in place)."""
    from e3nn.o3 import wigner_3j as e3nn_w3j

    tp = inter.conv_tp
    _require(_kind(tp) == "TensorProduct", f"convolution {_kind(tp)} (cueq/oeq models: convert to e3nn first)")
    in1, in2, out = irreps_of(tp.irreps_in1), irreps_of(tp.irreps_in2), irreps_of(tp.irreps_out)
    _require(in2 == irreps_sh, f"convolution second operand {in2} is not the edge harmonics {irreps_sh}")
    instructions, off = [], 0
    for e in tp.instructions:
        _require(e.connection_mode == "uvu" and e.has_weight, f"convolution instruction {e}")
        _require(in2[e.i_in2].mul == 1, "convolution with edge attributes of multiplicity > 1")
        l1, l2, l3 = in1[e.i_in1].ir.l, in2[e.i_in2].ir.l, out[e.i_out].ir.l
        _require(abs(e.path_weight - math.sqrt(2 * l3 + 1)) < 1e-12, f"convolution path weight {e.path_weight}")
        mul = in1[e.i_in1].mul
        ref = e3nn_w3j(l1, l2, l3, dtype=torch.float64)
        ours = wigner_3j(l1, l2, l3)
        if (ref + ours).abs().max() < 1e-10 and ref.abs().max() > 1e-10:
            hs_weights[-1][:, off: off + mul] *= -1
        else:
            _require((ref - ours).abs().max() < 1e-10, f"3j symbol ({l1}, {l2}, {l3}) differs from e3nn's")
        off += mul
        instructions.append([int(e.i_in1), int(e.i_in2), int(e.i_out)])
    _require(off == tp.weight_numel, "convolution weights are not one per channel and path")
    return {"irreps_in1": str(in1), "irreps_out": str(out), "instructions": instructions}


def _product(prod, num_elements: int) -> Tuple[Dict, Dict[str, torch.Tensor]]:
    """mace's ``EquivariantProductBasisBlock`` -> ``SymmetricContraction`` spec and tensors."""
    sc = prod.symmetric_contractions
    _require(_kind(sc) == "SymmetricContraction" and hasattr(sc, "contractions"),
             f"symmetric contraction {_kind(sc)} (cueq models: convert to e3nn first)")
    in_irreps = irreps_of(sc.irreps_in)
    channels = in_irreps[0].mul
    _require(all(m.mul == channels for m in in_irreps), f"product input {in_irreps} with unequal multiplicities")
    agnostic = bool(getattr(prod, "use_agnostic_product", False))
    n_el = 1 if agnostic else num_elements
    out_dims, num_params, state = [], [], {}
    for r, c in enumerate(sc.contractions):
        nu_max = int(c.correlation)
        us = [getattr(c, f"U_matrix_{nu}") for nu in range(1, nu_max + 1)]
        ws = [c.weights[nu_max - 1 - nu] for nu in range(1, nu_max)] + [c.weights_max]
        us = [_t(u) if u.dim() == nu + 2 else _t(u).unsqueeze(0) for nu, u in enumerate(us, start=1)]
        _require(all(tuple(w.shape) == (n_el, u.shape[-1], channels) for u, w in zip(us, ws)),
                 "symmetric contraction weights do not match the coupling tensors")
        out_dims.append(int(us[0].shape[0]))
        num_params.append([int(u.shape[-1]) for u in us])
        for j, nu in enumerate(range(nu_max, 0, -1)):  # md_accel: orders.{j} holds nu = nu_max - j
            state[f"product.contractions.{r}.orders.{j}.u"] = us[nu - 1]
            state[f"product.contractions.{r}.orders.{j}.w"] = _t(ws[nu - 1])
    spec = {"in_dims": [m.ir.dim for m in in_irreps], "out_dims": out_dims, "channels": channels,
            "num_elements": n_el, "num_params": num_params, "agnostic": agnostic}
    return spec, state


def _per_head(t: torch.Tensor, h: int, num_heads: int) -> torch.Tensor:
    t = _t(t).reshape(-1)
    if t.numel() == 1:
        return t.reshape(())
    _require(t.numel() == num_heads, f"scale/shift of {t.numel()} values for {num_heads} heads")
    return t[h].reshape(())


def convert_mace(source, head: Optional[str] = None, dtype: torch.dtype = torch.float64) -> MACE:
    """Map a loaded mace model (a ``MACESource``, a module or a path) onto md_accel's ``MACE``."""
    from ase.data import chemical_symbols

    if isinstance(source, MACESource):
        model = source.model
    elif isinstance(source, torch.nn.Module):
        model = source
    else:
        model = load_mace(source).model
    _require(_kind(model) in SUPPORTED_MODELS, f"model {_kind(model)} is not supported; supported: "
             f"{', '.join(SUPPORTED_MODELS)}")
    for opt in ("cueq_config", "oeq_config"):
        cfg = getattr(model, opt, None)
        _require(cfg is None or not getattr(cfg, "enabled", False),
                 f"{opt} is enabled: convert the model back to e3nn layout first (mace_cueq_to_e3nn)")
    for attr in ("joint_embedding", "embedding_readout"):
        _require(not hasattr(model, attr), f"{attr} (extra embeddings) is not supported")
    _require(not getattr(model, "use_so3", False), "use_so3 models are not supported")
    h = head_index(model, head)
    num_heads = len(heads(model))
    z = [int(v) for v in model.atomic_numbers]
    n = len(z)
    state: Dict[str, torch.Tensor] = {}

    rb = model.radial_embedding
    _require(_kind(rb.bessel_fn) == "BesselBasis", f"radial basis {_kind(rb.bessel_fn)} (supported: BesselBasis)")
    _require(_kind(rb.cutoff_fn) == "PolynomialCutoff", f"cutoff {_kind(rb.cutoff_fn)}")
    r_max = float(model.r_max)
    _require(abs(float(rb.cutoff_fn.r_max) - r_max) < 1e-12, "cutoff r_max != model r_max")
    transform = "none"
    if hasattr(rb, "distance_transform"):
        t = rb.distance_transform
        _require(_kind(t) == "AgnesiTransform", f"distance transform {_kind(t)} (supported: AgnesiTransform)")
        transform = "agnesi"
        state["radial.transform_params"] = torch.stack([_t(t.q), _t(t.p), _t(t.a)]).reshape(3)
        state["radial.radii"] = _t(t.covalent_radii)[z]
    state["radial.coeffs"] = _t(rb.bessel_fn.bessel_weights).reshape(-1)
    state["radial.prefactor"] = _t(rb.bessel_fn.prefactor).reshape(())
    p = int(rb.cutoff_fn.p)
    apply_cutoff = bool(getattr(rb, "apply_cutoff", True))

    sh = model.spherical_harmonics
    lmax = int(sh._lmax)
    irreps_sh = Irreps.spherical_harmonics(lmax, -1)
    _require(irreps_of(sh.irreps_out) == irreps_sh and sh.normalize and sh.normalization == "component",
             f"edge harmonics {sh.irreps_out} (normalize={sh.normalize}, {sh.normalization})")

    emb = model.node_embedding.linear
    emb_spec, emb_w = _linear(emb)
    _require(emb_spec["irreps_in"] == f"{n}x0e" and Irreps(emb_spec["irreps_out"]).lmax == 0,
             f"node embedding {emb_spec}")
    channels = Irreps(emb_spec["irreps_out"]).dim
    state["embedding.weight"] = emb_w.view(n, channels)

    layers = []
    for k, (inter, prod) in enumerate(zip(model.interactions, model.products)):
        kind = _kind(inter)
        _require(kind in _PLAIN + _RESIDUAL, f"interaction block {kind} is not supported; supported: "
                 f"{', '.join(_PLAIN + _RESIDUAL)}")
        _require(_kind(prod) == "EquivariantProductBasisBlock", f"product block {_kind(prod)}")
        pre = f"layers.{k}."
        hs, mlp_w = _fc_net(inter.conv_tp_weights, f"layer {k} radial MLP")
        conv = _conv(inter, irreps_sh, mlp_w)
        lin_up, state[pre + "linear_up.weight"] = _linear(inter.linear_up)
        lin, state[pre + "linear.weight"] = _linear(inter.linear)
        skip, state[pre + "skip.weight"] = _species_linear(inter.skip_tp, n)
        density = "Density" in kind
        if density:
            dhs, dw = _fc_net(inter.density_fn, f"layer {k} density MLP")
            _require(dhs == [hs[0], 1], f"layer {k} density MLP widths {dhs}")
            state[pre + "density_fn.0.layers.0.weight"] = dw[0]
        prod_spec, prod_state = _product(prod, n)
        state.update({pre + key: v for key, v in prod_state.items()})
        plin, state[pre + "product_linear.weight"] = _linear(prod.linear)
        for j, w in enumerate(mlp_w):
            state[f"{pre}radial_mlp.layers.{j}.weight"] = w
        state[pre + "avg_num_neighbors"] = torch.tensor(float(inter.avg_num_neighbors), dtype=torch.float64)
        layers.append({"residual": kind in _RESIDUAL, "density": density, "linear_up": lin_up, "conv": conv,
                       "radial_mlp": {"hs": hs}, "linear": lin, "skip": skip, "product": prod_spec,
                       "product_linear": plin, "use_sc": bool(prod.use_sc)})

    readouts = []
    n_ro = len(model.readouts)
    for k, ro in enumerate(model.readouts):
        layer = len(layers) - 1 if n_ro == 1 else k
        pre = f"readouts.{k}."
        if _kind(ro) == "LinearReadoutBlock":
            spec, state[pre + "linear_1.weight"] = _head_linear(ro.linear, h, num_heads, 1)
            readouts.append({"layer": layer, "kind": "linear", "linear_1": spec})
        elif _kind(ro) == "NonLinearReadoutBlock":
            acts = ro.non_linearity.acts
            _require(len(acts) == 1, "readout with several activations")
            name = getattr(acts[0].f, "__name__", "")
            _require(name in _ACTS, f"readout activation {name!r}")
            hidden = irreps_of(ro.linear_1.irreps_out)
            _require(len(hidden) == 1 and hidden[0].ir.l == 0 and hidden[0].mul % num_heads == 0,
                     f"readout hidden irreps {hidden}")
            m = hidden[0].mul // num_heads
            s1, state[pre + "linear_1.weight"] = _head_linear(ro.linear_1, h, num_heads, m)
            s2, state[pre + "linear_2.0.weight"] = _head_linear(ro.linear_2, h, num_heads, 1, in_slice=m)
            cst = 1.0 if getattr(acts[0], "_is_id", False) else float(acts[0].cst)
            readouts.append({"layer": layer, "kind": "mlp", "linear_1": s1, "linear_2": s2,
                             "act": _ACTS[name], "cst": cst})
        else:
            raise UnsupportedMACEModel(f"readout block {_kind(ro)} is not supported; supported: "
                                       "LinearReadoutBlock, NonLinearReadoutBlock")

    e0 = _t(model.atomic_energies_fn.atomic_energies)
    state["e0"] = (e0 if e0.dim() == 1 else e0[h]).reshape(n)
    if _kind(model) == "ScaleShiftMACE":
        ss = model.scale_shift
        _require(_kind(ss) == "ScaleShiftBlock", f"scale/shift {_kind(ss)}")
        state["scale"], state["shift"] = _per_head(ss.scale, h, num_heads), _per_head(ss.shift, h, num_heads)
    else:
        state["scale"], state["shift"] = torch.ones((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
        # plain MACE adds the pair energy unscaled: scale 1 keeps that
    zbl = hasattr(model, "pair_repulsion_fn")
    if zbl:
        pr = model.pair_repulsion_fn
        _require(_kind(pr) == "ZBLBasis", f"pair repulsion {_kind(pr)}")
        _require(int(pr.p) == p, "ZBL envelope exponent differs from the radial cutoff's")
        state["zbl.0.z"] = torch.tensor(z, dtype=torch.float64)
        state["zbl.0.radii"] = _t(pr.covalent_radii)[z]
        state["zbl.0.c"] = _t(pr.c).reshape(4)
        state["zbl.0.a_exp"], state["zbl.0.a_prefactor"] = _t(pr.a_exp).reshape(()), _t(pr.a_prefactor).reshape(())

    for sym in z:
        _require(0 < sym < len(chemical_symbols), f"atomic number {sym}")
    spec = {"elements": [chemical_symbols[v] for v in z], "cutoff": r_max,
            "radial": {"num_basis": int(state["radial.coeffs"].numel()), "p": p, "transform": transform,
                       "apply_cutoff": apply_cutoff},
            "lmax": lmax, "channels": channels, "layers": layers, "readouts": readouts, "zbl": zbl,
            "head": heads(model)[h]}
    pot = MACE(spec).double()
    pot.load_state_dict(complete_state(pot, state), strict=True)
    return pot.to(dtype).eval()

