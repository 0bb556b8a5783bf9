"""``md_accel.ops.prebuild`` (``md-accel prebuild``): one job per distinct generated kernel library,
and, where nvcc is installed (CI has it; no GPU needed), real libraries built through the same
build functions the GPU path uses: the symmetric contraction's nine parallel translation units
linked into one library exporting the spec symbol, and a tensor-product conv library."""
import os
import shutil
import subprocess

import pytest
import torch

from md_accel.ops import _codegen, _sc_codegen
from md_accel.ops.prebuild import kernel_jobs, prebuild
from md_accel.ops.tp_conv import TensorProductConv
from sc_testing import CONFIGS


def _conv(mul=3):
    ins = [(0, 0, 0, "uvu", True), (0, 1, 1, "uvu", True), (1, 0, 2, "uvu", True), (1, 1, 3, "uvu", True)]
    return TensorProductConv(f"{mul}x0e+2x1o", "0e+1o", f"{mul}x0e+{mul}x1o+2x1o+2x0e", ins)


def test_one_job_per_distinct_library():
    sc_a, sc_b = CONFIGS["small"](), CONFIGS["small"]()  # same term list: one library
    model = torch.nn.ModuleList([_conv(), _conv(), sc_a, torch.nn.Sequential(sc_b, _conv(mul=4))])
    labels = [label for label, _ in kernel_jobs([model], "sm_90")]
    assert len(labels) == 3, labels  # conv mul 3, conv mul 4, the contraction
    assert sum(label.startswith("symmetric contraction") for label in labels) == 1


def _exported(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
                    reason="needs nvcc")
@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_builds_loadable_libraries(tmp_path, monkeypatch):
    monkeypatch.setenv("MD_ACCEL_BUILD_DIR", str(tmp_path))
    sc, conv = CONFIGS["small"](), _conv()
    messages = []
    paths = prebuild([torch.nn.ModuleList([sc, conv])], arch="sm_90", workers=2, progress=messages.append)
    assert len(paths) == 2 and all(os.path.isfile(p) for p in paths), (paths, messages)
    sc_path = _sc_codegen.build(_sc_codegen.structure(sc.in_dims, sc.out_dims, sc.num_k, sc.sc_terms,
                                                      sc.sc_values), "sm_90")  # cached: no rebuild
    tp_path = _codegen.build(_codegen.plan_structure(conv), "sm_90")
    assert sorted(paths) == sorted([sc_path, tp_path])
    assert "md_accel_sc_spec_v1" in _exported(sc_path) and "md_accel_tp_spec_v1" in _exported(tp_path)
    assert not [p for p in os.listdir(os.path.dirname(sc_path)) if p.startswith("tmp")]  # no leftovers


