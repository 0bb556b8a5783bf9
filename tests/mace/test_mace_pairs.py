"""Converted MACE models evaluated with radial weights once per pair of edges against once per
edge (tests/pair_testing.py): the residual MP-0-like model, the density + Agnesi variant (the
transform's r0 is symmetric in the two species; the density sums stay per edge) and
apply_cutoff=False (the envelope scales the hidden rows), on a mixed-species periodic cell."""
import numpy as np
import pytest
import torch

mace_modules = pytest.importorskip("mace.modules")
from md_accel.convert.mace import convert_mace  # noqa: E402
from md_accel.convert.structures import rocksalt  # noqa: E402
from pair_testing import assert_pairs_equal_edges  # noqa: E402
from test_mace_convert import VARIANTS, _small  # noqa: E402


@pytest.mark.parametrize("variant", ["residual", "density_agnesi", "no_apply_cutoff"])
def test_per_pair_equals_per_edge(variant, tmp_path):
    torch.set_num_threads(1)
    overrides = dict(VARIANTS[variant])
    model = _small(tmp_path / "m.model", overrides.pop("plain_mace", False), **overrides)
    pot = convert_mace(model)
    atoms = rocksalt(["Cu", "O", "H"], np.random.default_rng(5)).repeat((2, 1, 1))
    atoms.rattle(0.05, seed=7)
    assert_pairs_equal_edges(pot, atoms)
