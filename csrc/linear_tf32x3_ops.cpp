// md_accel::linear_tf32x3(a, b) = a @ b, differentiable, for the radial MLP's last layer and the
// equivariant linears. a [M, K], or [G, K, d] with out[g, :, m] = a[g, :, m] @ b (an l > 0 block of
// a linear, nodes x channels x components, in its own layout).
//
// On CUDA in float32 it runs md_accel::gemm_3xtf32 (tensor cores, 3xTF32 split: float32
// accuracy); elsewhere (CPU, float64, or a library built without CUDA) it is at::mm. The op is
// closed under differentiation, so force training and Hessians work through it:
//   d/da <g, a b> = g b^T = linear_tf32x3(g, b^T)        d/db <g, a b> = a^T g (at::mm; a tensordot over
//   groups and components for a 3-D a)
// MD_ACCEL_TF32X3=0 in the environment turns the tensor-core path off (plain float32 mm), for
// comparisons. The schema lives in this CPU source so TorchScript models that call the op load in every build
// of the library (LAMMPS' CPU build included).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>

#include "grouped_mm.h"

namespace md_accel {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using GemmSig = Tensor(const Tensor&, const Tensor&, bool);

// The tensor-core GEMM, when this library was built with it (CUDA builds).
const c10::optional<c10::TypedOperatorHandle<GemmSig>>& gemm_op() {
  static const auto h = []() -> c10::optional<c10::TypedOperatorHandle<GemmSig>> {
    auto op = c10::Dispatcher::singleton().findOp({"md_accel::gemm_3xtf32", ""});
    if (!op.has_value()) return c10::nullopt;
    return op->typed<GemmSig>();
  }();
  return h;
}

bool tensor_cores_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MD_ACCEL_TF32X3");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

Tensor linear_impl(const Tensor& a, const Tensor& b) {
  TORCH_CHECK((a.dim() == 2 || a.dim() == 3) && b.dim() == 2 && a.size(1) == b.size(0), "linear_tf32x3: shapes ",
              a.sizes(), " and ", b.sizes(), " do not multiply");
  const bool tensor_cores = a.is_cuda() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat &&
                            a.size(1) % 8 == 0 && b.size(1) % 8 == 0 && tensor_cores_enabled() && gemm_op().has_value();
  if (tensor_cores) return gemm_op()->call(a.dim() == 2 ? a.contiguous() : a, b.contiguous(), false);
  if (a.dim() == 3) return grouped_mm(a, b);  // [G, K, d]
  return at::mm(a, b);
}

class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    ctx->save_for_backward({a, b});
    at::AutoDispatchBelowADInplaceOrView guard;
    return linear_impl(a, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(2);
    if (!grads[0].defined()) return out;
    const auto s = ctx->get_saved_variables();
    const Tensor& g = grads[0];
    if (ctx->needs_input_grad(0)) out[0] = LinearFunction::apply(g, s[1].t().contiguous());
    if (ctx->needs_input_grad(1)) out[1] = s[0].dim() == 2 ? at::mm(s[0].t(), g) : at::tensordot(s[0], g, {0, 2}, {0, 2});
    return out;
  }
};

Tensor linear_autograd(const Tensor& a, const Tensor& b) { return LinearFunction::apply(a, b); }

}  // namespace
}  // namespace md_accel

TORCH_LIBRARY_FRAGMENT(md_accel, m) { m.def("linear_tf32x3(Tensor a, Tensor b) -> Tensor"); }

TORCH_LIBRARY_IMPL(md_accel, CompositeExplicitAutograd, m) { m.impl("linear_tf32x3", md_accel::linear_impl); }

TORCH_LIBRARY_IMPL(md_accel, Autograd, m) { m.impl("linear_tf32x3", md_accel::linear_autograd); }
