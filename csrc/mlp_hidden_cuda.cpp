// CUDA implementations of md_accel::mlp_hidden_{fwd,bwd}: argument checks, then the fused
// kernels (mlp_hidden_kernels.cu) for float32/float64 and the widths they serve, else the ATen
// composition (mlp_hidden_aten.h: cuBLAS GEMMs and elementwise kernels), so every shape works.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <type_traits>
#include <vector>

#include "mlp_hidden.h"
#include "mlp_hidden_aten.h"

namespace md_accel {
namespace {

using at::Tensor;
using at::TensorList;

// Checks x and the weight chain; returns contiguous weights.
std::vector<Tensor> checked_weights(const Tensor& x, TensorList weights) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 2, "md_accel mlp_hidden (CUDA): x must be a 2-D CUDA tensor");
  TORCH_CHECK(!weights.empty(), "md_accel mlp_hidden: at least one weight matrix");
  std::vector<Tensor> ws;
  int64_t width = x.size(1);
  for (const Tensor& w : weights) {
    TORCH_CHECK(w.dim() == 2 && w.size(0) == width, "md_accel mlp_hidden: weight ", ws.size(), " must be [", width,
                ", H], got ", w.sizes());
    TORCH_CHECK(w.device() == x.device() && w.scalar_type() == x.scalar_type(), "md_accel mlp_hidden: weights must be ",
                x.scalar_type(), " on ", x.device());
    ws.push_back(w.contiguous());
    width = w.size(1);
  }
  return ws;
}

template <typename T>
MLPHiddenProblem<T> problem(const Tensor& x, const std::vector<Tensor>& ws, double cst) {
  MLPHiddenProblem<T> p{};
  p.x = x.data_ptr<T>();
  p.num_edges = x.size(0);
  p.num_layers = int(ws.size());
  p.width[0] = int(x.size(1));
  for (size_t l = 0; l < ws.size(); ++l) {
    p.w[l] = ws[l].data_ptr<T>();
    p.width[l + 1] = int(ws[l].size(1));
  }
  p.cst = T(cst);
  return p;
}

// Runs launch(problem<T>, stream) when a fused kernel serves the call (else the caller composes ATen ops).
template <typename Launch>
void fused(const Tensor& x, const std::vector<Tensor>& ws, double cst, bool backward, Launch&& launch) {
  const auto run = [&](auto p) {
    if (!mlp_hidden_has_kernel(p, backward)) return;
    const char* err = launch(p, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
    TORCH_CHECK(err == nullptr, "md_accel mlp_hidden: ", err);
  };
  if (ws.size() > size_t(kMLPMaxLayers)) return;
  if (x.scalar_type() == at::kFloat) run(problem<float>(x, ws, cst));
  if (x.scalar_type() == at::kDouble) run(problem<double>(x, ws, cst));
}

template <typename P>
using Elem = std::remove_const_t<std::remove_pointer_t<decltype(P::x)>>;

Tensor mlp_hidden_fwd_cuda(const Tensor& x_, TensorList weights, double cst) {
  c10::cuda::CUDAGuard guard(x_.device());
  const std::vector<Tensor> ws = checked_weights(x_, weights);
  const Tensor x = x_.contiguous();
  Tensor h;
  fused(x, ws, cst, false, [&](const auto& p, cudaStream_t stream) {
    h = at::empty({x.size(0), ws.back().size(1)}, x.options());
    using T = Elem<std::decay_t<decltype(p)>>;
    return mlp_hidden_fwd_launch(p, h.data_ptr<T>(), stream);
  });
  return h.defined() ? h : mlp_hidden_fwd_aten(x, ws, cst);
}

Tensor mlp_hidden_bwd_cuda(const Tensor& x_, const Tensor& grad_h_, TensorList weights, double cst) {
  c10::cuda::CUDAGuard guard(x_.device());
  const std::vector<Tensor> ws = checked_weights(x_, weights);
  TORCH_CHECK(grad_h_.dim() == 2 && grad_h_.size(0) == x_.size(0) && grad_h_.size(1) == ws.back().size(1),
              "md_accel mlp_hidden: grad_h must be [", x_.size(0), ", ", ws.back().size(1), "]");
  TORCH_CHECK(grad_h_.device() == x_.device() && grad_h_.scalar_type() == x_.scalar_type(),
              "md_accel mlp_hidden: grad_h must be ", x_.scalar_type(), " on ", x_.device());
  const Tensor x = x_.contiguous(), grad_h = grad_h_.contiguous();
  Tensor grad_x;
  fused(x, ws, cst, true, [&](const auto& p, cudaStream_t stream) {
    using T = Elem<std::decay_t<decltype(p)>>;
    grad_x = at::empty(x.sizes(), x.options());
    return mlp_hidden_bwd_launch(p, grad_h.data_ptr<T>(), grad_x.data_ptr<T>(), stream);
  });
  return grad_x.defined() ? grad_x : mlp_hidden_bwd_aten(x, grad_h, ws, cst);
}

}  // namespace
}  // namespace md_accel

TORCH_LIBRARY_IMPL(md_accel, CUDA, m) {
  m.impl("mlp_hidden_fwd", md_accel::mlp_hidden_fwd_cuda);
  m.impl("mlp_hidden_bwd", md_accel::mlp_hidden_bwd_cuda);
}
