"""The benchmark harness on the CPU: the scripts run, and the rows they compare compute the same
physics (md_accel's converted NequIP model against nequip's own model, in one model_step run)."""
import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "benchmarks")


def run_script(name, *args):
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, os.path.join(BENCH, name), *args], capture_output=True, text=True,
                          timeout=900, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_model_step_rows_agree_with_nequip(tmp_path):
    pytest.importorskip("nequip")
    run_script("model_step.py", "--backends", "nequip:e3nn,md_accel:nequip,md_accel:nequip+graph", "--device", "cpu",
               "--sizes", "32", "--dtype", "float64", "--repeats", "1", "--warmup", "0", "--out", str(tmp_path))
    data = json.load(open(tmp_path / "model_step.json"))
    assert {r["backend"] for r in data["results"] if r["status"] == "ok"} == {
        "nequip:e3nn", "md_accel:nequip", "md_accel:nequip+graph"}
    checks = {c["backend"]: c for c in data["cross_check"]}
    assert set(checks) == {"md_accel:nequip", "md_accel:nequip+graph"}
    for c in checks.values():
        assert c["reference"] == "nequip:e3nn"
        assert c["d_energy_per_atom"] < 1e-10 and c["max_d_force"] < 1e-9 * max(1.0, c["max_force_ref"])
    assert (tmp_path / "model_step.png").exists() and "Model step" in (tmp_path / "tables.md").read_text()
    widths = {r["backend"]: r.get("weight_widths") for r in data["results"]}  # what lean_threshold.py counts
    assert widths["nequip:e3nn"] is None and widths["md_accel:nequip"] == widths["md_accel:nequip+graph"]
    assert len(widths["md_accel:nequip"]) >= 2 and all(w > 0 for w in widths["md_accel:nequip"])


def test_roofline_counts():
    sys.path.insert(0, BENCH)
    try:
        from roofline import flops_per_edge
        from workloads import WORKLOADS, _make
    finally:
        sys.path.remove(BENCH)
    # one scalar path (u = 1, one CG coefficient, d3 = 1): forward 1 + (2 + 2), backward 1 + (1 + 6 + 2)
    assert flops_per_edge(_make("scalar", "1x0e", "1x0e", "1x0e", "")) == {"fwd": 5.0, "fwd_bwd": 15.0}
    # four paths (0e0e0e, 0e1o1o, 1o0e1o, 1o1o0e) with 1 + 3 + 3 + 3 CG non-zeros and output
    # dimensions 1, 3, 3, 1: 10 shared products plus per channel 2 * 10 + 2 * 8
    one = flops_per_edge(_make("m1", "1x0e+1x1o", "1x0e+1x1o", "1x0e+1x1o", ""))
    many = flops_per_edge(_make("m8", "8x0e+8x1o", "1x0e+1x1o", "8x0e+8x1o", ""))
    assert one["fwd"] == 10 + 36 and many["fwd"] == 10 + 8 * 36
    out = run_script("roofline.py", "--workloads", "mace_first", "--graph", "cu:32:4.0")
    assert "| mace_first | float32 | fwd |" in out and list(WORKLOADS)


def test_model_step_sevenn_float64_rows_agree(tmp_path):
    """sevenn's own model runs in float64 (its float32 one-hot cast), and md_accel's conversion of the
    same checkpoint is cross-checked against it in the same run."""
    pytest.importorskip("sevenn")
    run_script("model_step.py", "--backends", "sevenn:e3nn,md_accel:sevenn", "--sevenn-checkpoint", "SevenNet_0__11Jul2024",
               "--device", "cpu", "--sizes", "32", "--dtype", "float64", "--repeats", "1", "--warmup", "0",
               "--out", str(tmp_path))
    data = json.load(open(tmp_path / "model_step.json"))
    assert {r["backend"] for r in data["results"] if r["status"] == "ok"} == {"sevenn:e3nn", "md_accel:sevenn"}
    (check,) = data["cross_check"]
    assert check["backend"] == "md_accel:sevenn" and check["reference"] == "sevenn:e3nn"
    # sevenn keeps its Clebsch-Gordan buffers float32-rounded: agreement to ~1e-9, not 1e-15
    assert check["d_energy_per_atom"] < 1e-8 and check["max_d_force"] < 1e-7 * max(1.0, check["max_force_ref"])


def test_kernels_double_backward_split_into_loss_and_op(tmp_path):
    """kernels.py on the CPU: every implementation checked against e3nn, and the double-backward pass
    reported whole and as the op's share (the pass minus its loss timed alone)."""
    out = run_script("kernels.py", "--device", "cpu", "--graph", "random:40:300", "--workloads", "mace_first",
                     "--dtypes", "float32,float64", "--impls", "md_accel,e3nn", "--repeats", "2", "--warmup", "1",
                     "--out", str(tmp_path))
    data = json.load(open(tmp_path / "kernels.json"))
    assert len(data["checks"]) == 4 and all(c["status"] == "ok" for c in data["checks"])
    assert out.count("e3nn reference: computed") == 1
    for c in data["checks"]:  # both dtypes against the one float64 reference
        assert max(c["fwd"], c["bwd"], c["dbwd"]) < (1e-12 if c["dtype"] == "float64" else 1e-5)
        if c["dtype"] == "float32":  # computed in float32, compared with float64
            assert max(c["fwd"], c["bwd"], c["dbwd"]) > 1e-9
    dbwd = [r for r in data["results"] if r["pass"] == "dbwd" and r["dtype"] == "float64"]
    assert {r["impl"] for r in dbwd} == {"md_accel", "e3nn"}
    (loss,) = {r["loss_ms"] for r in dbwd}  # one loss timing shared by every implementation
    for r in dbwd:
        assert loss > 0 and r["op_ms"] == pytest.approx(r["median_ms"] - loss)
    assert "(op " in out


