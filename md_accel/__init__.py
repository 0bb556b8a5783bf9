"""md_accel: fast molecular dynamics with equivariant ML potentials (MACE, SevenNet, NequIP)."""
__version__ = "0.1.0"
