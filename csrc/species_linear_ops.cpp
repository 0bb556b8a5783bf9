// Schemas of the md_accel::species_linear_* operators and their C++ autograd kernel
// (device-agnostic: the backward calls the ops through the dispatcher, so it serves CUDA and the
// Python CPU reference alike, and runs from TorchScript in C++, e.g. LAMMPS).
//
// out = fwd(x, W) is bilinear, and the three ops are closed under differentiation
// (F(x, W, g) = <g, fwd(x, W)> = <bwd_x(g, W), x> = <bwd_w(x, g), W>):
//   fwd(x, W)   -> x: bwd_x(g, W)   W: bwd_w(x, g)
//   bwd_x(g, W) -> g: fwd(h, W)     W: bwd_w(h, g)     (h: incoming gradient)
//   bwd_w(x, g) -> x: bwd_x(g, H)   g: fwd(x, H)       (H: incoming gradient)
// so every order of derivative is again these ops. Only the requested gradients are computed.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <vector>

namespace md_accel {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using OpSig = Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, c10::IntArrayRef,
                     c10::ArrayRef<double>, int64_t);

c10::TypedOperatorHandle<OpSig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<OpSig>();
}
const c10::TypedOperatorHandle<OpSig>& fwd_op() {
  static const auto h = find_op("md_accel::species_linear_fwd");
  return h;
}
const c10::TypedOperatorHandle<OpSig>& bwd_x_op() {
  static const auto h = find_op("md_accel::species_linear_bwd_x");
  return h;
}
const c10::TypedOperatorHandle<OpSig>& bwd_w_op() {
  static const auto h = find_op("md_accel::species_linear_bwd_w");
  return h;
}

constexpr int kInputs = 7;  // a, b, species, order, ins, path_weights, size

// Shared forward of the three ops: a and b are the differentiable operands. Each gradient needs
// only the other operand (bilinear), so a is kept only when b requires grad and b only when a does:
// with frozen weights (MD forces) x is not held until the backward (a linear's input can be a wide
// conv output, 2 GB for SevenNet-l3i5 at 32k atoms in float64). The sizes are kept instead.
Tensor save_and_call(AutogradContext* ctx, const c10::TypedOperatorHandle<OpSig>& h, const Tensor& a,
                     const Tensor& b, const Tensor& species, const Tensor& order, c10::IntArrayRef ins,
                     c10::ArrayRef<double> pw, int64_t size) {
  ctx->save_for_backward({b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor(), species, order});
  ctx->saved_data["ins"] = ins.vec();
  ctx->saved_data["pw"] = pw.vec();
  ctx->saved_data["a_cols"] = a.size(1);
  ctx->saved_data["b_rows"] = b.size(0);
  ctx->saved_data["b_cols"] = b.size(1);
  at::AutoDispatchBelowADInplaceOrView guard;
  return h.call(a, b, species, order, ins, pw, size);
}

struct Saved {
  Tensor a, b, species, order;  // a (b): undefined unless b (a) required grad
  std::vector<int64_t> ins;
  std::vector<double> pw;
  int64_t a_cols, b_rows, b_cols;
};

Saved saved(AutogradContext* ctx) {
  const auto s = ctx->get_saved_variables();
  return {s[0], s[1], s[2], s[3], ctx->saved_data["ins"].toIntVector(), ctx->saved_data["pw"].toDoubleVector(),
          ctx->saved_data["a_cols"].toInt(), ctx->saved_data["b_rows"].toInt(), ctx->saved_data["b_cols"].toInt()};
}

class FwdFunction : public torch::autograd::Function<FwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& w, const Tensor& species,
                        const Tensor& order, c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t dim_out) {
    return save_and_call(ctx, fwd_op(), x, w, species, order, ins, pw, dim_out);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(kInputs);
    if (!grads[0].defined()) return out;
    const Saved s = saved(ctx);
    const Tensor g = grads[0].contiguous();
    if (ctx->needs_input_grad(0)) out[0] = bwd_x_op().call(g, s.b, s.species, s.order, s.ins, s.pw, s.a_cols);
    if (ctx->needs_input_grad(1)) out[1] = bwd_w_op().call(s.a, g, s.species, s.order, s.ins, s.pw, s.b_rows);
    return out;
  }
};

class BwdXFunction : public torch::autograd::Function<BwdXFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& g, const Tensor& w, const Tensor& species,
                        const Tensor& order, c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t dim_in) {
    return save_and_call(ctx, bwd_x_op(), g, w, species, order, ins, pw, dim_in);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(kInputs);
    if (!grads[0].defined()) return out;
    const Saved s = saved(ctx);
    const Tensor h = grads[0].contiguous();
    if (ctx->needs_input_grad(0)) out[0] = fwd_op().call(h, s.b, s.species, s.order, s.ins, s.pw, s.a_cols);
    if (ctx->needs_input_grad(1)) out[1] = bwd_w_op().call(h, s.a, s.species, s.order, s.ins, s.pw, s.b_rows);
    return out;
  }
};

class BwdWFunction : public torch::autograd::Function<BwdWFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& g, const Tensor& species,
                        const Tensor& order, c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t num_species) {
    return save_and_call(ctx, bwd_w_op(), x, g, species, order, ins, pw, num_species);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(kInputs);
    if (!grads[0].defined()) return out;
    const Saved s = saved(ctx);
    const Tensor hw = grads[0].contiguous();
    if (ctx->needs_input_grad(0)) out[0] = bwd_x_op().call(s.b, hw, s.species, s.order, s.ins, s.pw, s.a_cols);
    if (ctx->needs_input_grad(1)) out[1] = fwd_op().call(s.a, hw, s.species, s.order, s.ins, s.pw, s.b_cols);
    return out;
  }
};

Tensor fwd_autograd(const Tensor& x, const Tensor& w, const Tensor& species, const Tensor& order,
                    c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t dim_out) {
  return FwdFunction::apply(x, w, species, order, ins, pw, dim_out);
}
Tensor bwd_x_autograd(const Tensor& g, const Tensor& w, const Tensor& species, const Tensor& order,
                      c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t dim_in) {
  return BwdXFunction::apply(g, w, species, order, ins, pw, dim_in);
}
Tensor bwd_w_autograd(const Tensor& x, const Tensor& g, const Tensor& species, const Tensor& order,
                      c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t num_species) {
  return BwdWFunction::apply(x, g, species, order, ins, pw, num_species);
}

}  // namespace
}  // namespace md_accel

// Keep these strings identical to md_accel/ops/species_linear.py (SCHEMAS).
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def(
      "species_linear_fwd(Tensor x, Tensor weight, Tensor species, Tensor order, int[] ins, "
      "float[] path_weights, int dim_out) -> Tensor");
  m.def(
      "species_linear_bwd_x(Tensor grad_out, Tensor weight, Tensor species, Tensor order, int[] ins, "
      "float[] path_weights, int dim_in) -> Tensor");
  m.def(
      "species_linear_bwd_w(Tensor x, Tensor grad_out, Tensor species, Tensor order, int[] ins, "
      "float[] path_weights, int num_species) -> Tensor");
}

TORCH_LIBRARY_IMPL(md_accel, Autograd, m) {
  m.impl("species_linear_fwd", md_accel::fwd_autograd);
  m.impl("species_linear_bwd_x", md_accel::bwd_x_autograd);
  m.impl("species_linear_bwd_w", md_accel::bwd_w_autograd);
}