def test_conv_profile_runs_the_chosen_implementation():
    """conv_profile.py (a profiler's target) runs kernels.py's implementations by name (md_accel's variants under
    their settings) and refuses an unknown one."""
    for impl in ("md_accel_gwrows", "e3nn"):
        out = run_script("conv_profile.py", "--device", "cpu", "--impl", impl, "--graph", "random_sym:20:80",
                         "--workloads", "mace_first", "--dtypes", "float64", "--passes", "fwd_bwd,dbwd")
        assert [line.split(":")[0] for line in out.splitlines() if line.startswith("[conv_profile]")] == [
            "[conv_profile] mace_first float64 fwd_bwd", "[conv_profile] mace_first float64 dbwd"]  # a line per pass
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "conv_profile.py"), "--device", "cpu", "--impl",
                           "nope", "--graph", "random_sym:20:80", "--workloads", "mace_first"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode != 0 and "unknown implementation 'nope'" in proc.stderr


def test_random_graphs_directed_and_symmetric():
    """The kernel benchmark's random graphs: sorted by receiver; the symmetric one holds every edge's
    reverse with the vector negated (a neighbour list's pairs), the directed one not."""
    sys.path.insert(0, BENCH)
    try:
        import common
    finally:
        sys.path.remove(BENCH)
    import numpy as np

    def reverses(g):
        edges = {}
        for s, d, v in zip(g["src"], g["dst"], g["vec"]):
            edges.setdefault((s, d), []).append(v)
        return all(any(np.allclose(u, -v) for u in edges.get((d, s), [])) for (s, d), vs in edges.items()
                   for v in vs)

    sym, directed = common.random_graph(30, 200, symmetric=True), common.random_graph(30, 200)
    for g in (sym, directed):
        assert len(g["src"]) == 200 and np.all(np.diff(g["dst"]) >= 0)
        assert np.allclose(np.linalg.norm(g["vec"], axis=1), 1.0)
    assert reverses(sym) and not reverses(directed)


def test_time_gpu_times_at_least_min_seconds():
    """``time_gpu(min_seconds=...)`` and ``time_wall``: at least ``repeats`` calls, and more until the timed window
    has lasted ``min_seconds`` (the window the power-capped GPU needs to settle); without it, exactly ``repeats``.
    The benchmarks' ``--min-seconds`` default: MIN_SECONDS_CUDA on CUDA, none elsewhere, a given value as given."""
    sys.path.insert(0, BENCH)
    try:
        import common
    finally:
        sys.path.remove(BENCH)
    calls = []
    fn = lambda: (calls.append(1), time.sleep(0.01))  # noqa: E731
    short = common.time_gpu(fn, "cpu", warmup=0, repeats=3)
    assert short["repeats"] == 3 and short["median_ms"] >= 10.0
    window = []
    long = common.time_gpu(fn, "cpu", warmup=0, repeats=3, window=window, min_seconds=0.15)
    assert long["mean_ms"] * long["repeats"] >= 140.0 and long["repeats"] <= 0.15 / 0.01 + 1
    assert len(calls) == 3 + long["repeats"]
    assert len(window) == 2
    window = []
    wall = common.time_wall(fn, "cpu", warmup=0, repeats=3, min_seconds=0.15, window=window)
    assert wall["mean_ms"] * wall["repeats"] >= 140.0 and common.time_wall(fn, "cpu", 0, 3)["repeats"] == 3
    assert len(window) == 2 and window[0] <= window[1]
    assert common.min_seconds(None, "cpu") == 0.0 and common.min_seconds(0.5, "cuda") == 0.5
    assert common.min_seconds(None, "cuda") == common.MIN_SECONDS_CUDA > 0


def test_kernels_reference_cache(tmp_path):
    """kernels.py --reference-cache: the first run writes e3nn's float64 check results, the second reads them
    and reports the same errors; a corrupted file would change them, so they come from the file."""
    args = ["--device", "cpu", "--graph", "random:30:200", "--workloads", "mace_first", "--dtypes", "float32",
            "--impls", "md_accel", "--passes", "fwd", "--repeats", "1", "--warmup", "0",
            "--reference-cache", str(tmp_path / "ref")]
    assert "e3nn reference: computed" in run_script("kernels.py", *args, "--out", str(tmp_path / "a"))
    (cached,) = (tmp_path / "ref").iterdir()
    assert f"e3nn reference: {cached}" in run_script("kernels.py", *args, "--out", str(tmp_path / "b"))
    first, second = (json.load(open(tmp_path / d / "kernels.json"))["checks"][0] for d in ("a", "b"))
    assert first["status"] == "ok" and first["fwd"] < 1e-5
    assert all(first[k] == second[k] for k in ("fwd", "bwd", "dbwd"))
    import torch
    outputs = torch.load(cached, weights_only=True)
    torch.save([2 * t for t in outputs], cached)  # a reference twice as large: the check must see it
    run_script("kernels.py", *args, "--out", str(tmp_path / "c"))
    third = json.load(open(tmp_path / "c" / "kernels.json"))["checks"][0]
    assert third["fwd"] == pytest.approx(0.5, rel=1e-3)
    # another check graph: another file
    run_script("kernels.py", *args, "--check-nodes", "20", "--out", str(tmp_path / "d"))
    assert len(list((tmp_path / "ref").iterdir())) == 2
    cached.write_bytes(b"not a torch file")  # a file that does not load is recomputed (and rewritten)
    out = run_script("kernels.py", *args, "--out", str(tmp_path / "e"))
    assert "did not load" in out and "e3nn reference: computed" in out
    fifth = json.load(open(tmp_path / "e" / "kernels.json"))["checks"][0]
    assert fifth["fwd"] == first["fwd"] and torch.load(cached, weights_only=True)[0].shape == outputs[0].shape


