"""Whole converted models on CUDA (fused kernels) against the CPU reference path, and
bit-reproducibility of energies and forces from run to run. Skipped without CUDA.

Every model family whose source library is installed: SevenNet-0 and SevenNet-l3i5 (sevenn),
the shipped MACE copper model (mace-torch), the shipped NequIP l = 3 copper model (nequip).
float64 on CUDA equals the CPU reference to 1e-10, with the radial weights per edge and once per
pair of edges (``edge_partner``: md_accel::tp_conv_pair_fwd, the Calculator's default); float32 on CUDA (3xTF32 tensor cores in
the radial MLPs included) stays within the conversion contract's float32 tolerances."""
import os

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _copper(n=3, seed=0):
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((n, n, n))
    atoms.rattle(0.05, seed=seed)
    return atoms


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _convert(name: str):
    if name.startswith("sevennet"):
        pytest.importorskip("sevenn")
        from md_accel.convert.sevenn import convert_sevenn, resolve_checkpoint

        try:
            resolve_checkpoint(name)
        except (FileNotFoundError, ValueError) as e:
            pytest.skip(str(e))
        return convert_sevenn(name, dtype=torch.float64)
    if name == "mace_cu":  # its conversion, shipped (tests/mace checks it against mace-torch): the
        # .model pickles e3nn 0.4.4 objects (mace-torch's pin), which other e3nn versions cannot read
        from md_accel import io

        return io.load(os.path.join(REPO, "models", "mace_cu", "mace_cu.mdx"), dtype=torch.float64)
    if name == "mace_small":  # built in process: readable with any e3nn mace-torch runs on
        pytest.importorskip("mace.modules")  # a bundle may carry a "mace" namespace without mace-torch
        import importlib.util

        from md_accel.convert.mace import convert_mace

        path = os.path.join(REPO, "models", "build_mace_mp0_medium_shape.py")
        spec = importlib.util.spec_from_file_location("build_mace_shape", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            source = mod.build("small", seed=0)
        finally:
            torch.set_default_dtype(default)
        return convert_mace(source.double(), dtype=torch.float64)
    pytest.importorskip("nequip")
    from md_accel.convert.nequip import convert_nequip

    return convert_nequip(os.path.join(REPO, "models", "nequip_cu", "nequip_cu_l3.ckpt"), dtype=torch.float64)


@pytest.fixture(scope="module", params=["sevennet-0", "sevennet-l3i5", "mace_cu", "mace_small", "nequip_cu_l3"])
def model(request):
    return _convert(request.param)


@pytest.fixture(scope="module")
def sevennet0():
    """SevenNet-0, or SevenNet-l3i5 where only that checkpoint is installed."""
    try:
        from md_accel.convert.sevenn import resolve_checkpoint

        resolve_checkpoint("sevennet-0")
        return _convert("sevennet-0")
    except (ImportError, FileNotFoundError, ValueError):
        return _convert("sevennet-l3i5")


def _evaluate(potential, atoms, device, pairs=False):
    from md_accel.model import energy_forces_virial
    from md_accel.neighbors import neighbor_list

    pos = torch.tensor(atoms.positions, dtype=torch.float64, device=device)
    cell = torch.tensor(np.asarray(atoms.cell), dtype=torch.float64, device=device)
    edges = neighbor_list(pos, cell, atoms.pbc, potential.cutoff)
    src, dst = edges.src, edges.dst
    vec = edges.vec.to(next(potential.parameters()).dtype)
    species = torch.tensor([potential.elements.index(s) for s in atoms.get_chemical_symbols()], device=device)
    assert edges.partner is not None
    out = energy_forces_virial(potential, species, vec, src, dst, edge_partner=edges.partner if pairs else None)
    return out["energy"].detach(), out["forces"].detach(), out["virial"].detach()


def _force_chunked_weights(model, monkeypatch, chunks=5):
    """Every conv layer takes the edge-chunked path (per-edge weights recomputed in the backward,
    never whole), in about ``chunks`` chunks on the 3x3x3 cell."""
    from md_accel.ops.tp_conv import TensorProductConv

    convs = [m for m in model.modules() if isinstance(m, TensorProductConv) and m.fused_hidden > 0]
    assert convs, "no conv layer with a fusable radial MLP"
    for m in convs:
        monkeypatch.setattr(m, "save_weights_bytes", 0)
    edges = 108 * 80  # upper bound for the 3x3x3 cell at r <= 6 A
    monkeypatch.setenv("MD_ACCEL_WEIGHT_CHUNK_MIB", str(edges / chunks * min(m.weight_numel for m in convs) * 8 / 2**20))


@pytest.mark.parametrize("weights", ["whole", "chunked", "pairs", "pairs_kept", "pairs_chunked"])
def test_cuda_equals_cpu_reference_float64(model, weights, monkeypatch):
    """pairs: as small graphs run (no kept rows, the backward in MD_ACCEL_LEAN_CHUNKS chunks);
    pairs_kept: the rows kept for a one-chunk backward, as larger graphs run."""
    atoms = _copper()
    e_cpu, f_cpu, w_cpu = _evaluate(model, atoms, "cpu")
    if weights.endswith("chunked"):
        _force_chunked_weights(model, monkeypatch)
    if weights in ("pairs_kept", "pairs_chunked"):
        monkeypatch.setenv("MD_ACCEL_LEAN_WEIGHTS_MIB", "0")
    gpu = model.to("cuda")
    try:
        e_gpu, f_gpu, w_gpu = _evaluate(gpu, atoms, "cuda", pairs=weights.startswith("pairs"))
    finally:
        model.to("cpu")
    assert abs(e_gpu.item() - e_cpu.item()) <= 1e-10 * abs(e_cpu.item())
    assert torch.allclose(f_gpu.cpu(), f_cpu, rtol=0, atol=1e-10 * f_cpu.abs().max().item())
    assert torch.allclose(w_gpu.cpu(), w_cpu, rtol=0, atol=1e-10 * w_cpu.abs().max().item())


@pytest.mark.parametrize("pairs", [False, True], ids=["edges", "pairs"])
def test_cuda_float32_within_conversion_tolerances(model, pairs):
    """float32 on CUDA vs float64 on the CPU: energy <= 1e-5 relative, forces <= 1e-4 of max |F|."""
    atoms = _copper(seed=2)
    e_cpu, f_cpu, _ = _evaluate(model, atoms, "cpu")
    gpu = model.to("cuda").float()
    try:
        e32, f32, _ = _evaluate(gpu, atoms, "cuda", pairs)
    finally:
        model.to("cpu").double()
    assert abs(e32.double().item() - e_cpu.item()) <= 1e-5 * abs(e_cpu.item())
    assert (f32.double().cpu() - f_cpu).abs().max().item() <= 1e-4 * f_cpu.abs().max().item()


@pytest.mark.parametrize("weights", ["whole", "chunked", "pairs_chunked"])
def test_cuda_forces_bit_reproducible(sevennet0, weights, monkeypatch):
    atoms = _copper(4, seed=1)
    if weights.endswith("chunked"):
        _force_chunked_weights(sevennet0, monkeypatch)
    gpu = sevennet0.to("cuda").float()
    try:
        runs = [_evaluate(gpu, atoms, "cuda", weights.startswith("pairs")) for _ in range(4)]
    finally:
        sevennet0.to("cpu").double()
    for e, f, w in runs[1:]:
        assert torch.equal(e, runs[0][0])
        assert torch.equal(f, runs[0][1])
        assert torch.equal(w, runs[0][2])
    assert np.isfinite(runs[0][1].cpu().numpy()).all()


def test_hessian_with_pair_weights(sevennet0, monkeypatch):
    """Second derivatives through the pair op (its backward composed under create_graph), the
    convs forced onto forward_fused: equal to the per-edge Calculator's on CUDA and to the CPU's
    (float64, 4-atom periodic cell with its images)."""
    import copy

    from md_accel.calculator import Calculator
    from md_accel.ops.tp_conv import TensorProductConv

    atoms = _copper(1, seed=4)
    hessians = {}
    for label, device, pairs in (("pairs", "cuda", True), ("edges", "cuda", False), ("cpu", "cpu", False)):
        calc = Calculator(copy.deepcopy(sevennet0), device=device, pair_weights=pairs)
        for m in calc.model.modules():
            if isinstance(m, TensorProductConv) and m.fused_hidden > 0:
                m.save_weights_bytes = 0
        hessians[label] = calc.get_hessian(atoms)
    scale = np.abs(hessians["cpu"]).max()
    assert scale > 1.0
    for label in ("pairs", "edges"):
        assert np.abs(hessians[label] - hessians["cpu"]).max() <= 1e-9 * scale, label
