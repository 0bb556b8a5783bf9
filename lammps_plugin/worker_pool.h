/* -*- c++ -*- ----------------------------------------------------------
   md_accel LAMMPS plugin: host threads that stay up between steps.

   The plugin's host loops (edge_collector.h) run a few parallel passes per
   step; starting fresh threads for each pass costs tens of microseconds per
   thread, so the workers are started once and wait between passes.
------------------------------------------------------------------------- */

#ifndef MD_ACCEL_LAMMPS_WORKER_POOL_H
#define MD_ACCEL_LAMMPS_WORKER_POOL_H

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace md_accel_lammps {

class WorkerPool {
 public:
  explicit WorkerPool(int threads) : threads_(threads < 1 ? 1 : threads) {}
  ~WorkerPool();
  WorkerPool(const WorkerPool &) = delete;
  WorkerPool &operator=(const WorkerPool &) = delete;

  int threads() const { return threads_; }
  // f(t) for t in [0, n), n <= threads(): t = 0 on the calling thread, the others on the workers
  // (started at the first call; where the system refuses one, its share runs on the caller, later)
  void run(int n, const std::function<void(int)> &f);

 private:
  void work(int t);

  int threads_;
  bool started_ = false;
  std::vector<std::thread> workers_;    // worker k runs share k + 1
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  const std::function<void(int)> *job_ = nullptr;
  int shares_ = 0;          // n of the current run
  int busy_ = 0;            // workers that have not finished the current run
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}    // namespace md_accel_lammps

#endif
