// Schemas of the md_accel::tp_conv_* operators and their C++ autograd kernel (device-agnostic:
// the backward calls the other ops through the dispatcher, so it serves CUDA and the Python CPU
// reference alike, and works from TorchScript in C++, e.g. LAMMPS).
//   tp_conv_fwd  backward -> tp_conv_bwd
//   tp_conv_bwd  backward -> tp_conv_dbwd   (third order is not supported)
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "final_backward.h"

namespace md_accel {

namespace {
thread_local bool t_final_backward = false;
thread_local const void* t_donated_gg_w = nullptr;

// Whether a PyObjectSlot can tell that its Python wrapper is referenced by the tensor alone (has_unique_reference,
// in the torch versions whose wrapper holds a reference to the TensorImpl).
template <typename Slot, typename = void>
struct SlotKnowsUniqueReference : std::false_type {};
template <typename Slot>
struct SlotKnowsUniqueReference<Slot, std::void_t<decltype(std::declval<const Slot&>().has_unique_reference())>>
    : std::true_type {};

// The references to impl that its Python wrapper holds while nothing in Python holds the wrapper (a gradient
// returned by a Python autograd function): one in the torch versions whose wrapper keeps its TensorImpl alive (as
// torch's own is_tensor_stealable counts it), else none.
template <typename Impl>
size_t idle_wrapper_refs(const Impl* impl) {
  using Slot = std::remove_cv_t<std::remove_pointer_t<decltype(impl->pyobj_slot())>>;
  if constexpr (SlotKnowsUniqueReference<Slot>::value)
    return impl->pyobj_slot()->has_unique_reference() ? 1 : 0;
  else
    return 0;
}
}  // namespace

FinalBackward::FinalBackward(bool active) : previous_(t_final_backward) { t_final_backward = active; }
FinalBackward::~FinalBackward() { t_final_backward = previous_; }
bool FinalBackward::active() { return t_final_backward; }

DonatedGgW::DonatedGgW(const at::Tensor& gg_w, bool final) : previous_(t_donated_gg_w) {
  t_donated_gg_w = final && sole_owner(gg_w) ? gg_w.unsafeGetTensorImpl() : nullptr;
}
DonatedGgW::~DonatedGgW() { t_donated_gg_w = previous_; }
bool DonatedGgW::is(const at::Tensor& t) {
  return t.defined() && t_donated_gg_w != nullptr && t.unsafeGetTensorImpl() == t_donated_gg_w;
}
bool DonatedGgW::sole_owner(const at::Tensor& t) {
  if (!t.defined() || t.layout() != at::kStrided || !t.has_storage() || t.is_view() || t.storage().use_count() != 1)
    return false;
  const size_t refs = t.use_count();
  return refs == 1 || (refs == 2 && idle_wrapper_refs(t.unsafeGetTensorImpl()) == 1);
}

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Tensor3 = std::tuple<Tensor, Tensor, Tensor>;
using Tensor4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;

constexpr int kRest = 9;  // graph (5) + plan (4) tensors

using FwdSig = Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&, const Tensor&, int64_t);
using BwdSig = Tensor3(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&, const Tensor&, const Tensor&);
using DbwdSig = Tensor4(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&, bool);

const c10::TypedOperatorHandle<FwdSig>& fwd_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("md_accel::tp_conv_fwd", "")
                             .typed<FwdSig>();
  return op;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("md_accel::tp_conv_bwd", "")
                             .typed<BwdSig>();
  return op;
}
const c10::TypedOperatorHandle<DbwdSig>& dbwd_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("md_accel::tp_conv_dbwd", "")
                             .typed<DbwdSig>();
  return op;
}

class TpConvFwdFunction : public torch::autograd::Function<TpConvFwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& y, const Tensor& w,
                        const Tensor& src, const Tensor& dst, const Tensor& dst_ptr,
                        const Tensor& src_perm, const Tensor& src_ptr, const Tensor& paths,
                        const Tensor& cg_ptr, const Tensor& cg_idx, const Tensor& cg_val,
                        int64_t dim_out) {
    ctx->save_for_backward(
        {x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val});
    at::AutoDispatchBelowADInplaceOrView guard;
    return fwd_op().call(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx,
                         cg_val, dim_out);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(3 + kRest + 1);
    if (!grads[0].defined()) return out;
    const auto s = ctx->get_saved_variables();
    // grad mode is on here only under create_graph (final_backward.h)
    const FinalBackward mark(!at::GradMode::is_enabled());
    auto r = bwd_op().call(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], s[5], s[6],
                           s[7], s[8], s[9], s[10], s[11]);
    out[0] = std::get<0>(r);
    out[1] = std::get<1>(r);
    out[2] = std::get<2>(r);
    return out;
  }
};

