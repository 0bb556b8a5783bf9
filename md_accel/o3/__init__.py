"""O(3) building blocks: irreps, real spherical harmonics, Clebsch-Gordan coefficients."""
from .irreps import Irrep, Irreps, MulIrrep
from .spherical_harmonics import SphericalHarmonics, spherical_harmonics

__all__ = ["Irrep", "Irreps", "MulIrrep", "SphericalHarmonics", "spherical_harmonics"]
