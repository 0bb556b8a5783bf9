/* -*- c++ -*- ----------------------------------------------------------
   md_accel LAMMPS plugin: a step's forces and virial summed per graph node
   on the model's device, from g_e = dE/d(edge_vec_e), edge_vec_e =
   x[src] - x[dst]:
     F[dst] += g_e, F[src] -= g_e, W -= edge_vec_e (x) g_e
   (per-node virial: half of each edge's term to each of its two nodes).

   The host then adds one row per node into LAMMPS' arrays instead of
   scattering every edge (32,000 copper atoms: 1.34M edges, 32k-45k nodes),
   and only those rows cross to the host. The sums run in a fixed order
   (an edge's terms in edge order within its receiver, then within its
   sender after a stable sort by sender), so they are the same bits run
   after run and on any number of host threads.
------------------------------------------------------------------------- */

#ifndef MD_ACCEL_LAMMPS_NODE_SUMS_H
#define MD_ACCEL_LAMMPS_NODE_SUMS_H

#include <torch/script.h>

#include <cstdint>

namespace md_accel_lammps {

// A step's edge gradients as the evaluation left them, on the model's device (none: grad undefined).
struct EdgeGradients {
  torch::Tensor grad;       // [E, 3] dE/d(edge_vec), the model's dtype or float64
  torch::Tensor src, dst;   // [E] graph node indices (int64)
  torch::Tensor vec;        // [E, 3] the edge vectors the model read (its dtype)
  bool dst_sorted = true;   // the edges come in receiver order
  int64_t nodes = 0;        // graph nodes
};

struct NodeSums {
  // [nodes, 3]: each node's force; [nodes, 9] with the per-node virial (xx yy zz xy xz yz) after it.
  // float64, CPU; rows may be a view of wider rows (read them with stride(0)).
  torch::Tensor rows;
  double virial[6] = {0, 0, 0, 0, 0, 0};    // sum over the edges of -edge_vec (x) g_e
};

// vec64: the edge vectors [E, 3] in float64 on the device (only read for a virial).
NodeSums sum_per_node(const EdgeGradients &edges, const torch::Tensor &vec64, bool global_virial,
                      bool node_virial);

}    // namespace md_accel_lammps

#endif
