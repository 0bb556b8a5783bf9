"""The paths of md_accel::mlp_hidden_* that the emulated (tests/test_mlp_hidden_emulated.py) and the
GPU (tests/gpu/test_mlp_hidden_cuda.py) tests run: float32 and float64 radial-MLP shapes take the
tensor-core kernels (csrc/mlp_hidden_mma.cuh) unless switched off."""
import torch

# path: (dtype, switches)
PATHS = {"f64": (torch.float64, {}), "f64_cuda_cores": (torch.float64, {"MD_ACCEL_MLP_MMA64": "0"}),
         "f32": (torch.float32, {}), "f32_cuda_cores": (torch.float32, {"MD_ACCEL_MLP_MMA": "0"})}
TENSOR_CORES = ("f32", "f64")


def use_path(path, monkeypatch):
    """Set the switches of ``path`` (and clear the others); its dtype."""
    dtype, switches = PATHS[path]
    for name in ("MD_ACCEL_MLP_MMA", "MD_ACCEL_MLP_MMA64"):
        monkeypatch.delenv(name, raising=False)
    for name, value in switches.items():
        monkeypatch.setenv(name, value)
    return dtype
