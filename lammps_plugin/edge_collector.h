/* -*- c++ -*- ----------------------------------------------------------
   md_accel LAMMPS plugin: the edges of a step's graph from LAMMPS' full
   neighbor list, on several host threads.
------------------------------------------------------------------------- */

#ifndef MD_ACCEL_LAMMPS_EDGE_COLLECTOR_H
#define MD_ACCEL_LAMMPS_EDGE_COLLECTOR_H

#include <cstdint>
#include <vector>

namespace md_accel_lammps {

// What collect() reads of LAMMPS (NeighList and Atom fields).
struct NeighborSource {
  const int *const *firstneigh;
  const int *numneigh;
  const double *const *x;
  int neighmask;    // NEIGHMASK: the special-bond bits masked off
};

// Collects, for receivers i in the order given, the neighbors j (in list order) closer than the
// cutoff: the same edges in the same order on any number of threads. The pair loop runs over
// millions of pairs per step (32,000 copper atoms: ~2.4M listed, ~1.4M kept), so each thread
// takes a contiguous range of receivers into its own arrays, which are then copied into place in
// parallel; with one thread it writes the output directly. (Session 36, 16 threads, measured
// slower: counting first then writing in place, and appending with push_back.)
class EdgeCollector {
 public:
  // threads: host_threads() (host_threads.h) by default
  explicit EdgeCollector(int threads);
  int threads() const { return threads_; }
  // into src, dst, vec (3 per edge): the caller's arrays, kept between steps for their capacity
  void collect(const NeighborSource &list, const int *receivers, int count, double cutoff,
               std::vector<int64_t> &src, std::vector<int64_t> &dst, std::vector<double> &vec);

  // The graph node of each edge's sender edge_src[e] (node_src), for graphs whose first nlocal nodes are the
  // owned atoms (atom i = node i). A ghost sender j (j >= nlocal, j < nall) is its owner's node
  // owner_of[j] where owner_of is given (comm none), else a node of its own, nlocal + k, the
  // ghosts numbered in the order of their first edge and listed in `ghosts`. The same numbering
  // on any number of threads: each thread lists the ghosts in its range of edges in order of
  // first sight, and the lists are merged in range order.
  void sender_nodes(const std::vector<int64_t> &edge_src, int nlocal, int nall, const int64_t *owner_of,
                    std::vector<int64_t> &node_src, std::vector<int64_t> &ghosts);

 private:
  int threads_;
  // per thread: its edges j -> i (LAMMPS atom indices, x[j] - x[i]), kept between steps for their capacity
  struct Part {
    std::vector<int64_t> src, dst;
    std::vector<double> vec;
  };
  std::vector<Part> parts_;
  std::vector<std::vector<char>> seen_;             // sender_nodes: per thread, ghosts seen
  std::vector<std::vector<int64_t>> first_seen_;    // sender_nodes: per thread, in order of first sight
  std::vector<int64_t> node_of_ghost_;              // sender_nodes: ghost j -> node (j - nlocal), or -1
};

}    // namespace md_accel_lammps

#endif
