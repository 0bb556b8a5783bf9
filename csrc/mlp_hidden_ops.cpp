// Schemas of the md_accel::mlp_hidden_* operators and their C++ autograd kernel (device-agnostic:
// the backward calls the ops through the dispatcher, so it serves CUDA and the Python CPU
// reference alike, and runs from TorchScript in C++, e.g. LAMMPS).
//
//   fwd(x, W, cst) -> h        x: bwd(x, g, W, cst)   W: autograd through mlp_hidden_fwd_aten
//   bwd(x, g, W, cst) -> gx    x, g, W: autograd through mlp_hidden_bwd_aten
// The ATen compositions are recomputed in the backward (a training-only cost: MD needs the
// x-gradient alone, which is the fused bwd op). Only the requested gradients are computed; under
// create_graph they stay differentiable, so Hessians and force training work.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "mlp_hidden_aten.h"

namespace md_accel {
namespace {

using at::Tensor;
using at::TensorList;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using FwdSig = Tensor(const Tensor&, TensorList, double);
using BwdSig = Tensor(const Tensor&, const Tensor&, TensorList, double);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto h = c10::Dispatcher::singleton().findSchemaOrThrow("md_accel::mlp_hidden_fwd", "").typed<FwdSig>();
  return h;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto h = c10::Dispatcher::singleton().findSchemaOrThrow("md_accel::mlp_hidden_bwd", "").typed<BwdSig>();
  return h;
}

// Gradients of <grad, fn(inputs)> for the inputs with need[i], by autograd through fn recomputed
// here. Under create_graph the inputs themselves are used (the results stay differentiable);
// otherwise detached copies keep the recomputed graph local.
variable_list reference_vjp(const std::function<Tensor(const variable_list&)>& fn, const variable_list& inputs,
                            const std::vector<bool>& need, const Tensor& grad) {
  variable_list out(inputs.size());
  if (std::find(need.begin(), need.end(), true) == need.end()) return out;
  const bool create = at::GradMode::is_enabled();
  at::AutoGradMode enable(true);
  variable_list ins, wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(create && inputs[i].requires_grad() ? inputs[i] : inputs[i].detach().requires_grad_(need[i]));
    if (need[i]) wrt.push_back(ins.back());
  }
  const variable_list got = torch::autograd::grad({fn(ins)}, wrt, {grad}, create, create);
  for (size_t i = 0, k = 0; i < inputs.size(); ++i)
    if (need[i]) out[i] = got[k++];
  return out;
}

std::vector<bool> needs(AutogradContext* ctx, size_t n) {
  std::vector<bool> need(n);
  for (size_t i = 0; i < n; ++i) need[i] = ctx->needs_input_grad(i);
  return need;
}

// Inputs: x, weights..., cst (the weight list is flattened into one variable each).
class FwdFunction : public torch::autograd::Function<FwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, TensorList weights, double cst) {
    variable_list saved{x};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["cst"] = cst;
    at::AutoDispatchBelowADInplaceOrView guard;
    return fwd_op().call(x, weights, cst);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    variable_list out(s.size() + 1);  // + cst
    if (!grads[0].defined()) return out;
    const double cst = ctx->saved_data["cst"].toDouble();
    const Tensor g = grads[0].contiguous();
    const TensorList ws(s.data() + 1, s.size() - 1);
    std::vector<bool> need = needs(ctx, s.size());
    if (need[0]) out[0] = bwd_op().call(s[0], g, ws, cst);
    need[0] = false;
    const variable_list gw = reference_vjp(
        [&](const variable_list& in) { return mlp_hidden_fwd_aten(in[0], TensorList(in).slice(1), cst); }, s, need, g);
    std::copy(gw.begin() + 1, gw.end(), out.begin() + 1);
    return out;
  }
};

// Inputs: x, grad_h, weights..., cst.
class BwdFunction : public torch::autograd::Function<BwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& grad_h, TensorList weights,
                        double cst) {
    variable_list saved{x, grad_h};
    saved.insert(saved.end(), weights.begin(), weights.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["cst"] = cst;
    at::AutoDispatchBelowADInplaceOrView guard;
    return bwd_op().call(x, grad_h, weights, cst);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    variable_list out(s.size() + 1);
    if (!grads[0].defined()) return out;
    const double cst = ctx->saved_data["cst"].toDouble();
    const variable_list got = reference_vjp(
        [&](const variable_list& in) { return mlp_hidden_bwd_aten(in[0], in[1], TensorList(in).slice(2), cst); }, s,
        needs(ctx, s.size()), grads[0].contiguous());
    std::copy(got.begin(), got.end(), out.begin());
    return out;
  }
};

Tensor fwd_autograd(const Tensor& x, TensorList weights, double cst) { return FwdFunction::apply(x, weights, cst); }
Tensor bwd_autograd(const Tensor& x, const Tensor& grad_h, TensorList weights, double cst) {
  return BwdFunction::apply(x, grad_h, weights, cst);
}

}  // namespace
}  // namespace md_accel

// Keep these strings identical to md_accel/ops/_mlp_ops.py (SCHEMAS).
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def("mlp_hidden_fwd(Tensor x, Tensor[] weights, float cst) -> Tensor");
  m.def("mlp_hidden_bwd(Tensor x, Tensor grad_h, Tensor[] weights, float cst) -> Tensor");
}

TORCH_LIBRARY_IMPL(md_accel, Autograd, m) {
  m.impl("mlp_hidden_fwd", md_accel::fwd_autograd);
  m.impl("mlp_hidden_bwd", md_accel::bwd_autograd);
}