def test_prebuild_for_builds_for_the_cuda_device_only(monkeypatch):
    """``prebuild_for`` (called by md_accel.io.load and the Calculator before the move to the GPU)
    builds for the device's architecture, does nothing for the CPU, and leaves a failed build to
    the move (which warns and runs the generic kernels)."""
    from md_accel.ops import _cuda, prebuild as pb

    calls = []
    monkeypatch.setattr(pb, "prebuild", lambda modules, arch, workers, progress: calls.append(arch))
    monkeypatch.setattr(_cuda, "available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    model = torch.nn.ModuleList([_conv()])
    pb.prebuild_for([model], "cpu")
    assert calls == []
    pb.prebuild_for([model], "cuda:0")
    assert calls == ["sm_90"]

    def failing(*args, **kwargs):
        raise RuntimeError("nvcc failed")

    monkeypatch.setattr(pb, "prebuild", failing)
    pb.prebuild_for([model], "cuda")  # no exception


def test_tuning_overrides_name_their_own_build(monkeypatch):
    """MD_ACCEL_TP_TUNING (tuning experiments) changes the generated source and the cache name; without
    it the source is the default one; a bad item is refused with the known keys."""
    struct = _codegen.plan_structure(_conv())
    monkeypatch.delenv(_codegen.TUNING_ENV, raising=False)
    default = _codegen.generate(struct, _codegen.tuning())
    _, live, threads, _ = _codegen._analyse(struct)
    b64 = max(1, _codegen.MIN_WARPS64 * 32 // threads)  # the float64 kernels' minimum of resident blocks
    fwd_b64 = max(1, _codegen.MIN_WARPS64 * 32 // _codegen.fwd_block(live, threads, _codegen.Tuning())[0])
    assert _codegen.tuning().suffix() == ""
    # no minimum for float32, MIN_WARPS64 for float64, every kernel (the forward's in blocks of its own: this plan's
    # channels fit one warp)
    assert f"__launch_bounds__(kThreads, sizeof(T) == 4 ? 0 : {b64}) bwd_kernel" in default
    assert f"__launch_bounds__(kFwdThreads, sizeof(T) == 4 ? 0 : {fwd_b64}) fwd_kernel" in default
    monkeypatch.setenv(_codegen.TUNING_ENV, "min_warps32=32, bwd_g32=8")
    tuned = _codegen.tuning()
    assert (tuned.min_warps32, tuned.bwd_g32, tuned.bwd_g64) == (32, 8, _codegen.BWD_G_BUDGET[1])
    assert tuned.suffix().startswith("-t") and tuned.suffix() != _codegen.Tuning(min_warps32=32).suffix()
    src = _codegen.generate(struct, tuned)
    # 32 warps: 32 * 32 / threads resident blocks in float32, the default minimum in float64
    assert f"__launch_bounds__(kThreads, sizeof(T) == 4 ? {32 * 32 // threads} : {b64})" in src and src != default
    monkeypatch.setenv(_codegen.TUNING_ENV, "bwd_g32=lots")
    with pytest.raises(ValueError, match="fwd_acc"):
        _codegen.tuning()


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
                    reason="needs nvcc")
def test_register_cap_from_the_first_build(tmp_path):
    """The build's second look (``_codegen._second_look``): ptxas' report of a real build names the double backward's
    float32 per-edge kernel; a plan whose kernel needs more registers than ``dbwd_auto_warps32`` warps per SM
    leave is rebuilt with that minimum, one within it keeps its first build."""
    struct = _codegen.plan_structure(_conv(mul=40))  # 64 threads per block
    cu, so = tmp_path / "plan.cu", tmp_path / "plan.so"
    cu.write_text(_codegen.generate(struct))
    r = subprocess.run(_codegen.nvcc_command(str(cu), str(so), "sm_90", ptxas_report=True), capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    registers = _codegen.ptxas_registers(r.stderr)
    used = {name: n for name, n in registers.items() if "dbwd_kernel_ds" in name}
    f32 = {name: n for name, n in used.items() if "dbwd_kernel_dsIf" in name}
    assert len(used) == 4 and len(f32) == 2, used  # float and double, one block per receiver or receiver parts
    assert {name for name in registers if _codegen._DBWD_F32_KERNEL.search(name)} == set(f32)  # the rule's kernels
    assert {name for name in registers if _codegen._DBWD_F64_KERNEL.search(name)} == set(used) - set(f32)  # grad_y's
    kernels = _codegen.ptxas_kernels(r.stderr)  # the forward rule's kernel too, and spills read from a real report
    assert [name for name in kernels if _codegen._FWD_F64_KERNEL.search(name)] == [
        name for name in kernels if "fwd_kernelIdE" in name and "dfwd_kernel" not in name] != []
    assert all(k.spill_stores == 0 for k in kernels.values())
    assert {n: k.registers for n, k in kernels.items()} == registers
    need = max(f32.values())
    capping = [w for w in range(1, 65) if _codegen.cap_registers(64, w) < need]  # 64 warps per SM: 32 registers
    fitting = [w for w in range(1, 65) if _codegen.cap_registers(64, w) >= need]
    assert capping and fitting, need
    for warps in (min(capping), max(capping)):
        capped = _second_source(struct, _codegen.Tuning(dbwd_auto_warps32=warps), r.stderr)
        assert capped == _codegen.generate(struct, _codegen.Tuning(dbwd_auto_warps32=warps, dbwd_min_warps32=warps))
        assert capped != cu.read_text()
    for warps in (max(fitting), 0):  # the tightest cap the kernel fits in, and the rule off
        assert _second_source(struct, _codegen.Tuning(dbwd_auto_warps32=warps), r.stderr) is None
    # an explicit cap is never revised
    assert _second_source(struct, _codegen.Tuning(dbwd_auto_warps32=64, dbwd_min_warps32=4), r.stderr) is None


def _ptxas_lines(name: str, registers: int, spill_stores: int, smem: int = 0) -> str:
    """One kernel's lines as ptxas -v prints them."""
    return (f"ptxas info    : Compiling entry function '{name}' for 'sm_90'\n"
            f"ptxas info    : Function properties for {name}\n"
            f"    {spill_stores * 2} bytes stack frame, {spill_stores} bytes spill stores, {spill_stores} bytes spill "
            f"loads\n"
            f"ptxas info    : Used {registers} registers, used {int(smem > 0)} barriers"
            + (f", {smem} bytes smem" if smem else "") + ", 400 bytes cmem[0]\n")


def _second_source(struct, tune, report):
    """The source of the build's second look after a first build's ptxas `report`, None where it is the first's."""
    revised = _codegen.generate(struct, _codegen._second_look(struct, tune, _codegen.ptxas_kernels(report)))
    return None if revised == _codegen.generate(struct, tune) else revised


def test_forward_float64_minimum_where_it_spills():
    """``Tuning.fwd_auto_warps64``: where the first build's float64 forward kernel spills at least
    ``fwd_spill_bytes``, the library is built again with that minimum of warps for the forward alone
    (``fwd_min_warps64``); a forward without spills or with fewer spilled bytes, the rule off, a minimum asked for or
    one the rule would not lower keep the first build; the double backward's rule still applies beside it.
    The float32 forward and g_grad_out's forward-shaped kernel (dfwd) are not the rule's."""
    struct = _codegen.plan_structure(_conv(mul=40))  # 64 threads per block: 8 and 9 warps are both 4 blocks
    fwd64 = "_ZN8md_accel12_GLOBAL__N_110fwd_kernelIdEEvPKT_S4_S4_PS2_PKlS7_S7_NS_6TPDimsE"
    fwd32 = fwd64.replace("kernelIdE", "kernelIfE")
    dfwd64 = "_ZN8md_accel12_GLOBAL__N_111dfwd_kernelIdEEvPKT_S4_S4_S4_S4_S4_PS2_PKlS7_S7_NS_6TPDimsE"
    dbwd32 = "_ZN8md_accel12_GLOBAL__N_113dbwd_kernel_dsIfLb0EEEvPKT_"
    dbwd64 = dbwd32.replace("dsIfL", "dsIdL")
    quiet = (_ptxas_lines(dbwd32, 40, 0) + _ptxas_lines(dbwd64, 168, 0) + _ptxas_lines(fwd32, 90, 64)
             + _ptxas_lines(dfwd64, 168, 1328))
    spilling = quiet + _ptxas_lines(fwd64, 168, 560)
    kernels = _codegen.ptxas_kernels(spilling)
    assert kernels[fwd64] == (168, 560, 0) and kernels[fwd32] == (90, 64, 0) and kernels[dbwd32] == (40, 0, 0)
    # a device function's properties printed inside the entry's lines are not the entry's
    callee = ("ptxas info    : Function properties for _Z6helperv\n"
              "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    inner = _ptxas_lines(fwd64, 168, 560).replace("ptxas info    : Used", callee + "ptxas info    : Used")
    assert _codegen.ptxas_kernels(inner)[fwd64] == (168, 560, 0)
    assert _codegen.ptxas_registers(spilling) == {k: v.registers for k, v in kernels.items()}
    on = _codegen.Tuning(dbwd_auto_warps32=0)  # the default forward rule (GEN 31), the float32 cap off
    assert on.fwd_auto_warps64 == 8
    revised = _second_source(struct, on, spilling)
    assert revised == _codegen.generate(struct, on._replace(fwd_min_warps64=8)) != _codegen.generate(struct, on)
    assert _second_source(struct, on, quiet + _ptxas_lines(fwd64, 150, 0)) is None
    assert on.fwd_spill_bytes == _codegen.FWD_SPILL_BYTES > 24  # sevennet_l3i5's 24 bytes: not worth a block
    assert _second_source(struct, on, quiet + _ptxas_lines(fwd64, 168, 24)) is None
    at = on.fwd_spill_bytes
    assert _second_source(struct, on, quiet + _ptxas_lines(fwd64, 168, at)) == revised
    assert _second_source(struct, on, quiet + _ptxas_lines(fwd64, 168, at - 1)) is None
    assert _second_source(struct, on._replace(fwd_spill_bytes=24), quiet + _ptxas_lines(fwd64, 168, 24)) == revised
    assert _second_source(struct, on._replace(fwd_auto_warps64=0), spilling) is None
    assert _second_source(struct, on._replace(fwd_min_warps64=12), spilling) is None
    threads = _codegen._analyse(struct)[2]
    same_blocks = [w for w in range(9, 64) if max(1, w * 32 // threads) == max(1, 8 * 32 // threads)]
    assert same_blocks  # minima of more warps that still give as many resident blocks as 8 warps
    for w64 in (8, max(same_blocks)):  # it would not lower the minimum of blocks
        assert _second_source(struct, on._replace(min_warps64=w64), spilling) is None
    with pytest.warns(UserWarning, match="no float64 forward kernel"):
        assert _second_source(struct, on, quiet) is None  # forwards, but none the rule knows
    # with the double backward's cap: one second build with both minima
    both = on._replace(dbwd_auto_warps32=64)  # 64 warps of 64 threads leave 32 registers: the 40 above exceed it
    assert _second_source(struct, both, spilling) == _codegen.generate(
        struct, both._replace(fwd_min_warps64=8, dbwd_min_warps32=64))


def test_grad_y_through_shared_memory_where_the_double_backward_spills(monkeypatch):
    """``Tuning.gy_spill_bytes``: where the first build's float64 double backward (part 1, either of its kernels)
    spills at least that many bytes, the library is built again with grad_y summed through shared memory
    (``gy_smem``); fewer spilled bytes, spills in other kernels, the rule off or gy_smem asked for keep the first
    build, and a plan whose buffers would not fit (so that the source would not change) is not built again."""
    struct = _codegen.plan_structure(_conv(mul=40))
    name = "_ZN8md_accel12_GLOBAL__N_113dbwd_kernel_dsI{}Lb{}EEEvPKT_"
    f64_whole, f64_parts, f32 = name.format("d", 0), name.format("d", 1), name.format("f", 0)
    fwd64 = "_ZN8md_accel12_GLOBAL__N_110fwd_kernelIdEEvPKT_S4_S4_PS2_PKlS7_S7_NS_6TPDimsE"
    on = _codegen.Tuning(dbwd_auto_warps32=0, fwd_auto_warps64=0, g_spill_bytes=0)  # the grad_y rule alone
    at = on.gy_spill_bytes
    assert at == _codegen.GY_SPILL_BYTES and 412 < at <= 2204  # mace_large's spills: not; sevennet_l3i5's: yes

    def report(whole, parts, others=0):
        return (_ptxas_lines(f32, 168, others) + _ptxas_lines(fwd64, 168, others)
                + _ptxas_lines(f64_whole, 168, whole) + _ptxas_lines(f64_parts, 168, parts))

    revised = _codegen.generate(struct, on._replace(gy_smem=1))
    assert "= warp_sum_smem<T" in revised and revised != _codegen.generate(struct, on)
    assert _second_source(struct, on, report(at, 0)) == revised
    assert _second_source(struct, on, report(0, at)) == revised
    assert _second_source(struct, on, report(at - 1, at - 1, others=4096)) is None
    assert _second_source(struct, on._replace(gy_spill_bytes=0), report(at, at)) is None
    assert _second_source(struct, on._replace(gy_smem=1), report(at, at)) is None
    with pytest.warns(UserWarning, match="no float64 double-backward kernel"):
        assert _second_source(struct, on, _ptxas_lines(f32, 168, at)) is None
    monkeypatch.setattr(_codegen, "GY_SMEM_BYTES", 0)  # no plan's buffers fit: the revised source would be the first
    assert _second_source(struct, on, report(at, at)) is None
    monkeypatch.undo()
    # with the forward's rule: one second build with both
    both = on._replace(fwd_auto_warps64=8)
    assert _second_source(struct, both, report(at, 0, others=560)) == _codegen.generate(
        struct, both._replace(gy_smem=1, fwd_min_warps64=8))


def test_grad_out_through_shared_memory_where_part1_spills():
    """``Tuning.g_spill_bytes``: the part-1 kernels whose float64 instantiation (any variant) spilled at least that
    many bytes in the first build take their grad_out through shared memory in the second (``g_smem``, each kernel
    its own G_SMEM_BIT: one serving both dtypes in both), beside the grad_y rule's change where that fires too;
    fewer bytes, float32 spills, the rule off or g_smem asked for keep the first build, and so does a bit whose kernel the plan lacks."""
    struct = _codegen.plan_structure(_conv(mul=40))  # one backward and one double backward kernel for both dtypes

    def kernel(tag: str, dtype: str, spills: int, variant: str = "Lb1ELb0") -> str:
        kind = "dbwd" if tag[0] == "d" else "bwd"
        return _ptxas_lines(f"_ZN8md_accel12_GLOBAL__N_113{kind}_kernel_{tag}I{dtype}{variant}EEEvPKT_", 168, spills)

    on = _codegen.Tuning(dbwd_auto_warps32=0, fwd_auto_warps64=0, gy_spill_bytes=0)  # the grad_out rule alone
    at = on.g_spill_bytes
    assert at == _codegen.G_SPILL_BYTES and 92 < at <= 196  # mace_mp0_medium's backward: not; sevennet_0's dbwd: yes
    bits = lambda report: _codegen._g_through_smem(on, _codegen.ptxas_kernels(report))  # noqa: E731
    quiet = kernel("bs", "f", 4096) + kernel("bs", "d", at - 1) + kernel("ds", "d", 0)
    assert bits(quiet) is None
    assert bits(quiet + kernel("dd", "d", at)) == _codegen.G_SMEM_BIT["dd"] == 8
    assert bits(quiet + kernel("bd", "d", at, "Lb0ELb1") + kernel("dd", "d", 2 * at)) == 2 | 8
    assert bits(kernel("bs", "d", at) + kernel("ds", "d", at)) == 1 | 4
    spilling = _codegen.ptxas_kernels(quiet + kernel("dd", "d", at))
    assert _codegen._g_through_smem(on._replace(g_spill_bytes=0), spilling) is None
    assert _codegen._g_through_smem(on._replace(g_smem=2), spilling) is None
    first = _codegen.generate(struct, on)
    assert _second_source(struct, on, quiet) is None
    assert _second_source(struct, on, quiet + kernel("ds", "d", at)) == _codegen.generate(
        struct, on._replace(g_smem=4)) != first
    assert _second_source(struct, on, quiet + kernel("dd", "d", at)) is None  # no float64-only kernel here
    # with the grad_y rule: one second build with both
    both = on._replace(gy_spill_bytes=_codegen.GY_SPILL_BYTES)
    assert _second_source(struct, both, kernel("ds", "d", _codegen.GY_SPILL_BYTES)) == _codegen.generate(
        struct, both._replace(g_smem=4, gy_smem=1))
    with pytest.warns(UserWarning, match="no float64 part-1 kernel"):
        assert bits(kernel("bs", "f", at)) is None


def test_resident_blocks_per_sm():
    """sm_90's limits, by hand: 64K registers (per thread in steps of 8), 2,048 threads and 32 blocks per SM,
    228 KB of shared memory with 1 KB reserved per block."""
    k = _codegen.PtxasKernel
    assert _codegen.resident_blocks(128, k(168, 0)) == 3  # 168 * 128 = 21,504 registers a block
    assert _codegen.resident_blocks(128, k(127, 0)) == _codegen.resident_blocks(128, k(128, 0)) == 4
    assert _codegen.resident_blocks(128, k(96, 0)) == 5 and _codegen.resident_blocks(128, k(64, 0)) == 8
    assert _codegen.resident_blocks(32, k(168, 0)) == 12 and _codegen.resident_blocks(32, k(128, 0)) == 16
    assert _codegen.resident_blocks(32, k(32, 0)) == 32  # the block limit, not the registers' 64
    assert _codegen.resident_blocks(1024, k(16, 0)) == 2  # the thread limit (the registers allow 4)
    assert _codegen.resident_blocks(64, k(33, 0)) == 25  # 40 registers a thread (33 would allow 31 blocks)
    assert _codegen.resident_blocks(128, k(64, 0, 60 * 1024)) == 3  # 228 KB over 61 KB
    assert _codegen.resident_blocks(128, k(64, 0, 20 * 1024)) == 8  # registers still the tighter


def test_float32_grad_out_rule_keeps_the_trial_where_blocks_rise_and_registers_fall_by_a_third_at_most():
    """``Tuning.g32_auto`` (``_Revisions``): the first build's report leads to a trial with the float32 backward's
    kernel staging grad_out in shared memory (G_SMEM_BIT "bs"); the trial is the library where that kernel's
    resident blocks per SM rose while its registers fell by a third or less, else the second look's source is built
    (the first's where no other rule fires: reused); the rule off, g_smem asked for or the bit given by the float64
    rule make no trial."""
    struct = _codegen.plan_structure(_conv(mul=40))  # 64 threads per block; kernels bs and ds serve both dtypes
    off = _codegen.Tuning(dbwd_auto_warps32=0, fwd_auto_warps64=0, gy_spill_bytes=0)  # the other rules quiet
    bs32 = "_ZN8md_accel12_GLOBAL__N_113bwd_kernel_bsIfLb0ELb1EEEvPKT_"
    bs64 = bs32.replace("bsIfL", "bsIdL")
    first, trial = _codegen.generate(struct, off), _codegen.generate(struct, off._replace(g_smem=1))
    assert trial != first

    def run(tune, first_regs, trial_regs, trial_smem=4096):
        revise = _codegen._Revisions(struct, tune)
        out = [revise(_ptxas_lines(bs32, first_regs, 0) + _ptxas_lines(bs64, 168, 0))]
        if out[0] == trial:
            out.append(revise(_ptxas_lines(bs32, trial_regs, 0, trial_smem) + _ptxas_lines(bs64, 168, 0, trial_smem)))
        return out

    # 64 threads: 168 registers -> 6 blocks, 128 -> 8, 120 and 127 (128) -> 8, 112 -> 9, 104 -> 9, 96 -> 10
    assert run(off, 168, 128) == [trial, None]  # kept: 2 more blocks, 40 registers (24 %) fewer
    assert run(off, 127, 96) == [trial, None]  # 2 more blocks, 31 registers (24 %) fewer
    assert run(off, 168, 112) == [trial, None]  # a third fewer registers exactly
    assert run(off, 168, 104) == [trial, first]  # more than a third fewer: back to the first build
    assert run(off, 168, 96) == [trial, first]  # 4 more blocks, but 43 % fewer registers
    assert run(off, 127, 120) == [trial, first]  # no more blocks
    # each build judged by its worst variant: the most registers, the fewest blocks
    bs32b = bs32.replace("bsIfLb0E", "bsIfLb1E")
    k = _codegen.PtxasKernel
    first2 = {bs32: k(96, 0), bs32b: k(128, 0)}  # 10 and 8 blocks
    assert _codegen._g32_gained(64, first2, {bs32: k(64, 0, 4096), bs32b: k(96, 0, 4096)})  # 16 and 10
    assert not _codegen._g32_gained(64, first2, {bs32: k(64, 0, 4096), bs32b: k(128, 0, 4096)})  # 8 still
    assert not _codegen._g32_gained(64, first2, {bs64: k(64, 0)})  # no float32 backward kernel in the trial
    assert run(off, 168, 128, trial_smem=100 * 1024) == [trial, first]  # 2 blocks by shared memory
    assert run(off._replace(g32_auto=0), 168, 128) == [first]
    assert run(off._replace(g_smem=4), 168, 128) == [_codegen.generate(struct, off._replace(g_smem=4))]
    # the float64 rule gives "bs" (its float64 form spills): that is the second look, no trial
    revise = _codegen._Revisions(struct, off._replace(g_spill_bytes=_codegen.G_SPILL_BYTES))
    assert revise(_ptxas_lines(bs32, 168, 0) + _ptxas_lines(bs64, 168, 4096)) == trial
    assert revise(_ptxas_lines(bs32, 128, 0, 4096) + _ptxas_lines(bs64, 168, 0, 4096)) is None
    # with another rule firing: the trial has both changes, and a rejected trial builds the second look's
    both = off._replace(fwd_auto_warps64=8)
    fwd64 = _ptxas_lines("_ZN8md_accel12_GLOBAL__N_110fwd_kernelIdEEvPKT_S4_S4_PS2_PKlS7_S7_NS_6TPDimsE", 168, 560)
    revise = _codegen._Revisions(struct, both)
    second = both._replace(fwd_min_warps64=8)
    f64 = fwd64 + _ptxas_lines(bs64, 168, 0)
    assert revise(f64 + _ptxas_lines(bs32, 168, 0)) == _codegen.generate(struct, second._replace(g_smem=1))
    assert revise(f64 + _ptxas_lines(bs32, 96, 0, 4096)) == _codegen.generate(struct, second)
    assert revise(f64 + _ptxas_lines(bs32, 168, 0)) is None


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
                    reason="needs nvcc")
@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils)")
def test_compile_cached_builds_the_revised_source(tmp_path, monkeypatch):
    """``compile_cached(revise=...)``: each build's ptxas report reaches ``revise``; the source it returns is built
    next, one built already ends the builds with that library (no rebuild), None keeps the last build."""
    struct = _codegen.plan_structure(_conv())
    first = _codegen.generate(struct)
    marked = first + 'extern "C" int md_accel_test_revised() { return 1; }\n'

    def build(answers):
        reports = []

        def revise(report):
            reports.append(report)
            return answers[len(reports) - 1]

        so = tmp_path / f"lib{len(list(tmp_path.iterdir()))}.so"
        path = _codegen.compile_cached(so, lambda: first, "plan", "sm_90", "test plan", revise=revise)
        assert path == str(so) and so.is_file()
        assert all(_codegen.ptxas_registers(r) for r in reports)  # each a build's report
        return "md_accel_test_revised" in _exported(path), len(reports)

    assert build([marked, None]) == (True, 2)  # the revised source is the library
    assert build([marked, first]) == (False, 2)  # back to the first build, not built again
    assert build([None]) == (False, 1)
    assert build([first]) == (False, 1)  # the first source again: no second build
    assert not [p for p in os.listdir(tmp_path) if p.startswith("tmp")]  # no leftovers
    monkeypatch.setattr(_codegen, "MAX_BUILDS", 1)
    with pytest.raises(RuntimeError, match="more than 0 times"):
        build([marked])
