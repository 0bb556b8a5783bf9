// Schemas of md_accel::tp_conv_fused_{fwd,bwd} (the tensor-product convolution with the radial
// MLP's last linear layer fused in: w = hidden @ W) and their C++ autograd kernel, device-agnostic
// like ops.cpp (the backward calls ops through the dispatcher; TorchScript from C++ works).
//   tp_conv_fused_fwd  backward -> tp_conv_fused_bwd
//   tp_conv_fused_bwd  backward -> composed from mm, tp_conv_dbwd and tp_conv_bwd (materialises w
//                      and one grad_w): a fused double backward would be a third kernel family for
//                      a path that only training on forces takes.
// On CUDA, when autograd records and W is frozen, the forward runs the internal _tp_conv_fused_fwd_keep, which
// also returns the weight chunks w_c it kept (tp_conv_chunked.h: as far as the keep budget allows),
// and a first-order backward hands them to _tp_conv_fused_bwd_kept instead of recomputing them.
//   tp_conv_pair_fwd   tp_conv_fused_fwd with hidden.index_select(0, w_row) as hidden: edges that
//                      share weight rows (the two directions of a pair), hidden given once per row.
//                      CUDA: _tp_conv_pair_fwd_keep / _tp_conv_pair_bwd (tp_conv_chunked.h); with
//                      create_graph, and elsewhere, composed from index_select and the fused ops.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "final_backward.h"

namespace md_accel {
namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Tensor3 = std::tuple<Tensor, Tensor, Tensor>;
using Tensor4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;
using CT = const Tensor&;

constexpr int kRest = 9;  // graph (5) + plan (4) tensors

using FusedFwdSig = Tensor(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, int64_t);
using FusedBwdSig = Tensor4(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, bool);
using BwdSig = Tensor3(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT);
using DbwdSig = Tensor4(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, bool);
using KeepSig = std::tuple<Tensor, std::vector<Tensor>>(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, int64_t);
using KeptBwdSig = Tensor4(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, at::TensorList, bool);
using PairKeepSig = std::tuple<Tensor, std::vector<Tensor>>(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT,
                                                            int64_t, bool);
using PairBwdSig = Tensor4(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, at::TensorList, bool);

template <typename Sig>
c10::TypedOperatorHandle<Sig> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
const c10::TypedOperatorHandle<FusedFwdSig>& fused_fwd_op() {
  static const auto h = find_op<FusedFwdSig>("md_accel::tp_conv_fused_fwd");
  return h;
}
const c10::TypedOperatorHandle<FusedBwdSig>& fused_bwd_op() {
  static const auto h = find_op<FusedBwdSig>("md_accel::tp_conv_fused_bwd");
  return h;
}
const c10::TypedOperatorHandle<KeepSig>& fused_fwd_keep_op() {
  static const auto h = find_op<KeepSig>("md_accel::_tp_conv_fused_fwd_keep");
  return h;
}
const c10::TypedOperatorHandle<KeptBwdSig>& fused_bwd_kept_op() {
  static const auto h = find_op<KeptBwdSig>("md_accel::_tp_conv_fused_bwd_kept");
  return h;
}
const c10::TypedOperatorHandle<PairKeepSig>& pair_fwd_keep_op() {
  static const auto h = find_op<PairKeepSig>("md_accel::_tp_conv_pair_fwd_keep");
  return h;
}
const c10::TypedOperatorHandle<PairBwdSig>& pair_bwd_op() {
  static const auto h = find_op<PairBwdSig>("md_accel::_tp_conv_pair_bwd");
  return h;
}
const c10::TypedOperatorHandle<BwdSig>& bwd_op() {
  static const auto h = find_op<BwdSig>("md_accel::tp_conv_bwd");
  return h;
}
const c10::TypedOperatorHandle<DbwdSig>& dbwd_op() {
  static const auto h = find_op<DbwdSig>("md_accel::tp_conv_dbwd");
  return h;
}

class FusedFwdFunction : public torch::autograd::Function<FusedFwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr,
                        CT src_perm, CT src_ptr, CT paths, CT cg_ptr, CT cg_idx, CT cg_val,
                        int64_t dim_out, bool keep) {
    variable_list saved{x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val};
    at::AutoDispatchBelowADInplaceOrView guard;
    Tensor out;
    if (keep) {
      auto r = fused_fwd_keep_op().call(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx,
                                        cg_val, dim_out);
      out = std::get<0>(r);
      saved.insert(saved.end(), std::get<1>(r).begin(), std::get<1>(r).end());
    } else {
      out = fused_fwd_op().call(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val,
                                dim_out);
    }
    ctx->save_for_backward(saved);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(4 + kRest + 2);
    if (!grads[0].defined()) return out;
    const auto s = ctx->get_saved_variables();
    const bool need_W = ctx->needs_input_grad(3);
    const Tensor g = grads[0].contiguous();
    constexpr size_t kSaved = 4 + kRest;  // the kept chunks follow the operands
    // kept chunks serve a first-order backward; with create_graph the differentiable op runs
    auto r = s.size() > kSaved && !at::GradMode::is_enabled()
                 ? fused_bwd_kept_op().call(g, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                                            s[11], s[12], at::TensorList(s).slice(kSaved), need_W)
                 : fused_bwd_op().call(g, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                                       s[11], s[12], need_W);
    out[0] = std::get<0>(r);
    out[1] = std::get<1>(r);
    out[2] = std::get<2>(r);
    if (need_W) out[3] = std::get<3>(r);
    return out;
  }
};