def test_kernel_times_lines_sum_and_order():
    """kernels.py --kernel-times: the busy line is the kernels' summed time per call, then the longest kernels
    first, each with its launches per call, at most ``top`` of them."""
    sys.path.insert(0, BENCH)
    try:
        from kernels import kernel_lines
    finally:
        sys.path.remove(BENCH)
    kernels = {"short": {"us": 250.0, "launches": 2}, "long": {"us": 4000.0, "launches": 1},
               "mid": {"us": 1250.0, "launches": 3}}
    lines = kernel_lines(kernels, top=2).splitlines()
    assert lines[0].split() == ["kernels", "busy", "5.500", "ms", "per", "call"]
    assert [ln.split()[0] for ln in lines[1:]] == ["4.000", "1.250"]
    assert [ln.split()[2:] for ln in lines[1:]] == [["x1", "long"], ["x3", "mid"]]


def test_smi_join_matches_cells_with_the_clock_log(tmp_path):
    """smi_join.py: each timed record gets the nvidia-smi samples inside its window (units in the log or not, rows
    cut short skipped, a cut reasons mask ignored), their SM clock range, peak power and the event reasons OR-ed;
    untimed records are left out."""
    sys.path.insert(0, BENCH)
    try:
        import smi_join
        from common import local_stamp
    finally:
        sys.path.remove(BENCH)
    log = tmp_path / "smi.csv"
    log.write_text(
        "timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
        "clocks_event_reasons.active\n"
        "2026/11/30 01:00:00.000, 1980 MHz, 3201 MHz, 300.0 W, 40, 0x0000000000000000\n"
        "2026/11/30 01:00:00.500, 1410 MHz, 3201 MHz, 700.0 W, 55, 0x0000000000000004\n"
        "2026/11/30 01:00:01.000, 1755 MHz, 3201 MHz, 650.0 W, 56, 0x0000000000000001\n"
        "2026/11/30 01:00:01.500, 1980 MHz\n"
        "2026/11/30 01:00:01.600, 1980 MHz, 3201 MHz, 650.0 W, 56, 0x\n"
        "2026/11/30 01:00:02.000, 1980 MHz, 3201 MHz, 120.0 W, 50, 0x0000000000000000\n")
    cell = {"workload": "w", "dtype": "float64", "impl": "md_accel", "median_ms": 12.0}
    records = [{**cell, "pass": "dbwd", "timed": ["2026/11/30 01:00:00.400", "2026/11/30 01:00:01.600"]},
               {**cell, "pass": "fwd", "timed": ["2026/11/30 01:00:01.900", "2026/11/30 01:00:02.100"]},
               {**cell, "pass": "fwd_bwd", "status": "OOM"},
               {**cell, "impl": "cueq", "pass": "dbwd",
                "timed": ["2026/11/30 01:00:00.000", "2026/11/30 01:00:00.100"]}]
    joined = smi_join.join(records, smi_join.read_smi(str(log)), impls=["md_accel"])
    assert [j["pass"] for j in joined] == ["dbwd", "fwd"]
    first, second = joined
    assert first["samples"] == 3 and first["sm_mhz"] == (1410.0, 1755.0, 1980.0)
    assert first["power_w"] == 700.0 and first["temp_c"] == 56.0 and first["reasons"] == 0x5
    # power.draw averages the last second: only the samples a second or more into the window are the cell's own
    assert first["mean_power_w"] == 650.0 and first["joules"] == pytest.approx(650.0 * 0.012)
    assert "7.80 J per call" in smi_join.line(first)
    assert second["joules"] is None  # a 0.2 s window: no sample of its own
    assert second["samples"] == 1 and second["sm_mhz"] == (1980.0, 1980.0, 1980.0) and second["reasons"] == 0
    assert "SM 1410 / 1755 / 1980 MHz" in smi_join.line(first)
    log.write_text("timestamp, clocks.current.sm, power.draw, clocks_event_reasons.active\n"
                   "2026/11/30 01:00:00.500, 1500, 400.00, 0x1\n")  # --format=csv,nounits
    only = smi_join.join(records[:1], smi_join.read_smi(str(log)))[0]
    assert only["sm_mhz"] == (1500.0, 1500.0, 1500.0) and only["power_w"] == 400.0 and only["reasons"] == 1
    assert only["joules"] is None  # its one sample is 0.1 s into the window
    log.write_text("timestamp, power.draw, power.draw.instant\n"  # instantaneous power: every sample counts
                   "2026/11/30 01:00:00.500, 400.00, 600.00\n2026/11/30 01:00:01.000, 500.00, 700.00\n")
    assert smi_join.join(records[:1], smi_join.read_smi(str(log)))[0]["joules"] == pytest.approx(650.0 * 0.012)
    log.write_text("timestamp, clocks.current.sm\n2026/11/30 01:00:01.500, 1500\n")  # no power logged
    assert smi_join.join(records[:1], smi_join.read_smi(str(log)))[0]["joules"] is None
    assert smi_join._time(local_stamp()) <= smi_join._time(local_stamp())  # kernels.py's stamps parse
    # model_step.py's steps: backend and size instead of workload and pass; --impls picks backends
    steps = [{"backend": b, "model": "cu", "atoms": 4000, "median_ms": 12.0,
              "timed": ["2026/11/30 01:00:00.400", "2026/11/30 01:00:01.600"]} for b in ("md_accel:m.mdx", "mace")]
    joined = smi_join.join(steps + records[:1], smi_join.read_smi(str(log)), impls=["mace"])
    assert [j["backend"] for j in joined] == ["mace"] and "4000 atoms  mace" in smi_join.line(joined[0])
    assert len(smi_join.join(steps + records[:1], smi_join.read_smi(str(log)))) == 3


