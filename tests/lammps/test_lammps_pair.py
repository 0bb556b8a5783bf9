"""pair_style md_accel on one rank (in-process LAMMPS) against a direct Python evaluation of the
same TorchScript model, against LAMMPS' own lj/cut, and its input errors."""
import numpy as np
import pytest

from lammps_toy_potentials import (EPS, ELEMENTS, SIGMA, SYMBOLS, TYPE_TO_SPECIES, MessagePassingToy,
                                   PairLJ, cu_ni, reference, save_mdx, write_data)



def evaluate(make_lammps, data, model, symbols=SYMBOLS, pair=None, style=""):
    """run 0 in LAMMPS; energy, forces, virial, per-atom energy and virial (ordered by atom id)."""
    lmp = make_lammps()
    pair = pair or f"pair_style md_accel {style}\npair_coeff * * {model} {symbols}"
    lmp.commands_string(f"""
        units metal
        atom_style atomic
        atom_modify map yes
        read_data {data}
        mass * 60.0
        {pair}
        compute vir all pressure NULL virial
        compute peatom all pe/atom
        compute satom all stress/atom NULL virial
        thermo_style custom step pe vol c_vir[*]
        run 0
    """)
    from lammps import LMP_STYLE_ATOM, LMP_STYLE_GLOBAL, LMP_TYPE_ARRAY, LMP_TYPE_VECTOR

    n = lmp.extract_global("nlocal")
    order = np.argsort(lmp.numpy.extract_atom("id")[:n])
    nktv2p = lmp.extract_global("nktv2p")
    press = lmp.numpy.extract_compute("vir", LMP_STYLE_GLOBAL, LMP_TYPE_VECTOR)
    satom = lmp.numpy.extract_compute("satom", LMP_STYLE_ATOM, LMP_TYPE_ARRAY)[:n][order]
    return {"energy": lmp.get_thermo("pe"),
            "forces": lmp.numpy.extract_atom("f")[:n][order].copy(),
            "virial": press * lmp.get_thermo("vol") / nktv2p,
            "node_energies": lmp.numpy.extract_compute("peatom", LMP_STYLE_ATOM,
                                                          LMP_TYPE_VECTOR)[:n][order].copy(),
            # stress/atom is minus the per-atom virial, in pressure x volume
            "atom_virial": -satom / nktv2p}


def assert_matches(got, want, rtol):
    scale_e = abs(want["energy"])
    scale_f = np.abs(want["forces"]).max()
    scale_w = np.abs(want["virial"]).max()
    assert abs(got["energy"] - want["energy"]) <= rtol * scale_e
    np.testing.assert_allclose(got["forces"], want["forces"], rtol=0, atol=rtol * scale_f)
    np.testing.assert_allclose(got["virial"], want["virial"], rtol=0, atol=rtol * scale_w)
    np.testing.assert_allclose(got["node_energies"], want["node_energies"], rtol=0,
                               atol=rtol * np.abs(want["node_energies"]).max())
    np.testing.assert_allclose(got["atom_virial"], want["atom_virial"], rtol=0,
                               atol=rtol * np.abs(want["atom_virial"]).max())


MODELS = {
    "lj": lambda: PairLJ(ELEMENTS, EPS, SIGMA, cutoff=5.0, r_on=4.0),
    "mp2": lambda: MessagePassingToy(ELEMENTS, cutoff=4.5, num_layers=2),
}


@pytest.mark.parametrize("triclinic", [False, True], ids=["orthogonal", "triclinic"])
@pytest.mark.parametrize("name, style", [(name, style) for name in sorted(MODELS) for style in ("", "comm shell")]
                         + [("mp2", "comm layer")])
