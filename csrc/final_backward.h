#pragma once
// Marks, on the calling thread, a final backward of the plain conv op: one whose results autograd will not
// differentiate again (no create_graph), ops.cpp: tp_conv_fwd's first-order backward, or tp_conv_bwd's backward (the
// double backward). Such a backward is the last and widest step of its pass, so its per-edge grad_x rows set the
// pass's peak; with the rows mode "auto" (the default, tp_conv_cuda.cpp) they go into grad_w's free columns there
// instead of a scratch buffer (not in a double backward that writes its grad_w into a donated gg_w: DonatedGgW). A
// backward under create_graph keeps the scratch: the double backward that follows holds more memory at once, so
// bounding the first one's rows would cost time and save no peak.
#include <ATen/core/Tensor.h>

namespace md_accel {

class FinalBackward {
 public:
  explicit FinalBackward(bool active);
  ~FinalBackward();
  FinalBackward(const FinalBackward&) = delete;
  FinalBackward& operator=(const FinalBackward&) = delete;
  // Whether the calling thread is inside such a backward.
  static bool active();

 private:
  bool previous_;
};

// Marks, on the calling thread, a gradient to the weights (gg_w) that a final double backward's tp_conv_dbwd call
// may overwrite with its own grad_w (tp_conv_cuda.cpp, where the kernels allow it: TPSpec::dbwd_in_gg_w): the
// backward (ops.cpp, fused_ops.cpp) holds the only reference to gg_w's memory and drops it after the call, so
// the pass's peak holds one E x w buffer less. The op matches the very tensor (its TensorImpl), so no other call
// sees the mark. set_dbwd_in_gg_w(false) (MD_ACCEL_DBWD_IN_GG_W=0) turns the overwrite off.
class DonatedGgW {
 public:
  // Marks gg_w where final (the backward runs without create_graph) and gg_w is solely owned (sole_owner: pass
  // the caller's own handle, not a copy, which would count as a second owner).
  DonatedGgW(const at::Tensor& gg_w, bool final);
  ~DonatedGgW();
  DonatedGgW(const DonatedGgW&) = delete;
  DonatedGgW& operator=(const DonatedGgW&) = delete;
  // Whether t is the marked tensor.
  static bool is(const at::Tensor& t);

 private:
  // Whether t is a dense tensor whose memory nothing else references: this handle is the only one to its
  // TensorImpl (besides its idle Python wrapper), no other tensor (a view, a base) shares its storage. Weak
  // references are not counted: a holder of one (none in autograd's own bookkeeping) could lock it afterwards and
  // find grad_w there.
  static bool sole_owner(const at::Tensor& t);

  const void* previous_;
};

}  // namespace md_accel
