/* -*- c++ -*- ----------------------------------------------------------
   md_accel pair style: wall time per phase of an evaluation, for finding
   where a step's time goes (MD_ACCEL_LAMMPS_TIMING=1). Off by default:
   then lap() costs one branch. On, each lap first waits for the device
   (torch::cuda::synchronize of the rank's GPU), so device work is charged
   to the phase that launched it; that wait slows the step slightly.
------------------------------------------------------------------------- */

#ifndef LMP_MD_ACCEL_PHASE_TIMER_H
#define LMP_MD_ACCEL_PHASE_TIMER_H

#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace md_accel_lammps {

class PhaseTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // cuda_device: the GPU to wait for (-1: none, the model runs on the CPU)
  void enable(bool on, int cuda_device)
  {
    on_ = on;
    cuda_device_ = cuda_device;
  }
  bool enabled() const { return on_; }

  // a new evaluation starts now
  void start()
  {
    if (!on_) return;
    wait();
    last_ = Clock::now();
    steps_++;
  }

  // the time since the last lap (or start) belongs to phase `name`
  void lap(const char *name)
  {
    if (!on_) return;
    wait();
    const auto now = Clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    for (auto &p : phases_)
      if (p.first == name) {
        p.second += s;
        return;
      }
    phases_.emplace_back(name, s);
  }

  // one line: ms per evaluation by phase, in the order first seen
  std::string summary() const
  {
    std::string out;
    double total = 0.0;
    for (const auto &p : phases_) total += p.second;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%ld evaluations, %.1f ms each:", steps_,
                  steps_ ? 1e3 * total / steps_ : 0.0);
    out += buf;
    for (const auto &p : phases_) {
      std::snprintf(buf, sizeof(buf), " %s %.1f", p.first.c_str(), steps_ ? 1e3 * p.second / steps_ : 0.0);
      out += buf;
    }
    return out;
  }

  long steps() const { return steps_; }

 private:
  void wait() const
  {
    if (cuda_device_ >= 0) torch::cuda::synchronize(cuda_device_);
  }

  bool on_ = false;
  int cuda_device_ = -1;
  long steps_ = 0;
  Clock::time_point last_;
  std::vector<std::pair<std::string, double>> phases_;
};

}    // namespace md_accel_lammps

#endif