def test_kernels_loss_is_the_sum_of_squares():
    """kernels.py's double-backward loss (a fused autograd Function) has the value, gradient and
    second derivative through the first gradients of sum(f * f)."""
    import torch

    sys.path.insert(0, BENCH)
    try:
        from kernels import dbwd_loss
    finally:
        sys.path.remove(BENCH)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(5, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, generator=gen, dtype=torch.float64, requires_grad=True)

    def firsts(x):  # first gradients of a cubic, so the loss's backward is differentiated again
        return torch.autograd.grad((x ** 3).sum() + (x.sum() ** 2), x, create_graph=True)[0]

    def loss_and_grads(loss_fn):
        first = [firsts(a), firsts(b)]
        loss = loss_fn(first)
        return (loss.detach(),) + torch.autograd.grad(loss, [a, b])

    # scaled, so that the Function's backward must use its incoming gradient
    torch.testing.assert_close(loss_and_grads(lambda fs: 3 * dbwd_loss(fs)),
                               loss_and_grads(lambda fs: 3 * sum((f * f).sum() for f in fs)), rtol=1e-14, atol=0)


def test_byte_floor_is_the_tensors_each_stage_touches():
    """workloads.byte_floor against the tensors the passes really read and write: md_accel's op run with
    autograd on the CPU (a random graph), each stage's inputs and outputs counted from their sizes (what it
    checks is the workload's dims and weight count against real tensors, and each stage's list of them)."""
    import torch

    sys.path.insert(0, BENCH)
    try:
        from kernels import GraphT, MdAccelImpl, dbwd_loss, inputs, make_graph
        from workloads import WORKLOADS, byte_floor
    finally:
        sys.path.remove(BENCH)
    wl, cpu = WORKLOADS["sevennet_0"], torch.device("cpu")
    g = GraphT(make_graph("random:12:50"), cpu)
    impl = MdAccelImpl(wl, g, torch.float64, cpu)
    leaves = [t.requires_grad_(True) for t in impl.prepare(*inputs(wl, g, torch.float64, cpu))]
    out = impl.run(*leaves)
    go = torch.randn_like(out)
    first = torch.autograd.grad(out, leaves, go, create_graph=True)
    second = torch.autograd.grad(dbwd_loss(first), leaves)

    def nbytes(ts):
        return sum(t.numel() * t.element_size() for t in ts)

    idx = 8 * g.num_edges  # int32 sender and receiver per edge, once per stage over the edges
    fwd = nbytes(leaves) + nbytes([out]) + idx
    bwd = nbytes(leaves) + nbytes([go]) + nbytes(first) + idx
    loss = 3 * nbytes(first)  # read forward, read again and the gradients written backward
    dbwd = nbytes(first) + nbytes([go]) + nbytes(leaves) + nbytes(second) + idx
    assert byte_floor(wl, g.num_nodes, g.num_edges, 8) == {"fwd": fwd, "fwd_bwd": fwd + bwd,
                                                          "dbwd": fwd + bwd + loss + dbwd}


def test_lammps_scaling_plot(tmp_path):
    report = {"meta": {"model": "m.mdx", "gpu": "GPU"}, "rows": [
        {"case": "weak-layer", "gpus": g, "status": "ok", "atoms": 32000 * g, "ms_per_step": 500.0 + 50 * g,
         "atom_steps_per_s": 32000 * g / (0.5 + 0.05 * g)} for g in (1, 2, 4)] + [
        {"case": "big-layer", "gpus": 4, "status": "failed: out of memory"}]}
    path = tmp_path / "scaling.json"
    path.write_text(json.dumps(report))
    pytest.importorskip("matplotlib")
    out = run_script("lammps_scaling_plot.py", str(path))
    png = tmp_path / "scaling.png"
    assert "wrote" in out and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tuning_table_ratios_and_wrong_variants(tmp_path):
    def write(label, ms, err):
        (tmp_path / label).mkdir()
        results = [{"workload": "w", "dtype": "float32", "impl": "md_accel", "pass": p, "status": "ok", "median_ms": t}
                   for p, t in zip(("fwd", "fwd_bwd"), ms)]
        checks = [{"workload": "w", "dtype": "float32", "impl": "md_accel", "status": "ok", "fwd": err, "bwd": err,
                   "dbwd": err}]
        (tmp_path / label / "kernels.json").write_text(json.dumps({"results": results, "checks": checks}))

    write("default", (1.0, 4.0), 2e-7)
    write("faster", (0.5, 4.0), 3e-7)
    write("broken", (0.1, 0.1), 0.5)
    out = run_script("tuning_table.py", str(tmp_path))
    rows = {line.split("|")[3].strip(): line for line in out.splitlines()[2:]}
    assert "| default | broken | faster |" in out.splitlines()[0]
    assert "0.5 ms (2.00x)" in rows["fwd"] and "4 ms (1.00x)" in rows["fwd_bwd"]
    assert "WRONG (5.0e-01)" in rows["fwd"] and "0.1 ms" not in out


