"""The .mdx model file: round trip, metadata without unpickling, refusals of bad files."""
import json
import os
import zipfile

import pytest
import torch

from md_accel import io as mio


def _rewrite_metadata(src, dst, edit):
    """Copy the archive, passing md_accel.json through ``edit(dict) -> dict``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename.endswith("/extra/md_accel.json"):
                data = json.dumps(edit(json.loads(data))).encode()
            zout.writestr(item, data)


def _graph(n=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=gen, dtype=torch.float64) * 4.0
    src, dst = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    keep = src != dst
    src, dst = src[keep], dst[keep]
    return torch.zeros(n, dtype=torch.int64), pos[src] - pos[dst], src, dst


def test_round_trip(lj_potential, lj_file):
    meta = mio.info(lj_file)
    assert meta["format"] == "md_accel" and meta["format_version"] == mio.FORMAT_VERSION
    assert meta["elements"] == ["Cu"] and meta["cutoff"] == 5.0 and meta["num_layers"] == 1
    assert meta["dtype"] == "float64" and meta["spec"] == lj_potential.spec()
    assert meta["provenance"]["source"] == "tests/lj_potential.py" and meta["provenance"]["date"]
    assert meta["sha256"] == mio.weights_sha256(lj_potential.state_dict())

    loaded = mio.load(lj_file)
    assert type(loaded) is type(lj_potential)
    for key, value in lj_potential.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    graph = _graph()
    expected = lj_potential.node_energies(*graph)
    assert torch.equal(loaded.node_energies(*graph), expected)
    # what the LAMMPS plugin does: the TorchScript archive's exported node_energies
    scripted = torch.jit.load(str(lj_file))
    assert torch.equal(scripted.node_energies(*graph), expected)
    assert list(scripted.elements) == ["Cu"] and scripted.cutoff == 5.0


def test_load_converts_dtype(lj_file):
    loaded = mio.load(lj_file, dtype="float32")
    assert loaded.epsilon.dtype == torch.float32


def test_info_does_not_load_the_archive(lj_file, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("info must read the zip directly")

    monkeypatch.setattr(torch.jit, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert mio.info(lj_file)["elements"] == ["Cu"]


def test_newer_format_version_is_refused(lj_file, tmp_path):
    newer = tmp_path / "newer.mdx"
    _rewrite_metadata(lj_file, newer, lambda m: {**m, "format_version": mio.FORMAT_VERSION + 1})
    with pytest.raises(mio.ModelFileError, match=f"format version {mio.FORMAT_VERSION + 1}.*reads format version "
                                                 f"{mio.FORMAT_VERSION} and older"):
        mio.load(newer)


def test_unknown_model_type_is_refused(lj_file, tmp_path):
    other = tmp_path / "other.mdx"
    _rewrite_metadata(lj_file, other, lambda m: {**m, "spec": {**m["spec"], "type": "from_the_future"}})
    with pytest.raises(mio.ModelFileError, match="from_the_future"):
        mio.load(other)


def test_not_a_model_file(tmp_path, lj_potential):
    text = tmp_path / "notes.mdx"
    text.write_text("hello")
    with pytest.raises(mio.ModelFileError, match="not a valid zip"):
        mio.info(text)
    plain = tmp_path / "plain.pt"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(plain))
    with pytest.raises(mio.ModelFileError, match="no md_accel.json"):
        mio.load(plain)
    with pytest.raises(FileNotFoundError):
        mio.load(tmp_path / "missing.mdx")


def test_corrupt_files_are_refused(lj_file, tmp_path):
    data = lj_file.read_bytes()
    truncated = tmp_path / "truncated.mdx"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(mio.ModelFileError):
        mio.load(truncated)

    # change the stored weights: the zip's CRC or the recorded sha256 must catch it
    with zipfile.ZipFile(lj_file) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data/0"))
    local = info.header_offset  # local header: name and extra lengths at bytes 26..29
    offset = local + 30 + int.from_bytes(data[local + 26:local + 28], "little") + int.from_bytes(
        data[local + 28:local + 30], "little")
    flipped = bytearray(data)
    flipped[offset] ^= 0x40
    bad = tmp_path / "flipped.mdx"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(mio.ModelFileError):
        mio.load(bad)

    tampered = tmp_path / "tampered.mdx"
    _rewrite_metadata(lj_file, tampered, lambda m: {**m, "sha256": "0" * 64})
    with pytest.raises(mio.ModelFileError, match="sha256"):
        mio.load(tampered)


def test_save_is_atomic(lj_potential, tmp_path, monkeypatch):
    target = tmp_path / "model.mdx"
    target.write_bytes(b"previous")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        mio.save(lj_potential, target)
    assert target.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["model.mdx"]

    monkeypatch.undo()
    with pytest.raises(TypeError):  # provenance must be JSON-able; nothing is written
        mio.save(lj_potential, tmp_path / "new.mdx", {"verification": object()})
    assert os.listdir(tmp_path) == ["model.mdx"]


def test_saved_file_permissions_follow_the_umask(lj_potential, tmp_path):
    """A model file is created like any file the user writes (not owner-only, as a temporary file
    would be): readable by whoever the umask allows, e.g. a cluster group sharing models."""
    previous = os.umask(0o022)
    try:
        mio.save(lj_potential, tmp_path / "model.mdx")
    finally:
        os.umask(previous)
    assert (tmp_path / "model.mdx").stat().st_mode & 0o777 == 0o644


def test_saved_linears_are_plain_float32(lj_potential, tmp_path, monkeypatch):
    """MD_ACCEL_LINEAR_TF32X3=1 applies to modules built in the process; a model file (what LAMMPS
    runs) stores the plain torch.mm form whatever the process set."""
    from md_accel.model.linear import Linear

    monkeypatch.setenv("MD_ACCEL_LINEAR_TF32X3", "1")
    lin = Linear("4x0e+2x1o", "3x0e+2x1o")
    assert lin.tensor_cores
    archive = torch.jit.script(lin)
    assert archive.tensor_cores
    import copy

    module = copy.deepcopy(lj_potential)
    module.extra = Linear("4x0e", "4x0e")  # a Linear built with the switch on, inside a potential
    mio.save(module, tmp_path / "model.mdx")
    loaded = torch.jit.load(str(tmp_path / "model.mdx"))
    assert loaded.extra.tensor_cores is False
