#pragma once
// Marks, on the calling thread, a final backward of the plain conv op: one whose results autograd will not
// differentiate again (no create_graph), ops.cpp: tp_conv_fwd's first-order backward, or tp_conv_bwd's backward (the
// double backward). Such a backward is the last and widest step of its pass, so its per-edge grad_x rows set the
// pass's peak; with the rows mode "auto" (the default, tp_conv_cuda.cpp) they go into grad_w's free columns there
// instead of a scratch buffer. A backward under create_graph keeps the scratch: the double backward that follows
// holds more memory at once, so bounding the first one's rows would cost time and save no peak.
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

}  // namespace md_accel
