/* ----------------------------------------------------------------------
   md_accel LAMMPS plugin: the edges of a step's graph from LAMMPS' full
   neighbor list, on several host threads (edge_collector.h).
------------------------------------------------------------------------- */

#include "edge_collector.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <system_error>
#include <thread>

namespace md_accel_lammps {

namespace {

// below this many receivers per thread the threads' start-up costs more than they save
constexpr int kMinReceiversPerThread = 2048;

// receivers[begin, end)'s edges into `out`: sized to the listed pairs (every one may be an
// edge), written by index, then cut to the edges kept
void collect_range(const NeighborSource &list, const int *receivers, int begin, int end,
                   double cutsq, EdgeArrays &out)
{
  int64_t bound = 0;
  for (int ii = begin; ii < end; ii++) bound += list.numneigh[receivers[ii]];
  out.src.resize(bound);
  out.dst.resize(bound);
  out.vec.resize(3 * bound);
  int64_t *src = out.src.data(), *dst = out.dst.data();
  double *vec = out.vec.data();
  const double *x0 = bound > 0 ? list.x[0] : nullptr;    // LAMMPS' 2-d arrays are one block: x[j] == x0 + 3 j
  int64_t n = 0;
  for (int ii = begin; ii < end; ii++) {
    const int i = receivers[ii];
    const double xi = list.x[i][0], yi = list.x[i][1], zi = list.x[i][2];
    const int *jlist = list.firstneigh[i];
    const int jnum = list.numneigh[i];
    for (int jj = 0; jj < jnum; jj++) {
      const int j = jlist[jj] & list.neighmask;
      const double *xj = x0 + 3 * j;
      const double dx = xj[0] - xi;
      const double dy = xj[1] - yi;
      const double dz = xj[2] - zi;
      if (dx * dx + dy * dy + dz * dz >= cutsq) continue;
      src[n] = j;
      dst[n] = i;
      vec[3 * n] = dx;
      vec[3 * n + 1] = dy;
      vec[3 * n + 2] = dz;
      n++;
    }
  }
  out.src.resize(n);
  out.dst.resize(n);
  out.vec.resize(3 * n);
}

// f(t) for t in [0, n): t = 0 on the calling thread, the others on their own (on the calling
// thread too where the system refuses a thread: the same work, later)
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

}    // namespace

EdgeCollector::EdgeCollector(int threads) : threads_(std::max(1, threads)) {}

void EdgeCollector::collect(const NeighborSource &list, const int *receivers, int count,
                            double cutoff, EdgeArrays &out)
{
  const double cutsq = cutoff * cutoff;
  const int nthreads = std::max(1, std::min(threads_, count / kMinReceiversPerThread));
  if (nthreads == 1) {
    collect_range(list, receivers, 0, count, cutsq, out);
    return;
  }
  parts_.resize(nthreads);
  run_threads(nthreads, [&](int t) {
    collect_range(list, receivers, static_cast<int>(int64_t(count) * t / nthreads),
                  static_cast<int>(int64_t(count) * (t + 1) / nthreads), cutsq, parts_[t]);
  });
  std::vector<int64_t> first(nthreads + 1, 0);
  for (int t = 0; t < nthreads; t++) first[t + 1] = first[t] + static_cast<int64_t>(parts_[t].src.size());
  out.src.resize(first[nthreads]);
  out.dst.resize(first[nthreads]);
  out.vec.resize(3 * first[nthreads]);
  run_threads(nthreads, [&](int t) {
    const EdgeArrays &p = parts_[t];
    std::copy(p.src.begin(), p.src.end(), out.src.begin() + first[t]);
    std::copy(p.dst.begin(), p.dst.end(), out.dst.begin() + first[t]);
    std::copy(p.vec.begin(), p.vec.end(), out.vec.begin() + 3 * first[t]);
  });
}

int host_threads()
{
  int threads = 1;
  if (const char *env = std::getenv("OMP_NUM_THREADS")) {
    char *end = nullptr;
    const long v = std::strtol(env, &end, 10);    // "16" or "16,4" (nested levels): the first
    if (end != env && v > 0) threads = static_cast<int>(std::min<long>(v, 1024));
  }
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) threads = std::min(threads, std::max(1, CPU_COUNT(&cpus)));
  return threads;
}

}    // namespace md_accel_lammps
