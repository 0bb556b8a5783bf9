// a @ b for a 3-D a [G, K, d] per group and component (out[g, :, m] = a[g, :, m] @ b): one GEMM over
// the (g, m) rows of a transposed copy. at::matmul(a.transpose(1, 2), b) would broadcast b into a
// batched GEMM per group (6x slower for MACE's float64 linears, session 16). The reference of
// md_accel::gemm_3xtf32's grouped layout and the off-tensor-core path of md_accel::linear_tf32x3.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>

namespace md_accel {

inline at::Tensor grouped_mm(const at::Tensor& a, const at::Tensor& b) {
  return at::mm(a.transpose(1, 2).reshape({a.size(0) * a.size(2), a.size(1)}), b)
      .view({a.size(0), a.size(2), b.size(1)})
      .transpose(1, 2)
      .contiguous();
}

}  // namespace md_accel
