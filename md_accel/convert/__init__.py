"""Converters from source checkpoints (SevenNet, MACE, NequIP) to md_accel potentials, and the
check that a converted potential reproduces its source."""
from .verify import ConversionMismatch, compare_to_reference

__all__ = ["ConversionMismatch", "compare_to_reference"]