def test_kernel_ratios_only_within_one_run(tmp_path):
    """kernel_ratios.py: md_accel's time and peak against the fastest / least of the other implementations of
    the same file and cell (a faster peer in another file must not count), the op share for the double
    backward, cells without a peer or with a failed peer, and e3nn's time over md_accel's where e3nn ran."""
    def res(impl, kind, ms, peak, status="ok", op=None):
        r = {"workload": "w", "dtype": "float32", "impl": impl, "pass": kind, "status": status, "median_ms": ms,
             "peak_bytes": peak}
        if op is not None:
            r["op_ms"] = op
        return r

    run1 = [res("md_accel", "fwd", 1.0, 100), res("cueq", "fwd", 3.0, 90), res("oeq_det", "fwd", 2.0, 120),
            res("md_accel", "dbwd", 10.0, 300, op=4.0), res("md_accel_atomic", "dbwd", 9.0, 250, op=3.0),
            res("cueq", "dbwd", 12.0, 260, op=6.0), res("oeq_det", "dbwd", 1.0, 1, status="OOM"),
            res("md_accel", "fwd_bwd", 2.0, 200)]
    # oeq_atomic: fast, but its first gradients failed the check: a peer for the forward only
    run1 += [res("oeq_atomic", "fwd", 1.5, 500), res("oeq_atomic", "fwd_bwd", 0.1, 1)]
    # e3nn: 8x md_accel's forward (under #3's 10x), out of memory in the double backward
    run1 += [res("e3nn", "fwd", 8.0, 900), res("e3nn", "dbwd", 0.0, 0, status="OOM")]
    checks1 = [{"workload": "w", "dtype": "float32", "impl": "oeq_atomic", "status": "ok", "fwd": 1e-7, "bwd": 1.3,
                "dbwd": 1.0}]
    run2 = [res("md_accel", "fwd", 1.0, 100), res("cueq", "fwd", 0.5, 50)]
    # run c: md_accel's forward wrong (no ratios); a check that could not compare (no e3nn reference, or
    # cuEquivariance's basis) leaves the record in, marked unchecked
    run3 = [res("md_accel", "fwd", 1.0, 100), res("md_accel_atomic", "fwd", 1.0, 100), res("cueq", "fwd", 2.0, 90)]
    checks3 = [{"workload": "w", "dtype": "float32", "impl": "md_accel", "status": "ok", "fwd": 3e-5, "bwd": 1e-7,
                "dbwd": 1e-7},
               {"workload": "w", "dtype": "float32", "impl": "md_accel_atomic", "status": "no e3nn reference (x)"},
               {"workload": "w", "dtype": "float32", "impl": "cueq", "status": "cuEquivariance basis differs"}]
    # run a knows its graph, copy bandwidth and shapes (run b does not): byte floors for its cells
    meta = {"copy_bandwidth_gbs": 1e-3, "graph": {"num_nodes": 10, "num_edges": 100},
            "workloads": {"w": {"dims": [2, 3, 4], "weight_numel": 5}}}
    extras = {"a": {**meta, "checks": checks1}, "b": {}, "c": {"checks": checks3}}
    for name, rows in (("a", run1), ("b", run2), ("c", run3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "kernels.json").write_text(json.dumps({"results": rows, **extras[name]}))
    out = run_script("kernel_ratios.py", *(str(tmp_path / name / "kernels.json") for name in "abc"),
                     "--out", str(tmp_path / "out"))
    recs = json.loads((tmp_path / "out" / "kernel_ratios.json").read_text())
    by = {(r["source"], r["impl"], r["pass"]): r for r in recs}
    fwd_a = by[("a", "md_accel", "fwd")]
    assert fwd_a["peer"] == "oeq_atomic" and fwd_a["speedup"] == pytest.approx(1.5)
    assert fwd_a["memory_ratio"] == pytest.approx(100 / 90)
    fwd_b = by[("b", "md_accel", "fwd")]
    assert fwd_b["peer"] == "cueq" and fwd_b["speedup"] == pytest.approx(0.5)
    dbwd = by[("a", "md_accel", "dbwd")]  # the OOM peer is not a peer
    assert dbwd["peer"] == "cueq" and dbwd["speedup"] == pytest.approx(1.2) and dbwd["op_speedup"] == pytest.approx(1.5)
    atomic = by[("a", "md_accel_atomic", "dbwd")]
    assert atomic["op_speedup"] == pytest.approx(2.0) and atomic["memory_ratio"] == pytest.approx(250 / 260)
    assert not any("wrong" in r or "unchecked" in r for r in (dbwd, fwd_a, atomic))
    assert "speedup" not in by[("a", "md_accel", "fwd_bwd")] and "(no peer)" in out
    wrong, unchecked = by[("c", "md_accel", "fwd")], by[("c", "md_accel_atomic", "fwd")]
    assert wrong["wrong"] == "wrong (3.0e-05)" and "speedup" not in wrong and "1 WRONG: wrong (3.0e-05)" in out
    assert unchecked["unchecked"].startswith("unchecked: no e3nn reference")
    assert unchecked["peer"] == "cueq" and unchecked["speedup"] == pytest.approx(2.0) and "(UNCHECKED)" in out
    assert "**1.50x**" in out and "| a | md_accel | w | float32 |" in out
    # float32 forward at 1e6 bytes/s: 4 bytes x (100 edges x (3 + 5) + 10 nodes x (2 + 4)) + 8 index bytes x 100
    assert fwd_a["floor_ms"] == pytest.approx(4240 / 1e6 * 1e3) and fwd_a["over_floor"] == pytest.approx(1 / 4.24)
    assert fwd_a["peer_over_floor"] == pytest.approx(1.5 / 4.24) and "floor_ms" not in fwd_b
    # float32 double-backward pass: 4 bytes x (9 x 100 x (3 + 5) + 10 x (9 x 2 + 3 x 4)) + 3 stages x 800 index bytes
    dbwd_floor = (4 * (9 * 800 + 10 * 30) + 3 * 800) / 1e6 * 1e3
    assert dbwd["floor_ms"] == pytest.approx(dbwd_floor) and atomic["floor_ms"] == pytest.approx(dbwd_floor)
    fwd_bwd_floor = (4 * (3 * 800 + 10 * (3 * 2 + 2 * 4)) + 2 * 800) / 1e6 * 1e3  # no peer in that cell
    assert (f"| a | w | float32 | 4.24: 0.24 / - / OEq atomic 0.35 | {fwd_bwd_floor:.3g}: {2 / fwd_bwd_floor:.2f} / - | "
            f"{dbwd_floor:.3g}: {10 / dbwd_floor:.2f} / {9 / dbwd_floor:.2f} / cueq {12 / dbwd_floor:.2f} |") in out
    # the summary: md_accel's forwards with a peer are a (1.5x), b (0.5x) and c's unchecked atomic one (2.0x)
    assert fwd_a["e3nn_speedup"] == pytest.approx(8.0) and "e3nn_speedup" not in fwd_b
    assert dbwd["e3nn_status"] == "OOM" and "e3nn_speedup" not in dbwd and atomic["e3nn_status"] == "OOM"
    assert ("| md_accel | fwd | 2 | 0.50-1.50x | 1.111-2.000 | 0.24-0.24 | w float32 0.500x (b) | "
            "8.0-8.0x; under 10x: w float32 8.0x (a) |") in out
    f = f"{10 / dbwd_floor:.2f}"
    assert (f"| md_accel | dbwd | 1 | 1.20-1.20x | 1.154-1.154 | {f}-{f} | w float32 1.200x (a) | "
            "-; e3nn w float32 OOM (a) |") in out
    assert "| md_accel_atomic | dbwd | 1 | 1.33-1.33x |" in out and out.count("| md_accel_atomic | dbwd |") == 1
    lower = run_script("kernel_ratios.py", str(tmp_path / "a" / "kernels.json"), "--e3nn-target", "5")
    assert "| 8.0-8.0x |" in lower and "under 10x" not in lower  # 8x is over a 5x target


def test_profile_parts_of_kernel_names():
    """profile_step's parts: kernel names as the session-8 H100 profile printed them (md_accel's conv,
    MLP, contraction and linears; cuBLAS; torch elementwise) and a cuEquivariance fused TP."""
    sys.path.insert(0, BENCH)
    try:
        import profile_step
    finally:
        sys.path.remove(BENCH)
    cases = {
        "md_accel::gemm_3xtf32_kernel(float const*, float2 const*, float*, long, int, int, unsigned int)": "gemm",
        "md_accel::bwd_kernel_bs<float>(float const*, float const*, float const*, float const*, float*)": "tp_conv bwd",
        "md_accel::mlp_hidden_kernel<float, 16, 64, true>(md_accel::MLPHiddenProblem<float>, float const*)":
            "radial MLP",
        "void md_accel::mlp_mma::mlp_hidden_mma_kernel<3, 2, false>(md_accel::MLPHiddenProblem<float>)": "radial MLP",
        "md_accel::fwd_kernel<float>(float const*, float const*, float const*, float*, long const*)": "tp_conv fwd",
        "md_accel::gx_sum_kernel<float>(float const*, long const*, long const*, int, int, float*)": "tp_conv bwd",
        "md_accel::sc::main_kernel<md_accel::Body, float, 1, false>(md_accel::SCArgs<float>, md_accel::Body)":
            "contraction",
        "void md_accel::(anonymous namespace)::wgrad_reduce_kernel<float>(float const*, float*, long)": "gemm",
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma": "gemm",
        "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, array<char*, 3ul> >(int)": "elementwise",
        "void segmented_polynomial_uniform_1d_kernel<float>(...)": "tp_conv fwd",
    }
    for name, part in cases.items():
        assert profile_step.classify(name) == part, name
        assert part in profile_step.PARTS


def test_memory_breakdown_replays_allocator_events():
    """The blocks alive at the peak and at the end, by the first frame outside torch; a block freed
    before the peak does not count, one freed after it does."""
    sys.path.insert(0, BENCH)
    try:
        from memory_breakdown import peak_breakdown
    finally:
        sys.path.remove(BENCH)

    def frames(where):
        return [{"filename": "/x/torch/nn/functional.py", "line": 1, "name": "f"},
                {"filename": f"/repo/md_accel/{where}.py", "line": 7, "name": "g"}]

    trace = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": frames("a")},
        {"action": "alloc", "addr": 2, "size": 50, "frames": frames("b")},
        {"action": "free_requested", "addr": 1, "size": 100},
        {"action": "free_completed", "addr": 1, "size": 100},
        {"action": "alloc", "addr": 3, "size": 70, "frames": frames("a")},
        {"action": "alloc", "addr": 4, "size": 40, "frames": []},  # peak: 50 + 70 + 40 = 160
        {"action": "free_requested", "addr": 3, "size": 70},
        {"action": "free_requested", "addr": 99, "size": 5},  # allocated before the recording
        {"action": "segment_alloc", "addr": 1000, "size": 4096},
        {"action": "alloc", "addr": 5, "size": 74, "frames": []},  # 50 + 40 - 5 + 74 = 159: no new peak
    ]
    peak, at_peak, after = peak_breakdown(trace)
    assert peak == 160
    assert at_peak == [("md_accel/a.py:7 g", 70, 1), ("md_accel/b.py:7 g", 50, 1), ("(no Python frame)", 40, 1)]
    assert after == [("(no Python frame)", 114, 2), ("md_accel/b.py:7 g", 50, 1)]


