"""The md_accel model file (``.mdx``): a TorchScript archive plus ``md_accel.json``.

Python rebuilds the module from the spec and loads the archive's weights; C++ (LAMMPS) calls
``torch::jit::load`` on the same file. See ``docs/file_format.md``.
"""
from __future__ import annotations

import contextlib
import copy
import datetime
import hashlib
import io as _io
import json
import os
import tempfile
import warnings
import zipfile
from typing import Dict, Optional, Union

import torch

import md_accel
from md_accel.model import Potential, build
from md_accel.model.linear import Linear
from md_accel.ops.prebuild import prebuild_for

FORMAT = "md_accel"
FORMAT_VERSION = 3
METADATA_NAME = "md_accel.json"

PathLike = Union[str, os.PathLike]


class ModelFileError(ValueError):
    """The file is not a readable md_accel model file."""


def weights_sha256(state_dict: Dict[str, torch.Tensor]) -> str:
    """sha256 over the state dict: for each key in sorted order, the key, dtype, shape and the
    raw little-endian bytes of the tensor (C-contiguous)."""
    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key].detach().to("cpu").contiguous()
        h.update(key.encode())
        h.update(str(t.dtype).removeprefix("torch.").encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@contextlib.contextmanager
def _quiet_jit():
    """TorchScript is deprecated in recent torch but is what libtorch (LAMMPS) loads."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning)
        yield


def _dtype_name(potential: torch.nn.Module) -> str:
    for t in list(potential.parameters()) + list(potential.buffers()):
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return str(torch.get_default_dtype()).removeprefix("torch.")


def _new_file_mode() -> int:
    """0o666 less the process umask, read from /proc where it is (os.umask can only read it by
    setting it, process-wide)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def save(potential: Potential, path: PathLike, provenance: Optional[Dict] = None) -> Dict:
    """Script ``potential`` and write it with its metadata to ``path`` atomically (a temporary
    file in the same directory, renamed at the end; nothing is left behind on failure).
    ``provenance``: ``source``, ``library``, ``library_version``, ``verification`` (anything
    JSON-able); ``date`` is filled in. Returns the metadata written."""
    path = os.fspath(path)
    module = copy.deepcopy(potential).to("cpu")  # leave the caller's module where it is
    for m in module.modules():  # the file's linears are plain float32 whatever this process set
        if isinstance(m, Linear):
            m.tensor_cores = False
            m.per_block = False
    state = module.state_dict()
    prov = {"source": None, "library": None, "library_version": None, "verification": None}
    prov.update(provenance or {})
    if not prov.get("date"):
        prov["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "md_accel_version": md_accel.__version__,
        "spec": module.spec(),
        "elements": list(module.elements),
        "cutoff": float(module.cutoff),
        "num_layers": int(module.num_layers),
        "dtype": _dtype_name(module),
        "provenance": prov,
        "sha256": weights_sha256(state),
    }
    text = json.dumps(meta, indent=2, sort_keys=True)  # fails early on non-JSON-able provenance
    buf = _io.BytesIO()
    with _quiet_jit():
        torch.jit.save(torch.jit.script(module), buf, _extra_files={METADATA_NAME: text})

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".mdx", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            try:  # as open() would create it (mkstemp's file is private to the owner)
                os.fchmod(f.fileno(), _new_file_mode())
            except OSError:  # file systems that refuse chmod keep mkstemp's mode
                pass
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return meta


def info(path: PathLike) -> Dict:
    """The metadata of a model file, read from the zip directly (nothing is unpickled)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file {path!r} does not exist")
    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.endswith("/extra/" + METADATA_NAME) and n.count("/") == 2]
            if not names:
                raise ModelFileError(
                    f"{path!r} is a zip archive but not an md_accel model file (no {METADATA_NAME}); "
                    "convert a checkpoint with `md-accel convert SOURCE -o model.mdx`"
                )
            raw = z.read(names[0])
    except zipfile.BadZipFile as e:
        raise ModelFileError(f"{path!r} is not an md_accel model file (not a valid zip archive: {e})") from e
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFileError(f"{path!r}: corrupt {METADATA_NAME}: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelFileError(f"{path!r}: {METADATA_NAME} does not describe an md_accel model")
    version = meta.get("format_version")
    if not isinstance(version, int):
        raise ModelFileError(f"{path!r}: missing or invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise ModelFileError(
            f"{path!r} has model file format version {version}, written by md_accel "
            f"{meta.get('md_accel_version', '?')}; this md_accel ({md_accel.__version__}) reads format "
            f"version {FORMAT_VERSION} and older. Upgrade md_accel."
        )
    return meta


def as_dtype(dtype: Union[str, torch.dtype]) -> torch.dtype:
    """A floating torch dtype from itself or its name ("float32", "torch.float64")."""
    if isinstance(dtype, torch.dtype):
        return dtype
    d = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(d, torch.dtype) or not d.is_floating_point:
        raise ValueError(f"not a floating point dtype: {dtype!r}")
    return d


def load(
    path: PathLike, device: Optional[Union[str, torch.device]] = None, dtype: Optional[Union[str, torch.dtype]] = None
) -> Potential:
    """Rebuild the Python potential stored in ``path`` (checks format, version and the weights'
    sha256). ``dtype`` converts the weights (default: the file's dtype)."""
    path = os.fspath(path)
    meta = info(path)
    try:
        potential = build(meta["spec"])
    except ValueError as e:
        raise ModelFileError(
            f"{path!r} holds a model this md_accel ({md_accel.__version__}) cannot build "
            f"(written by md_accel {meta.get('md_accel_version', '?')}): {e}"
        ) from e
    try:
        with _quiet_jit():
            archive = torch.jit.load(path, map_location="cpu")
    except RuntimeError as e:
        raise ModelFileError(f"{path!r}: the TorchScript archive cannot be read ({e})") from e
    # TorchScript's state_dict also lists non-persistent buffers (recomputed by build): drop them
    keys = set(potential.state_dict())
    state = {k: v for k, v in archive.state_dict().items() if k in keys}
    if weights_sha256(state) != meta.get("sha256"):
        raise ModelFileError(f"{path!r}: weights do not match the recorded sha256; the file is corrupt")
    potential.load_state_dict(state, strict=True, assign=True)  # each tensor keeps its stored dtype
    if dtype is not None:
        potential = potential.to(as_dtype(dtype))
    if device is not None:
        prebuild_for([potential], device)
        potential = potential.to(device)
    return potential.eval()


__all__ = ["save", "load", "info", "weights_sha256", "as_dtype", "ModelFileError", "FORMAT_VERSION"]
