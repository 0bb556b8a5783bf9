#pragma once
// Marks, on the calling thread, the plain op's first-order backward: tp_conv_fwd's autograd backward when no graph
// is built over its result (no create_graph), ops.cpp. There the per-edge grad_x rows alone set the backward's peak,
// and with the rows mode "auto" (the default, tp_conv_cuda.cpp) they go into grad_w's free columns instead of a
// scratch buffer. A backward that will be differentiated again keeps the scratch rows: the double backward that
// follows holds its own rows anyway, so bounding the first ones would cost time and save no peak.
namespace md_accel {

class FirstOrderBackward {
 public:
  explicit FirstOrderBackward(bool active);
  ~FirstOrderBackward();
  FirstOrderBackward(const FirstOrderBackward&) = delete;
  FirstOrderBackward& operator=(const FirstOrderBackward&) = delete;
  // Whether the calling thread is inside such a backward.
  static bool active();

 private:
  bool previous_;
};

}  // namespace md_accel