class FusedBwdFunction : public torch::autograd::Function<FusedBwdFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g, CT x, CT y, CT h, CT W, CT src, CT dst,
                               CT dst_ptr, CT src_perm, CT src_ptr, CT paths, CT cg_ptr, CT cg_idx,
                               CT cg_val, bool need_W) {
    ctx->save_for_backward({g, x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val});
    at::AutoDispatchBelowADInplaceOrView guard;
    auto r = fused_bwd_op().call(g, x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
                                 cg_idx, cg_val, need_W);
    return {std::get<0>(r), std::get<1>(r), std::get<2>(r), std::get<3>(r)};
  }

  // With gw = dF/dw at w = h W, the outputs are (dF/dx, dF/dy, gw W^T, h^T gw), so
  // <gg_x, .> + <gg_y, .> + <gg_h, gw W^T> + <gg_W, h^T gw> is the unfused double-backward scalar
  // with gg_w = gg_h W + h gg_W, plus the explicit h and W dependence of the last two terms.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5 + kRest + 1);
    const Tensor& gg_h = grads[2];
    const Tensor gg_W = grads[3].defined() && grads[3].numel() > 0 ? grads[3] : Tensor();
    if (!grads[0].defined() && !grads[1].defined() && !gg_h.defined() && !gg_W.defined()) return out;
    const auto s = ctx->get_saved_variables();
    const Tensor &g = s[0], &x = s[1], &y = s[2], &h = s[3], &W = s[4];
    const Tensor w = at::mm(h, W);
    Tensor gg_w;
    if (gg_h.defined()) gg_w = at::mm(gg_h, W);
    if (gg_W.defined()) gg_w = gg_w.defined() ? at::add(gg_w, at::mm(h, gg_W)) : at::mm(h, gg_W);
    if (!gg_w.defined()) gg_w = at::zeros_like(w);
    const Tensor gg_x = grads[0].defined() ? grads[0].contiguous() : at::zeros_like(x);
    const Tensor gg_y = grads[1].defined() ? grads[1].contiguous() : at::zeros_like(y);
    const bool need_g = ctx->needs_input_grad(0);
    // gg_w is this backward's own and unused after the call: a final double backward may write g_w into it
    const DonatedGgW donated(gg_w, !at::GradMode::is_enabled());
    auto r = dbwd_op().call(gg_x, gg_y, gg_w, g, x, y, w, s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13],
                            need_g);
    if (need_g) out[0] = std::get<0>(r);
    out[1] = std::get<1>(r);
    out[2] = std::get<2>(r);
    const Tensor& g_w = std::get<3>(r);
    const bool need_h = ctx->needs_input_grad(3), need_W = ctx->needs_input_grad(4);
    Tensor gw;  // dF/dw, for the explicit terms
    if ((need_h && gg_W.defined()) || (need_W && gg_h.defined()))
      gw = std::get<2>(bwd_op().call(g, x, y, w, s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13]));
    if (need_h) {
      out[3] = at::mm(g_w, W.t());
      if (gg_W.defined()) out[3] = at::add(out[3], at::mm(gw, gg_W.t()));
    }
    if (need_W) {
      out[4] = at::mm(h.t(), g_w);
      if (gg_h.defined()) out[4] = at::add(out[4], at::mm(gg_h.t(), gw));
    }
    return out;
  }
};

