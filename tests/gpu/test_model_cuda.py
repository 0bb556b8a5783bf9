"""Whole converted models on CUDA (fused kernels) against the CPU reference path, and
bit-reproducibility of energies and forces from run to run. Skipped without CUDA."""
import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _copper(n=3, seed=0):
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((n, n, n))
    atoms.rattle(0.05, seed=seed)
    return atoms


@pytest.fixture(scope="module")
def sevennet0():
    pytest.importorskip("sevenn")
    from md_accel.convert.sevenn import convert_sevenn

    return convert_sevenn("sevennet-0", dtype=torch.float64)


def _evaluate(potential, atoms, device):
    from md_accel.model import energy_forces_virial
    from md_accel.neighbors import neighbor_list

    pos = torch.tensor(atoms.positions, dtype=torch.float64, device=device)
    cell = torch.tensor(np.asarray(atoms.cell), dtype=torch.float64, device=device)
    edges = neighbor_list(pos, cell, atoms.pbc, potential.cutoff)
    src, dst = edges.src, edges.dst
    vec = edges.vec.to(next(potential.parameters()).dtype)
    species = torch.tensor([potential.elements.index(s) for s in atoms.get_chemical_symbols()], device=device)
    out = energy_forces_virial(potential, species, vec, src, dst)
    return out["energy"].detach(), out["forces"].detach(), out["virial"].detach()


def test_cuda_equals_cpu_reference_float64(sevennet0):
    atoms = _copper()
    e_cpu, f_cpu, w_cpu = _evaluate(sevennet0, atoms, "cpu")
    gpu = sevennet0.to("cuda")
    try:
        e_gpu, f_gpu, w_gpu = _evaluate(gpu, atoms, "cuda")
    finally:
        sevennet0.to("cpu")
    assert abs(e_gpu.item() - e_cpu.item()) <= 1e-10 * abs(e_cpu.item())
    assert torch.allclose(f_gpu.cpu(), f_cpu, rtol=0, atol=1e-10 * f_cpu.abs().max().item())
    assert torch.allclose(w_gpu.cpu(), w_cpu, rtol=0, atol=1e-10 * w_cpu.abs().max().item())


def test_cuda_forces_bit_reproducible(sevennet0):
    atoms = _copper(4, seed=1)
    gpu = sevennet0.to("cuda").float()
    try:
        runs = [_evaluate(gpu, atoms, "cuda") for _ in range(4)]
    finally:
        sevennet0.to("cpu").double()
    for e, f, w in runs[1:]:
        assert torch.equal(e, runs[0][0])
        assert torch.equal(f, runs[0][1])
        assert torch.equal(w, runs[0][2])
    assert np.isfinite(runs[0][1].cpu().numpy()).all()