def test_model_step_row_settings():
    """md_accel rows take allocator settings as options (+keep=, +lean_chunks=, ...): named in the row,
    applied around its steps only; unknown ones are refused."""
    sys.path.insert(0, BENCH)
    try:
        import model_step
    finally:
        sys.path.remove(BENCH)
    import argparse

    args = argparse.Namespace(sevenn_checkpoint="SevenNet_0", nequip_model=None, mace_model=None)
    b = model_step.make_backend("md_accel:mace+graph+keep=0+lean_chunks=2+split=3+save=64", args)
    assert b.name == "md_accel:mace+graph+keep=0+lean_chunks=2+split=3+save=64" and b.graph
    assert b.env == {"MD_ACCEL_KEEP_WEIGHTS_MIB": "0", "MD_ACCEL_LEAN_CHUNKS": "2", "MD_ACCEL_BWD_SPLIT": "3"}
    assert b.save_mib == 64
    assert b.pairs and not model_step.make_backend("md_accel:mace+whole", args).pairs  # whole = per edge
    with pytest.raises(ValueError, match="known"):
        model_step.make_backend("md_accel:mace+graph+budget=3", args)
    with pytest.raises(ValueError, match="known"):
        model_step.make_backend("md_accel:mace+keep=0+keep=1", args)
    with pytest.raises(ValueError, match="expected a count"):
        model_step.make_backend("md_accel:mace+lean_chunks=2.5", args)
    with pytest.raises(ValueError, match="expected a count"):
        model_step.make_backend("md_accel:mace+split=-1", args)
    with pytest.raises(ValueError, match="expected a number of MiB"):
        model_step.make_backend("md_accel:mace+keep=abc", args)
    b = model_step.make_backend("md_accel:mace+graph+tf32x3+cublas=0+unbiased=1", args)
    assert b.tf32x3 and b.env == {"MD_ACCEL_GEMM_CUBLAS": "0", "MD_ACCEL_GEMM_UNBIASED": "1"}
    with pytest.raises(ValueError, match="expected 0 or 1"):
        model_step.make_backend("md_accel:mace+unbiased=2", args)
    b = model_step.make_backend("md_accel:mace+graph+rows=1", args)  # set around the steps, not in the environment
    assert b.rows is True and b.env == {} and model_step.make_backend("md_accel:mace+rows=0", args).rows is False
    assert model_step.make_backend("md_accel:mace", args).rows is None
    with pytest.raises(ValueError, match="expected 0 or 1"):
        model_step.make_backend("md_accel:mace+rows=2", args)