// The sum over the edges of each of hidden's rows of a per-edge gradient (differentiable).
Tensor edges_to_rows(CT g_e, CT w_row, CT h) {
  return at::zeros({h.size(0), g_e.size(1)}, g_e.options()).index_add(0, w_row, g_e);
}

class PairFwdFunction : public torch::autograd::Function<PairFwdFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, CT x, CT y, CT h, CT W, CT w_row, CT src, CT dst, CT dst_ptr,
                        CT src_perm, CT src_ptr, CT paths, CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out,
                        bool keep) {
    variable_list saved{x, y, h, W, w_row, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val};
    at::AutoDispatchBelowADInplaceOrView guard;
    auto r = pair_fwd_keep_op().call(x, y, h, W, w_row, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx,
                                     cg_val, dim_out, keep);
    saved.insert(saved.end(), std::get<1>(r).begin(), std::get<1>(r).end());
    ctx->save_for_backward(saved);
    return std::get<0>(r);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out(5 + kRest + 2);
    if (!grads[0].defined()) return out;
    const auto s = ctx->get_saved_variables();
    const bool need_W = ctx->needs_input_grad(3);
    const Tensor g = grads[0].contiguous();
    constexpr size_t kSaved = 5 + kRest;  // the kept weight rows follow the operands
    Tensor4 r;
    if (at::GradMode::is_enabled()) {  // create_graph: composed, so that it differentiates again
      r = fused_bwd_op().call(g, s[0], s[1], at::index_select(s[2], 0, s[4]), s[3], s[5], s[6], s[7], s[8], s[9],
                              s[10], s[11], s[12], s[13], need_W);
      std::get<2>(r) = edges_to_rows(std::get<2>(r), s[4], s[2]);
    } else {
      r = pair_bwd_op().call(g, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12],
                             s[13], at::TensorList(s).slice(kSaved), need_W);
    }
    out[0] = std::get<0>(r);
    out[1] = std::get<1>(r);
    out[2] = std::get<2>(r);
    if (need_W) out[3] = std::get<3>(r);
    return out;
  }
};

// Keep the weight rows for a backward only where one will run and use them (as fused_fwd_autograd).
bool keep_for_backward(CT x, CT y, CT h, CT W) {
  return x.is_cuda() && at::GradMode::is_enabled() && !W.requires_grad() &&
         (x.requires_grad() || y.requires_grad() || h.requires_grad());
}

Tensor pair_fwd_autograd(CT x, CT y, CT h, CT W, CT w_row, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr,
                         CT paths, CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out) {
  if (!x.is_cuda())  // composed: hidden's rows per edge through the fused op
    return fused_fwd_op().call(x, y, at::index_select(h, 0, w_row), W, src, dst, dst_ptr, src_perm, src_ptr, paths,
                               cg_ptr, cg_idx, cg_val, dim_out);
  return PairFwdFunction::apply(x, y, h, W, w_row, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx,
                                cg_val, dim_out, keep_for_backward(x, y, h, W));
}

std::tuple<Tensor, std::vector<Tensor>> pair_fwd_keep_meta(CT x, CT, CT, CT, CT, CT, CT, CT dst_ptr, CT, CT, CT, CT, CT,
                                                           CT, int64_t dim_out, bool) {
  return {at::empty({dst_ptr.size(0) - 1, dim_out}, x.options()), {}};
}

Tensor4 pair_bwd_meta(CT, CT x, CT y, CT h, CT W, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, at::TensorList,
                      bool need_W) {
  return {at::empty_like(x), at::empty_like(y), at::empty_like(h),
          need_W ? at::empty_like(W) : at::empty({0, W.size(1)}, W.options())};
}

Tensor fused_fwd_autograd(CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr,
                          CT paths, CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out) {
  // keep weight chunks for a backward only where one will run and use them: an MD step (forces of
  // a frozen model). Where W requires grad (training, whose force loss differentiates with
  // create_graph, which recomputes) the chunks would only hold memory until the loss's backward.
  return FusedFwdFunction::apply(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx,
                                 cg_val, dim_out, keep_for_backward(x, y, h, W));
}

