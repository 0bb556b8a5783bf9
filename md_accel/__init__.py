"""md_accel: fast molecular dynamics with equivariant ML potentials (MACE, SevenNet, NequIP).

``md_accel.Calculator`` (ASE), ``md_accel.load`` / ``save`` / ``info`` (model files) and
``md_accel.convert`` (checkpoints -> md_accel models) are imported lazily, so ``import md_accel``
stays cheap and needs neither ASE nor any source library.
"""
__version__ = "0.1.0"

_LAZY = {
    "Calculator": ("md_accel.calculator", "Calculator"),
    "load": ("md_accel.io", "load"),
    "save": ("md_accel.io", "save"),
    "info": ("md_accel.io", "info"),
    "convert": ("md_accel.convert", None),  # a callable package: md_accel.convert(source, output)
    "lammps_plugin_path": ("md_accel.lammps", "plugin_path"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'md_accel' has no attribute {name!r}")


__all__ = ["__version__", *_LAZY]
