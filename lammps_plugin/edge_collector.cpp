/* ----------------------------------------------------------------------
   md_accel LAMMPS plugin: the edges of a step's graph from LAMMPS' full
   neighbor list, on several host threads (edge_collector.h).
------------------------------------------------------------------------- */

#include "edge_collector.h"

#include "host_threads.h"

#include <algorithm>
#include <cstdlib>

namespace md_accel_lammps {

namespace {

// below this many receivers (edges) per thread the threads' start-up costs more than they save
constexpr int kMinReceiversPerThread = 2048;
constexpr int64_t kMinEdgesPerThread = 65536;

// receivers[begin, end)'s edges into out_src, out_dst, out_vec: sized to the listed pairs (every
// one may be an edge), written by index, then cut to the edges kept
void collect_range(const NeighborSource &list, const int *receivers, int begin, int end, double cutsq,
                   std::vector<int64_t> &out_src, std::vector<int64_t> &out_dst, std::vector<double> &out_vec)
{
  int64_t bound = 0;
  for (int ii = begin; ii < end; ii++) bound += list.numneigh[receivers[ii]];
  out_src.resize(bound);
  out_dst.resize(bound);
  out_vec.resize(3 * bound);
  int64_t *src = out_src.data(), *dst = out_dst.data();
  double *vec = out_vec.data();
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
  out_src.resize(n);
  out_dst.resize(n);
  out_vec.resize(3 * n);
}

}    // namespace

EdgeCollector::EdgeCollector(int threads) : threads_(std::max(1, threads)) {}

void EdgeCollector::collect(const NeighborSource &list, const int *receivers, int count, double cutoff,
                            std::vector<int64_t> &src, std::vector<int64_t> &dst, std::vector<double> &vec)
{
  const double cutsq = cutoff * cutoff;
  const int nthreads = std::max(1, std::min(threads_, count / kMinReceiversPerThread));
  if (nthreads == 1) {
    collect_range(list, receivers, 0, count, cutsq, src, dst, vec);
    return;
  }
  parts_.resize(nthreads);
  run_threads(nthreads, [&](int t) {
    Part &p = parts_[t];
    collect_range(list, receivers, static_cast<int>(int64_t(count) * t / nthreads),
                  static_cast<int>(int64_t(count) * (t + 1) / nthreads), cutsq, p.src, p.dst, p.vec);
  });
  std::vector<int64_t> first(nthreads + 1, 0);
  for (int t = 0; t < nthreads; t++) first[t + 1] = first[t] + static_cast<int64_t>(parts_[t].src.size());
  src.resize(first[nthreads]);
  dst.resize(first[nthreads]);
  vec.resize(3 * first[nthreads]);
  run_threads(nthreads, [&](int t) {
    const Part &p = parts_[t];
    std::copy(p.src.begin(), p.src.end(), src.begin() + first[t]);
    std::copy(p.dst.begin(), p.dst.end(), dst.begin() + first[t]);
    std::copy(p.vec.begin(), p.vec.end(), vec.begin() + 3 * first[t]);
  });
}

void EdgeCollector::sender_nodes(const std::vector<int64_t> &edge_src, int nlocal, int nall,
                                 const int64_t *owner_of, std::vector<int64_t> &node_src,
                                 std::vector<int64_t> &ghosts)
{
  const int64_t nedges = static_cast<int64_t>(edge_src.size());
  const int nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads_, nedges / kMinEdgesPerThread)));
  const int64_t *src = edge_src.data();
  node_src.resize(nedges);
  int64_t *nsrc = node_src.data();
  auto first = [&](int t) { return nedges * t / nthreads; };
  ghosts.clear();
  if (owner_of != nullptr) {
    run_threads(nthreads, [&](int t) {
      for (int64_t e = first(t); e < first(t + 1); e++) nsrc[e] = src[e] < nlocal ? src[e] : owner_of[src[e]];
    });
    return;
  }
  const int nghost = nall - nlocal;
  seen_.resize(nthreads);
  first_seen_.resize(nthreads);
  run_threads(nthreads, [&](int t) {
    std::vector<char> &seen = seen_[t];
    std::vector<int64_t> &order = first_seen_[t];
    seen.assign(nghost, 0);
    order.clear();
    for (int64_t e = first(t); e < first(t + 1); e++) {
      const int64_t g = src[e] - nlocal;
      if (g >= 0 && !seen[g]) {
        seen[g] = 1;
        order.push_back(src[e]);
      }
    }
  });
  node_of_ghost_.assign(nghost, -1);
  for (int t = 0; t < nthreads; t++)
    for (const int64_t j : first_seen_[t])
      if (node_of_ghost_[j - nlocal] < 0) {
        node_of_ghost_[j - nlocal] = nlocal + static_cast<int64_t>(ghosts.size());
        ghosts.push_back(j);
      }
  const int64_t *ghost_node = node_of_ghost_.data();
  run_threads(nthreads, [&](int t) {
    for (int64_t e = first(t); e < first(t + 1); e++) nsrc[e] = src[e] < nlocal ? src[e] : ghost_node[src[e] - nlocal];
  });
}

}    // namespace md_accel_lammps
