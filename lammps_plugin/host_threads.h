/* -*- c++ -*- ----------------------------------------------------------
   md_accel LAMMPS plugin: the host threads of the plugin's own loops (the
   graph from LAMMPS' list, the upload's staging).
------------------------------------------------------------------------- */

#ifndef MD_ACCEL_LAMMPS_HOST_THREADS_H
#define MD_ACCEL_LAMMPS_HOST_THREADS_H

#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

namespace md_accel_lammps {

// Host threads per MPI rank for the plugin's own loops: OMP_NUM_THREADS (as LAMMPS' OPENMP
// package reads it; 1 when unset or not a number), at most the CPUs this process may run on.
int host_threads();

// Threads for filling `bytes` of host memory: at most `threads`, at least 1 MiB each (below that a
// thread's start-up costs more than it saves).
int copy_threads(int threads, int64_t bytes);

// Thread t's share [begin, end) of n items split over nthreads.
inline void thread_share(int64_t n, int t, int nthreads, int64_t &begin, int64_t &end)
{
  begin = n * t / nthreads;
  end = n * (t + 1) / nthreads;
}

// f(t) for t in [0, n): t = 0 on the calling thread, the others on threads of their own, started
// for this call (on the calling thread too where the system refuses a thread: the same work,
// later). Session 36 measured workers kept up between calls 1.2-1.7x slower on the edge loop.
template <typename F>
void run_threads(int n, F &&f)
{
  std::vector<std::thread> workers;
  workers.reserve(n > 0 ? n - 1 : 0);
  int started = 1;
  try {
    for (; started < n; started++) workers.emplace_back(f, started);
  } catch (const std::system_error &) {
  }
  for (int t = started; t < n; t++) f(t);
  f(0);
  for (auto &w : workers) w.join();
}

}    // namespace md_accel_lammps

#endif
