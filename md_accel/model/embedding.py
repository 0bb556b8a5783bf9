"""Per-species node quantities: the initial node features and the energy scale/shift."""

import torch


class SpeciesEmbedding(torch.nn.Module):
    """Initial features ``Linear(one_hot(species))`` with e3nn's normalisation, written as a row
    lookup: ``weight[species] * num_species**-0.5`` (weight ``[num_species, dim]`` is the e3nn
    ``Linear("Nx0e", irreps)`` weight reshaped; bit-identical to the one-hot product)."""

    def __init__(self, num_species: int, dim: int):
        super().__init__()
        self.num_species = int(num_species)
        self.dim = int(dim)
        self.path_weight = float(num_species) ** -0.5
        self.weight = torch.nn.Parameter(torch.randn(num_species, dim))

    def forward(self, species: torch.Tensor) -> torch.Tensor:
        return self.weight.index_select(0, species) * self.path_weight


class ScaleShift(torch.nn.Module):
    """``e * scale[species] + shift[species]`` (per-species energy rescaling)."""

    def __init__(self, num_species: int):
        super().__init__()
        self.register_buffer("scale", torch.ones(num_species))
        self.register_buffer("shift", torch.zeros(num_species))

    def forward(self, energy: torch.Tensor, species: torch.Tensor) -> torch.Tensor:
        return energy * self.scale.index_select(0, species) + self.shift.index_select(0, species)
