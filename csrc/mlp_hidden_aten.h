// The md_accel::mlp_hidden_* ops composed of ATen operators (md_accel/ops/mlp_reference.py in
// C++): differentiable, any device and floating dtype. The C++ autograd differentiates through
// them (mlp_hidden_ops.cpp); the CUDA implementation runs them for shapes without a fused kernel.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>

#include <vector>

namespace md_accel {

inline at::Tensor mlp_hidden_fwd_aten(const at::Tensor& x, at::TensorList weights, double cst) {
  at::Tensor h = x;
  for (const at::Tensor& w : weights) h = at::silu(at::mm(h, w)).mul(cst);
  return h;
}

// silu'(z) = s (1 + z (1 - s)), s = sigmoid(z), written out so the result is differentiable again.
inline at::Tensor mlp_hidden_bwd_aten(const at::Tensor& x, const at::Tensor& grad_h, at::TensorList weights,
                                      double cst) {
  std::vector<at::Tensor> z;
  at::Tensor h = x;
  for (const at::Tensor& w : weights) {
    z.push_back(at::mm(h, w));
    h = at::silu(z.back()).mul(cst);
  }
  at::Tensor g = grad_h;
  for (size_t l = weights.size(); l-- > 0;) {
    const at::Tensor s = at::sigmoid(z[l]);
    g = at::mm(g.mul(s.mul(z[l].mul(s.neg().add(1)).add(1))).mul(cst), weights[l].t());
  }
  return g;
}

}  // namespace md_accel
