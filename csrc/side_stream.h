// A second CUDA stream per device, beside the caller's, for work that may overlap the caller's next kernel (the
// per-sender sums of one receiver range while the next range's per-edge kernel runs: _codegen.py, Tuning.gx_chunks),
// with events to order the two. Host code only; each generated library that includes it has its own.
#pragma once
#include <cuda_runtime_api.h>
#include <mutex>

namespace md_accel {

struct SideStream {
  static constexpr int kEvents = 17;  // a launch's forks (at most kEvents - 1) and its join
  cudaStream_t stream = nullptr;
  cudaEvent_t ev[kEvents] = {};
  std::mutex in_use;  // held by a launch from its first fork to its join: the events are reused
};

// The current device's side stream, made at first use (non-blocking, so the legacy default stream does not order
// it; events without timing). *out stays null on an error, whose message is returned.
inline const char* side_stream(SideStream** out) {
  constexpr int kDevices = 64;
  static SideStream sides[kDevices];
  static std::once_flag made[kDevices];
  static const char* errors[kDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kDevices) {
    cudaGetLastError();  // clear only this query's error
    return "side stream: no current device";
  }
  std::call_once(made[dev], [dev] {
    SideStream& s = sides[dev];
    if (cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) != cudaSuccess) {
      errors[dev] = "side stream: cudaStreamCreateWithFlags failed";
      return;
    }
    for (cudaEvent_t& e : s.ev)
      if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
        errors[dev] = "side stream: cudaEventCreateWithFlags failed";
        return;
      }
  });
  if (errors[dev] != nullptr) {
    cudaGetLastError();
    return errors[dev];
  }
  *out = &sides[dev];
  return nullptr;
}

// `to` waits for the work `from` has been given so far (through event ev).
inline bool stream_after(cudaStream_t to, cudaStream_t from, cudaEvent_t ev) {
  return cudaEventRecord(ev, from) == cudaSuccess && cudaStreamWaitEvent(to, ev, 0) == cudaSuccess;
}

}  // namespace md_accel