def test_precision_f32_on_the_cpu(tmp_path):
    """precision_f32.py on the shipped MACE model, float32 on the CPU against float64: the energy
    within the conversion contract's float32 tolerance (md_accel's CPU path: 4e-6 measured) and the
    error of every node-wise module output listed."""
    out = run_script("precision_f32.py", os.path.join("models", "mace_cu", "mace_cu.mdx"), "--settings", "cpu",
                     "--cell", "2", "--json", str(tmp_path / "p.json"))
    (row,) = json.load(open(tmp_path / "p.json"))
    assert row["setting"] == "cpu" and row["atoms"] == 32
    assert 0 < row["energy_rel"] <= 1e-5
    assert row["force_err_max"] <= 1e-4 * max(1.0, row["force_max"])
    assert {"layers.0.conv", "layers.1.product", "readouts.0"} <= set(row["modules"])
    assert all(0 < v < 1e-5 for v in row["modules"].values())
    assert "layers.0.conv" in out


def test_tuning_sweep_runs_each_variant_in_turn(tmp_path):
    """tools/tuning_sweep.sh: kernels.py once per variant in the order given ("default" = no MD_ACCEL_TP_TUNING;
    a variant named twice runs twice), each run's log and kernels.json under $R, one summary line per run; with a
    clock log in $R/smi.csv, each run's records joined with it (smi_join.py) into <tag>_smi.txt and printed. (On the
    CPU the variants time the same reference ops: the tuning names generated CUDA kernels.)"""
    r = tmp_path / "r"
    r.mkdir()
    (r / "smi.csv").write_text("timestamp, clocks.sm [MHz], power.draw [W]\n2020/01/01 00:00:00.000, 1980 MHz, 90 W\n")
    env = {**os.environ, "R": str(r), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(["bash", "tools/tuning_sweep.sh", "300", "default fwd_cpl=2 default", "--passes", "fwd",
                           "--repeats", "1", "--workloads", "mace_first", "--graph", "random:40:160",
                           "--dtypes", "float64"], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    heads = [line.split(" (")[0] for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert heads == ["== default", "== fwd_cpl=2", "== default"] and proc.stdout.count("(rc=0, ") == 3
    assert proc.stdout.count("mace_first float64: fwd ") == 3
    logs = sorted(p.name.split(".")[0] for p in r.glob("*.log"))
    assert logs == ["default", "default", "fwd_cpl2"]
    assert all((r / p.name.removesuffix(".log") / "kernels.json").exists() for p in r.glob("*.log"))
    joined = sorted(r.glob("*_smi.txt"))
    assert sorted(p.name.split(".")[0] for p in joined) == logs
    for p in joined:  # the sample of 2020 is in no run's window
        lines = p.read_text().splitlines()
        assert len(lines) == 1 and lines[0].split()[:4] == ["mace_first", "float64", "md_accel", "fwd"]
        assert "no samples" in lines[0] and lines[0] in proc.stdout


def test_tuning_sweep_of_the_md_step(tmp_path):
    """SWEEP_SCRIPT=model_step: model_step.py once per variant in turn (the shipped copper MACE, 32 atoms, on the
    CPU: the variants time the same reference ops), its results folder and one table row per run."""
    r = tmp_path / "r"
    r.mkdir()
    env = {**os.environ, "R": str(r), "SWEEP_SCRIPT": "model_step",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(["bash", "tools/tuning_sweep.sh", "300", "default w_evict=0", "--backends",
                           "md_accel:models/mace_cu/mace_cu.mdx", "--sizes", "32", "--repeats", "1", "--warmup", "1",
                           "--device", "cpu"], capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    heads = [line.split(" (")[0] for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert heads == ["== default", "== w_evict=0"] and proc.stdout.count("(rc=0, ") == 2
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| md_accel:mace_cu.mdx | ")]
    assert len(rows) == 2 and all(float(row.split("|")[2]) > 0 for row in rows)
    assert sorted(p.name.split(".")[0] for p in r.glob("*.log")) == ["default", "w_evict0"]
    assert all(any((r / p.name.removesuffix(".log")).glob("*.json")) for p in r.glob("*.log"))


def test_lean_threshold_keeps_lean_the_cells_near_the_peer(tmp_path):
    """lean_threshold.py: the smallest threshold is the largest layer of the cells whose kept peak is not
    --margin under the leanest peer's, counted in the CUDA graph's edge slots (1,000 edges -> 1,216 slots on the
    32-aligned 1.25 ladder: 32, 64, 96, 128, 160, 224, 288, 384, 480, 608, 768, 960, 1216) or in edges above
    300,000; the cells with larger layers keep those layers' rows."""
    def rec(backend, atoms, edges, ms, gib, **extra):
        return {"backend": backend, "model": "m", "atoms": atoms, "edges": edges, "median_ms": ms,
                "peak_bytes": int(gib * 2**30), "status": "ok", **extra}

    widths = {"weight_widths": [100, 300]}
    results = [  # 1,000 edges: kept 0.95 of the leaner peer -> must stay lean; 400,000 edges: kept 0.5
        rec("md_accel:m.mdx+graph", 10, 1000, 2.0, 0.5, **widths),
        rec("md_accel:m.mdx+graph+lean=0", 10, 1000, 1.5, 0.95, **widths),
        rec("peer:a", 10, 1000, 9.0, 1.0), rec("peer:b", 10, 1000, 8.0, 2.0),
        rec("md_accel:m.mdx+graph", 99, 400_000, 5.0, 1.0, **widths),
        rec("md_accel:m.mdx+graph+lean=0", 99, 400_000, 4.0, 2.0, **widths), rec("peer:a", 99, 400_000, 9.0, 4.0)]
    path = tmp_path / "model_step.json"
    path.write_text(json.dumps({"args": {"dtype": "float64"}, "results": results}))
    out = run_script("lean_threshold.py", str(path), "--out", str(tmp_path / "out"))
    t = json.loads((tmp_path / "out" / "lean_threshold.json").read_text())
    assert t["threshold_bytes"] == 1216 * 300 * 8
    cells = {c["atoms"]: c for c in t["cells"]}
    assert cells[10]["slots"] == 1216 and cells[99]["layer_bytes"] == [400_000 * 100 * 8, 400_000 * 300 * 8]
    assert cells[10]["peer"] == "peer:a"  # the leanest peer, not the fastest
    assert "0.95 must stay lean" in out and "| 2 of 2 |" in out and "| 0 of 2 |" in out
    path.write_text(json.dumps({"args": {"dtype": "float64"}, "results": results[4:]}))
    assert "none needed" in run_script("lean_threshold.py", str(path))


def test_ncu_sass_summary_counts(tmp_path):
    """ncu_sass_summary on a hand-made source page (a preamble line, three instructions, one of them predicated):
    stall shares by reason over all instructions, the instructions ordered by samples with their leading reasons,
    the opcode mix without predicates (executed counts), the spill share; gzipped input read the same."""
    import gzip

    header = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_long_sb",
              "stall_wait", "stall_long_sb (Not Issued)"]
    rows = [["0x0", "FFMA R1, R2, R3, RZ", "60", "100", "45", "15", "40"],
            ["0x10", "@!P2 FFMA R4, R4, R5, R4", "30", "50", "0", "30", "0"],
            ["0x20", "STL.64 [R1+0x4], R6", "10", "50", "10", "0", "10"]]
    text = '"==PROF== preamble"\n' + "\n".join(",".join(f'"{c}"' for c in r) for r in [header] + rows) + "\n"
    plain = tmp_path / "k_sass.csv"
    plain.write_text(text)
    with gzip.open(tmp_path / "k_sass.csv.gz", "wt") as f:
        f.write(text)
    out = run_script("ncu_sass_summary.py", str(plain), "--top", "2")
    # long_sb 55 of 100 stall samples, wait 45 (the "Not Issued" column is not a reason of its own)
    assert "stall samples by reason: long_sb 55.0%, wait 45.0%" in out
    lines = out.splitlines()
    first = lines.index("instructions with the most samples (of 100):")
    assert "60.0%" in lines[first + 1] and "FFMA R1" in lines[first + 1] and "long_sb 75%, wait 25%" in lines[first + 1]
    assert "30.0%" in lines[first + 2] and "@!P2 FFMA" in lines[first + 2] and "STL" not in out.split("executed")[0]
    # FFMA executed 150 of 200 (the predicated one counted as FFMA), STL.64 50
    assert "executed warp instructions 200: FFMA 75.0%, STL.64 25.0%" in out
    assert "local-memory instructions: 50 (25.00%)" in out
    assert run_script("ncu_sass_summary.py", str(tmp_path / "k_sass.csv.gz"), "--top", "2") == out
