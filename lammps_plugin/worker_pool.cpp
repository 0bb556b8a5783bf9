/* ----------------------------------------------------------------------
   md_accel LAMMPS plugin: host threads that stay up between steps
   (worker_pool.h)
------------------------------------------------------------------------- */

#include "worker_pool.h"

#include <system_error>

namespace md_accel_lammps {

WorkerPool::~WorkerPool()
{
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto &w : workers_) w.join();
}

void WorkerPool::work(int t)
{
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)> *job;
    bool mine;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      mine = t < shares_;
    }
    if (mine) (*job)(t);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--busy_ == 0) finished_.notify_one();
    }
  }
}

void WorkerPool::run(int n, const std::function<void(int)> &f)
{
  if (!started_) {
    started_ = true;
    try {
      for (int t = 1; t < threads_; t++) workers_.emplace_back(&WorkerPool::work, this, t);
    } catch (const std::system_error &) {
    }
  }
  const int on_workers = static_cast<int>(workers_.size());
  if (n > 1 && on_workers > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &f;
    shares_ = n;
    busy_ = on_workers;
    generation_++;
  }
  if (n > 1 && on_workers > 0) wake_.notify_all();
  for (int t = on_workers + 1; t < n; t++) f(t);    // shares no worker took
  if (n > 0) f(0);
  if (n > 1 && on_workers > 0) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return busy_ == 0; });
  }
}

}    // namespace md_accel_lammps