class TpConvBwdFunction : public torch::autograd::Function<TpConvBwdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const Tensor& grad_out, const Tensor& x,
                               const Tensor& y, const Tensor& w, const Tensor& src,
                               const Tensor& dst, const Tensor& dst_ptr, const Tensor& src_perm,
                               const Tensor& src_ptr, const Tensor& paths, const Tensor& cg_ptr,
                               const Tensor& cg_idx, const Tensor& cg_val) {
    ctx->save_for_backward(
        {grad_out, x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val});
    at::AutoDispatchBelowADInplaceOrView guard;
    auto r = bwd_op().call(grad_out, x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
                           cg_idx, cg_val);
    return {std::get<0>(r), std::get<1>(r), std::get<2>(r)};
  }

  // grads by reference: the engine's list (custom_function.h) is then the only other holder of each incoming
  // gradient, so that moving gg_w out of it leaves this backward its sole owner where nothing else keeps it.
  static variable_list backward(AutogradContext* ctx, variable_list& grads) {
    variable_list out(4 + kRest);
    if (!grads[0].defined() && !grads[1].defined() && !grads[2].defined()) return out;
    const auto s = ctx->get_saved_variables();
    // an undefined incoming gradient is a zero one
    Tensor gg[3];
    for (int q = 0; q < 3; ++q) {
      const Tensor in = std::move(grads[q]);
      gg[q] = in.defined() ? in.contiguous() : at::zeros_like(s[1 + q]);
    }
    // the gradient to grad_out (a forward pass) only where grad_out requires one
    const bool need_grad_out = ctx->needs_input_grad(0);
    const bool final = !at::GradMode::is_enabled();
    const FinalBackward mark(final);  // final_backward.h
    const DonatedGgW donated(gg[2], final);
    auto r = dbwd_op().call(gg[0], gg[1], gg[2], s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
                            s[8], s[9], s[10], s[11], s[12], need_grad_out);
    if (need_grad_out) out[0] = std::get<0>(r);
    out[1] = std::get<1>(r);
    out[2] = std::get<2>(r);
    out[3] = std::get<3>(r);
    return out;
  }
};

Tensor tp_conv_fwd_autograd(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& src,
                            const Tensor& dst, const Tensor& dst_ptr, const Tensor& src_perm,
                            const Tensor& src_ptr, const Tensor& paths, const Tensor& cg_ptr,
                            const Tensor& cg_idx, const Tensor& cg_val, int64_t dim_out) {
  return TpConvFwdFunction::apply(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
                                  cg_idx, cg_val, dim_out);
}

Tensor3 tp_conv_bwd_autograd(const Tensor& grad_out, const Tensor& x, const Tensor& y,
                             const Tensor& w, const Tensor& src, const Tensor& dst,
                             const Tensor& dst_ptr, const Tensor& src_perm, const Tensor& src_ptr,
                             const Tensor& paths, const Tensor& cg_ptr, const Tensor& cg_idx,
                             const Tensor& cg_val) {
  auto r = TpConvBwdFunction::apply(grad_out, x, y, w, src, dst, dst_ptr, src_perm, src_ptr,
                                    paths, cg_ptr, cg_idx, cg_val);
  return {r[0], r[1], r[2]};
}

}  // namespace
}  // namespace md_accel

// Keep these strings identical to md_accel/ops/_custom_ops.py (SCHEMAS).
TORCH_LIBRARY(md_accel, m) {
  m.def(
      "tp_conv_fwd(Tensor x, Tensor y, Tensor w, Tensor src, Tensor dst, Tensor dst_ptr, "
      "Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, Tensor cg_idx, "
      "Tensor cg_val, int dim_out) -> Tensor");
  m.def(
      "tp_conv_bwd(Tensor grad_out, Tensor x, Tensor y, Tensor w, Tensor src, Tensor dst, "
      "Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, "
      "Tensor cg_idx, Tensor cg_val) -> (Tensor, Tensor, Tensor)");
  m.def(
      "tp_conv_dbwd(Tensor gg_x, Tensor gg_y, Tensor gg_w, Tensor grad_out, Tensor x, Tensor y, "
      "Tensor w, Tensor src, Tensor dst, Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, "
      "Tensor paths, Tensor cg_ptr, Tensor cg_idx, Tensor cg_val, bool need_grad_out=True) -> (Tensor, "
      "Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(md_accel, Autograd, m) {
  m.impl("tp_conv_fwd", md_accel::tp_conv_fwd_autograd);
  m.impl("tp_conv_bwd", md_accel::tp_conv_bwd_autograd);
}