// Shapes only (FakeTensor tracing of the autograd kernel above).
std::tuple<Tensor, std::vector<Tensor>> fused_fwd_keep_meta(CT x, CT, CT, CT, CT, CT, CT dst_ptr, CT, CT, CT, CT, CT,
                                                            CT, int64_t dim_out) {
  return {at::empty({dst_ptr.size(0) - 1, dim_out}, x.options()), {}};
}

Tensor4 fused_bwd_kept_meta(CT, CT x, CT y, CT h, CT W, CT, CT, CT, CT, CT, CT, CT, CT, CT, at::TensorList,
                            bool need_W) {
  return {at::empty_like(x), at::empty_like(y), at::empty_like(h),
          need_W ? at::empty_like(W) : at::empty({0, W.size(1)}, W.options())};
}

Tensor4 fused_bwd_autograd(CT g, CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr, CT src_perm,
                           CT src_ptr, CT paths, CT cg_ptr, CT cg_idx, CT cg_val, bool need_W) {
  auto r = FusedBwdFunction::apply(g, x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr,
                                   cg_idx, cg_val, need_W);
  return {r[0], r[1], r[2], r[3]};
}

}  // namespace
}  // namespace md_accel

// Keep these strings identical to md_accel/ops/_custom_ops.py (SCHEMAS).
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def(
      "tp_conv_fused_fwd(Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor src, Tensor dst, "
      "Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, Tensor cg_idx, "
      "Tensor cg_val, int dim_out) -> Tensor");
  m.def(
      "tp_conv_fused_bwd(Tensor grad_out, Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor src, "
      "Tensor dst, Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, "
      "Tensor cg_idx, Tensor cg_val, bool need_grad_W) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "tp_conv_pair_fwd(Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor w_row, Tensor src, Tensor dst, "
      "Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, Tensor cg_idx, "
      "Tensor cg_val, int dim_out) -> Tensor");
  // internal (called by the autograd kernel below; CUDA and Meta implementations only)
  m.def(
      "_tp_conv_pair_fwd_keep(Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor w_row, Tensor src, Tensor dst, "
      "Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, Tensor cg_idx, "
      "Tensor cg_val, int dim_out, bool keep) -> (Tensor, Tensor[])");
  m.def(
      "_tp_conv_pair_bwd(Tensor grad_out, Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor w_row, Tensor src, "
      "Tensor dst, Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, "
      "Tensor cg_idx, Tensor cg_val, Tensor[] kept, bool need_grad_W) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "_tp_conv_fused_fwd_keep(Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor src, Tensor dst, "
      "Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, Tensor cg_idx, "
      "Tensor cg_val, int dim_out) -> (Tensor, Tensor[])");
  m.def(
      "_tp_conv_fused_bwd_kept(Tensor grad_out, Tensor x, Tensor y, Tensor hidden, Tensor W, Tensor src, "
      "Tensor dst, Tensor dst_ptr, Tensor src_perm, Tensor src_ptr, Tensor paths, Tensor cg_ptr, "
      "Tensor cg_idx, Tensor cg_val, Tensor[] kept, bool need_grad_W) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(md_accel, Meta, m) {
  m.impl("_tp_conv_fused_fwd_keep", md_accel::fused_fwd_keep_meta);
  m.impl("_tp_conv_fused_bwd_kept", md_accel::fused_bwd_kept_meta);
  m.impl("_tp_conv_pair_fwd_keep", md_accel::pair_fwd_keep_meta);
  m.impl("_tp_conv_pair_bwd", md_accel::pair_bwd_meta);
}

TORCH_LIBRARY_IMPL(md_accel, Autograd, m) {
  m.impl("tp_conv_fused_fwd", md_accel::fused_fwd_autograd);
  m.impl("tp_conv_fused_bwd", md_accel::fused_bwd_autograd);
  m.impl("tp_conv_pair_fwd", md_accel::pair_fwd_autograd);
}

// Below autograd (inference mode) the same composition / CUDA path, recording nothing.
TORCH_LIBRARY_IMPL(md_accel, CPU, m) { m.impl("tp_conv_pair_fwd", md_accel::pair_fwd_autograd); }
TORCH_LIBRARY_IMPL(md_accel, CUDA, m) { m.impl("tp_conv_pair_fwd", md_accel::pair_fwd_autograd); }