def test_matches_python_reference(lammps_in_process, tmp_path, name, triclinic, style):
    """The one-rank default (comm none) and comm shell, for a model with the layered interface
    (mp2) and one without (lj), and comm layer on one rank (its ghost senders are graph nodes
    of their own): energy, forces, virial and the per-atom energies and virials."""
    atoms, types = cu_ni(triclinic)
    model = save_mdx(MODELS[name](), tmp_path / "model.mdx")
    data = write_data(tmp_path / "data.lmp", atoms, types)
    want = reference(model, atoms, TYPE_TO_SPECIES[types - 1])
    got = evaluate(lammps_in_process, data, model, style=style)
    assert np.abs(want["forces"]).max() > 0.1 and np.abs(want["virial"][3:]).max() > 1e-3
    assert_matches(got, want, rtol=1e-11)


def test_float32_model(lammps_in_process, tmp_path):
    atoms, types = cu_ni(triclinic=True, seed=3)
    module = MODELS["mp2"]()
    want = reference(save_mdx(module, tmp_path / "m64.mdx"), atoms, TYPE_TO_SPECIES[types - 1])
    model32 = save_mdx(module, tmp_path / "m32.mdx", dtype="float32")
    got = evaluate(lammps_in_process, write_data(tmp_path / "data.lmp", atoms, types), model32)
    assert_matches(got, want, rtol=2e-5)


def test_equals_lj_cut(lammps_in_process, tmp_path):
    """Plain truncated LJ as a model file == LAMMPS' lj/cut with the same parameters."""
    atoms, types = cu_ni(triclinic=True, seed=1)
    cutoff = 5.0
    model = save_mdx(PairLJ(ELEMENTS, EPS, SIGMA, cutoff), tmp_path / "lj.mdx")
    data = write_data(tmp_path / "data.lmp", atoms, types)
    coeffs = "\n".join(
        f"pair_coeff {a} {b} {EPS[sa][sb]} {SIGMA[sa][sb]}"
        for a, sa in ((1, 1), (2, 0)) for b, sb in ((1, 1), (2, 0)) if a <= b)
    want = evaluate(lammps_in_process, data, None, pair=f"pair_style lj/cut {cutoff}\n{coeffs}")
    got = evaluate(lammps_in_process, data, model)
    assert_matches(got, want, rtol=1e-11)


@pytest.mark.parametrize("setting, message", [
    ("pair_coeff * * {model} Ni Xx", r"element Xx \(atom type 2\) is not in model"),
    ("pair_coeff * * {model} Cu", "one element per atom type"),
    ("units real", "requires 'units metal'"),
    ("newton off", "requires newton pair on"),
    ("pair_style md_accel device tpu", "Unknown pair_style md_accel device tpu"),
    ("pair_style md_accel comm ring", "Unknown pair_style md_accel comm ring"),
    ("pair_style md_accel comm layer", "comm layer: the model does not export the layered interface"),
    ("pair_style md_accel recompute yes", "recompute yes needs comm layer"),
    ("pair_style md_accel cuda_graph always", "Unknown pair_style md_accel cuda_graph always"),
    ("pair_style md_accel device cpu cuda_graph yes", "cuda_graph yes needs the model on CUDA"),
    ("pair_style md_accel comm shell cuda_graph yes", "cuda_graph yes needs comm none"),
    ("pair_style md_accel exchange fast", "Unknown pair_style md_accel exchange fast"),
    ("pair_style md_accel exchange device", "exchange device needs comm layer"),
])
def test_input_errors(lammps_in_process, tmp_path, setting, message):
    atoms, types = cu_ni(triclinic=False)
    model = save_mdx(MODELS["lj"](), tmp_path / "model.mdx")
    data = write_data(tmp_path / "data.lmp", atoms, types)
    lines = {"units": "units metal", "newton": "newton on", "style": "pair_style md_accel",
             "coeff": f"pair_coeff * * {model} {SYMBOLS}"}
    key = {"units": "units", "newton": "newton", "pair_style": "style",
           "pair_coeff": "coeff"}[setting.split()[0]]
    lines[key] = setting.format(model=model)
    lmp = lammps_in_process()
    with pytest.raises(Exception, match=message):
        lmp.commands_string(f"""
            {lines['units']}
            {lines['newton']}
            atom_style atomic
            read_data {data}
            mass * 60.0
            {lines['style']}
            {lines['coeff']}
            run 0
        """)
