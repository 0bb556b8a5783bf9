// Stand-in for the CUDA runtime header when generated kernels are compiled for the host.
#pragma once
#include "cuda_emu.h"
