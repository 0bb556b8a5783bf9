"""The CUDA kernels of md_accel::species_linear_* (csrc/species_linear_kernels.cu) run on the CPU
through the host emulation of CUDA (tests/cuda_emu: a thread per CUDA thread, the DMMA fragments
emulated from the PTX ISA layouts), against the plain-torch reference (md_accel/ops/sl_reference.py):
forward, x-gradient (transposed tiles) and weight gradient, float64 on the tensor cores (DMMA, the
default) and on the CUDA cores (MD_ACCEL_SL_DMMA=0), float32, with species (per-species weights,
nodes visited in species order) and without (one species: how ``Linear`` runs on CUDA in float64),
every column-tile class. Needs g++; the GPU itself: tests/gpu/test_species_linear_cuda.py."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_emu import emulate  # noqa: E402

if not emulate.available():
    pytest.skip("needs g++", allow_module_level=True)

from md_accel.model.linear import Linear  # noqa: E402
from md_accel.ops.sl_reference import (species_linear_bwd_w_ref, species_linear_bwd_x_ref,  # noqa: E402
                                       species_linear_fwd_ref)

CSRC = Path(__file__).resolve().parent.parent / "csrc"
TOL = {torch.float64: 1e-12, torch.float32: 1e-5}

# extern "C" entries building the launch tables from flat arrays; the float64 path (DMMA or CUDA
# cores) is fixed per library: the kernels read MD_ACCEL_SL_DMMA once
_ENTRY = r'''
#include <string>
#include <vector>
// MD_ACCEL_SL_DMMA for the duration of one call (the kernels read it at their first launch), then as before
struct EmuDmmaEnv {
  bool had;
  std::string old;
  EmuDmmaEnv() {
    const char* v = std::getenv("MD_ACCEL_SL_DMMA");
    had = v != nullptr;
    if (had) old = v;
    setenv("MD_ACCEL_SL_DMMA", "@DMMA@", 1);
  }
  ~EmuDmmaEnv() {
    if (had)
      setenv("MD_ACCEL_SL_DMMA", old.c_str(), 1);
    else
      unsetenv("MD_ACCEL_SL_DMMA");
  }
};
extern "C" const char* emu_sl_gemm(int dbl, int trans, const int64_t* species, const int64_t* order, int64_t n,
                                   int64_t s, int64_t numel, const void* src, int64_t ld_src, const void* w, void* dst,
                                   int64_t ld_dst, const int* g, int ng, const int* t, const double* pw, int nt) {
  const EmuDmmaEnv env;
  std::vector<md_accel::SLGroup> groups;
  for (int q = 0; q < ng; ++q) groups.push_back({g[5 * q], g[5 * q + 1], g[5 * q + 2], g[5 * q + 3], g[5 * q + 4]});
  std::vector<md_accel::SLTerm> terms;
  for (int q = 0; q < nt; ++q) terms.push_back({t[4 * q], t[4 * q + 1], t[4 * q + 2], t[4 * q + 3], pw[q]});
  const md_accel::SLProblem p{species, order, n, s, numel};
  std::vector<double> scratch(md_accel::species_linear_gemm_scratch_bytes(p, ng) / 8 + 2);
  if (dbl)
    return md_accel::species_linear_gemm_launch<double>(p, static_cast<const double*>(src), ld_src,
        static_cast<const double*>(w), static_cast<double*>(dst), ld_dst, groups.data(), ng, terms.data(), nt,
        trans != 0, scratch.data(), nullptr);
  return md_accel::species_linear_gemm_launch<float>(p, static_cast<const float*>(src), ld_src,
      static_cast<const float*>(w), static_cast<float*>(dst), ld_dst, groups.data(), ng, terms.data(), nt,
      trans != 0, scratch.data(), nullptr);
}
extern "C" const char* emu_sl_wgrad(int dbl, const int64_t* species, const int64_t* order, int64_t n, int64_t s,
                                    int64_t numel, const void* x, int64_t ld_x, const void* gr, int64_t ld_g, void* gw,
                                    const int* in, const double* pw, int ni) {
  const EmuDmmaEnv env;
  std::vector<md_accel::SLWInstr> instr;
  for (int q = 0; q < ni; ++q)
    instr.push_back({in[6 * q], in[6 * q + 1], in[6 * q + 2], in[6 * q + 3], in[6 * q + 4], in[6 * q + 5], pw[q]});
  const md_accel::SLProblem p{species, order, n, s, numel};
  std::vector<double> scratch(md_accel::species_linear_wgrad_scratch_bytes(p, ni, dbl ? 8 : 4) / 8 + 2);
  if (dbl)
    return md_accel::species_linear_wgrad_launch<double>(p, static_cast<const double*>(x), ld_x,
        static_cast<const double*>(gr), ld_g, static_cast<double*>(gw), instr.data(), ni, scratch.data(), nullptr);
  return md_accel::species_linear_wgrad_launch<float>(p, static_cast<const float*>(x), ld_x,
      static_cast<const float*>(gr), ld_g, static_cast<float*>(gw), instr.data(), ni, scratch.data(), nullptr);
}
'''
_LIBS = {}


def lib(dmma: bool):
    if dmma not in _LIBS:
        src = (CSRC / "species_linear_kernels.cu").read_text() + _ENTRY.replace("@DMMA@", "1" if dmma else "0")
        so = ctypes.CDLL(emulate.build(src))
        P, I, L, D = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_double
        IP, DP = ctypes.POINTER(I), ctypes.POINTER(D)
        # every argument typed: beyond the sixth, untyped integers would travel as 32-bit stack slots
        so.emu_sl_gemm.argtypes = [I, I, P, P, L, L, L, P, L, P, P, L, IP, I, IP, DP, I]
        so.emu_sl_wgrad.argtypes = [I, P, P, L, L, L, P, L, P, L, P, IP, DP, I]
        for f in (so.emu_sl_gemm, so.emu_sl_wgrad):
            f.restype = ctypes.c_char_p
        _LIBS[dmma] = so
    return _LIBS[dmma]


CONFIGS = {  # irreps_in, irreps_out: column classes <= 32, <= 64 and wider, several terms per block
    "mixed": ("3x0e+5x1o+2x0e+2x2o+4x2e", "7x0e+2x1e+3x1o+5x2e"),
    "l3": ("8x0e+4x1e+4x2e+4x3e", "16x0e+4x1e+4x2e+4x3e"),
    "wide": ("70x0e+48x1o+3x3o", "130x0e+40x1o+9x3o"),  # x-gradient tiles of 48 columns too
}
PATHS = {"f64_dmma": (torch.float64, True), "f64_cuda_cores": (torch.float64, False), "f32": (torch.float32, False)}


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr() if t is not None and t.numel() > 0 else None)


def _tables(m: Linear, trans: bool):
    """Launch groups (dst_off, d, ncols, first_term, num_terms) and terms (src_off, k, w_off, w_ld; pw),
    grouped by destination block as csrc/species_linear_cuda.cpp groups them."""
    rows = [(r, pw) for r, pw in zip([m.op_ins[6 * k: 6 * k + 6] for k in range(len(m.ins))], m.path_weights)
            if r[1] > 0 and r[3] > 0]
    groups, terms, pws = [], [], []
    for key in sorted({r[0] if trans else r[2] for r, _ in rows}):
        mine = [(r, pw) for r, pw in rows if (r[0] if trans else r[2]) == key]
        d, ncols = mine[0][0][4], mine[0][0][1] if trans else mine[0][0][3]
        groups += [key, d, ncols, len(pws), len(mine)]
        for (i_off, mi, o_off, mo, _, w_off), pw in mine:
            terms += [o_off if trans else i_off, mo if trans else mi, w_off, mo]
            pws.append(pw)
    return groups, terms, pws


def _species(n: int, num_species: int, gen):
    if num_species == 0:  # one species, no tables: the plain Linear
        return torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), 1
    species = torch.randint(0, num_species, (n,), generator=gen)
    return species, torch.argsort(species, stable=True), num_species


def run_gemm(m, dmma, a, w, species, order, s, trans):
    groups, terms, pws = _tables(m, trans)
    width = m.dim_in if trans else m.dim_out
    # NaN where a group must write (an unwritten element fails), zero elsewhere (as the op allocates it)
    out = torch.zeros((a.shape[0], width), dtype=a.dtype)
    for q in range(len(groups) // 5):
        out[:, groups[5 * q]: groups[5 * q] + groups[5 * q + 1] * groups[5 * q + 2]] = float("nan")
    err = lib(dmma).emu_sl_gemm(int(a.dtype == torch.float64), int(trans), _ptr(species), _ptr(order), a.shape[0], s,
                                w.shape[1], _ptr(a), a.shape[1], _ptr(w), _ptr(out), width,
                                (ctypes.c_int * len(groups))(*groups), len(groups) // 5,
                                (ctypes.c_int * len(terms))(*terms), (ctypes.c_double * len(pws))(*pws), len(pws))
    assert err is None, err.decode()
    return out


def run_wgrad(m, dmma, x, g, species, order, s):
    rows = [(m.op_ins[6 * k: 6 * k + 6], pw) for k, pw in enumerate(m.path_weights)]
    rows = [(r, pw) for r, pw in rows if r[1] > 0 and r[3] > 0]
    flat = [v for r, _ in rows for v in r]
    pws = [pw for _, pw in rows]
    gw = torch.full((s, m.weight_numel), float("nan"), dtype=x.dtype)
    err = lib(dmma).emu_sl_wgrad(int(x.dtype == torch.float64), _ptr(species), _ptr(order), x.shape[0], s,
                                 m.weight_numel, _ptr(x), x.shape[1], _ptr(g), g.shape[1], _ptr(gw),
                                 (ctypes.c_int * len(flat))(*flat), (ctypes.c_double * len(pws))(*pws), len(pws))
    assert err is None, err.decode()
    return gw


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape and torch.isfinite(a).all(), "non-finite values (unwritten output?)"
    return ((a.double() - b).abs().max() / b.abs().max()).item()


# every config on the default float64 path (DMMA); the CUDA-core paths on "wide" (all three tile classes)
CASES = [(name, "f64_dmma") for name in CONFIGS] + [("wide", "f64_cuda_cores"), ("wide", "f32")]


@pytest.mark.parametrize("num_species", [0, 3], ids=["one_species", "species"])
@pytest.mark.parametrize("name,path", CASES)
def test_matches_reference(name, path, num_species):
    dtype, dmma = PATHS[path]
    gen = torch.Generator().manual_seed(len(name) + num_species)
    m = Linear(*CONFIGS[name])
    n = 150  # several tiles of whole nodes per species for l >= 1 (and l = 0 with one species), the last partial
    species, order, s = _species(n, num_species, gen)
    w = torch.randn(s, m.weight_numel, generator=gen, dtype=torch.float64)
    x = torch.randn(n, m.dim_in, generator=gen, dtype=torch.float64)
    g = torch.randn(n, m.dim_out, generator=gen, dtype=torch.float64)
    args = (species, m.op_ins, m.path_weights)
    cast = [t.to(dtype) for t in (x, g, w)]
    assert rel_err(run_gemm(m, dmma, cast[0], cast[2], species, order, s, False),
                   species_linear_fwd_ref(x, w, *args, m.dim_out)) <= TOL[dtype]
    assert rel_err(run_gemm(m, dmma, cast[1], cast[2], species, order, s, True),
                   species_linear_bwd_x_ref(g, w, *args, m.dim_in)) <= TOL[dtype]
    assert rel_err(run_wgrad(m, dmma, cast[0], cast[1], species, order, s),
                   species_linear_bwd_w_ref(x, g, *args, s)) <= TOL[dtype]
