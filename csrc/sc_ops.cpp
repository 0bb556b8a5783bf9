// Schemas of the md_accel::symmetric_contraction_* operators and their C++ autograd kernel
// (device-agnostic: the backward calls the other ops through the dispatcher, so it serves CUDA
// and the Python CPU reference alike, and works from TorchScript in C++, e.g. LAMMPS).
//   symmetric_contraction_fwd  backward -> symmetric_contraction_bwd
//   symmetric_contraction_bwd  backward -> symmetric_contraction_dbwd   (no third order)
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace md_accel {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Dims = c10::IntArrayRef;

using FwdSig = Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Dims, Dims);
using BwdSig = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                          const Tensor&, const Tensor&, Dims, Dims, bool);
using DbwdSig = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                   const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                                   Dims, Dims);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("md_accel::symmetric_contraction_fwd", "")
                             .typed<FwdSig>();
  return op;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("md_accel::symmetric_contraction_bwd", "")
                             .typed<BwdSig>();
  return op;
}
const c10::TypedOperatorHandle<DbwdSig>& dbwd_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("md_accel::symmetric_contraction_dbwd", "")
                             .typed<DbwdSig>();
  return op;
}

void save_dims(AutogradContext* ctx, Dims in_dims, Dims out_dims) {
  ctx->saved_data["in_dims"] = in_dims.vec();
  ctx->saved_data["out_dims"] = out_dims.vec();
}
std::vector<int64_t> dims(AutogradContext* ctx, const char* name) { return ctx->saved_data[name].toIntVector(); }

class ScFwdFunction : public torch::autograd::Function<ScFwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& species, const Tensor& w,
                        const Tensor& terms, const Tensor& values, Dims in_dims, Dims out_dims) {
    ctx->save_for_backward({x, species, w, terms, values});
    save_dims(ctx, in_dims, out_dims);
    at::AutoDispatchBelowADInplaceOrView guard;
    return fwd_op().call(x, species, w, terms, values, in_dims, out_dims);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(7);
    if (!grads[0].defined()) return out;
    const auto s = ctx->get_saved_variables();
    const bool need_w = ctx->needs_input_grad(2);
    auto r = bwd_op().call(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], dims(ctx, "in_dims"),
                           dims(ctx, "out_dims"), need_w);
    out[0] = std::get<0>(r);
    if (need_w) out[2] = std::get<1>(r);
    return out;
  }
};

class ScBwdFunction : public torch::autograd::Function<ScBwdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& grad_out, const Tensor& x, const Tensor& species,
                               const Tensor& w, const Tensor& terms, const Tensor& values, Dims in_dims,
                               Dims out_dims, bool need_w) {
    ctx->save_for_backward({grad_out, x, species, w, terms, values});
    save_dims(ctx, in_dims, out_dims);
    at::AutoDispatchBelowADInplaceOrView guard;
    auto r = bwd_op().call(grad_out, x, species, w, terms, values, in_dims, out_dims, need_w);
    return {std::get<0>(r), std::get<1>(r)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(9);
    if (!grads[0].defined() && !grads[1].defined()) return out;
    const auto s = ctx->get_saved_variables();
    // an undefined incoming gradient is a zero one
    const Tensor ggx = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(s[1]);
    const Tensor ggw = grads[1].defined() ? grads[1].contiguous() : at::zeros_like(s[3]);
    auto r = dbwd_op().call(ggx, ggw, s[0], s[1], s[2], s[3], s[4], s[5], dims(ctx, "in_dims"),
                            dims(ctx, "out_dims"));
    out[0] = std::get<0>(r);
    out[1] = std::get<1>(r);
    out[3] = std::get<2>(r);
    return out;
  }
};

Tensor sc_fwd_autograd(const Tensor& x, const Tensor& species, const Tensor& w, const Tensor& terms,
                       const Tensor& values, Dims in_dims, Dims out_dims) {
  return ScFwdFunction::apply(x, species, w, terms, values, in_dims, out_dims);
}

std::tuple<Tensor, Tensor> sc_bwd_autograd(const Tensor& grad_out, const Tensor& x, const Tensor& species,
                                           const Tensor& w, const Tensor& terms, const Tensor& values, Dims in_dims,
                                           Dims out_dims, bool need_w) {
  auto r = ScBwdFunction::apply(grad_out, x, species, w, terms, values, in_dims, out_dims, need_w);
  return {r[0], r[1]};
}

}  // namespace
}  // namespace md_accel

// Keep these strings identical to md_accel/ops/_sc_ops.py (SCHEMAS).
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def(
      "symmetric_contraction_fwd(Tensor x, Tensor species, Tensor w, Tensor terms, Tensor values, "
      "int[] in_dims, int[] out_dims) -> Tensor");
  m.def(
      "symmetric_contraction_bwd(Tensor grad_out, Tensor x, Tensor species, Tensor w, Tensor terms, "
      "Tensor values, int[] in_dims, int[] out_dims, bool need_w) -> (Tensor, Tensor)");
  m.def(
      "symmetric_contraction_dbwd(Tensor gg_x, Tensor gg_w, Tensor grad_out, Tensor x, Tensor species, "
      "Tensor w, Tensor terms, Tensor values, int[] in_dims, int[] out_dims) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(md_accel, Autograd, m) {
  m.impl("symmetric_contraction_fwd", md_accel::sc_fwd_autograd);
  m.impl("symmetric_contraction_bwd", md_accel::sc_bwd_autograd);
}
