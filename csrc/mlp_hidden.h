// Plain C++ interface between the torch glue (mlp_hidden_cuda.cpp, g++) and the fused kernels of
// md_accel::mlp_hidden_* (mlp_hidden_kernels.cu, nvcc). No torch headers here.
//
// The op is the hidden part of a bias-free MLP: h_0 = x, h_{l+1} = silu(h_l @ w[l]) * cst
// (see md_accel/ops/mlp_reference.py, the specification).
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

namespace md_accel {

constexpr int kMLPMaxLayers = 8;

// x [num_edges, width[0]] and w[l] [width[l], width[l+1]], row-major and contiguous.
template <typename T>
struct MLPHiddenProblem {
  const T* x;
  int64_t num_edges;
  int num_layers;  // 1 .. kMLPMaxLayers
  int width[kMLPMaxLayers + 1];
  const T* w[kMLPMaxLayers];
  T cst;
};

// Whether a fused kernel serves these widths on the current device (else the caller composes
// ATen ops): width[0] <= 16, hidden widths <= 64, and the layers'
// weights fit in shared memory.
template <typename T>
bool mlp_hidden_has_kernel(const MLPHiddenProblem<T>& p, bool backward);

// h [num_edges, width[L]], fully written. nullptr on success, else a static error message.
template <typename T>
const char* mlp_hidden_fwd_launch(const MLPHiddenProblem<T>& p, T* h, cudaStream_t stream);

// grad_x [num_edges, width[0]] = gradient of <grad_h, h> with respect to x; grad_h [num_edges, width[L]].
template <typename T>
const char* mlp_hidden_bwd_launch(const MLPHiddenProblem<T>& p, const T* grad_h, T* grad_x, cudaStream_t stream);

}  // namespace md_accel
