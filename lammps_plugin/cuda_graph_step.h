/* -*- c++ -*- ----------------------------------------------------------
   md_accel: one energy + gradient evaluation of a model replayed from a
   CUDA graph (pair_style md_accel comm none, on CUDA). Built only where
   torch has CUDA (lammps_plugin/build.py defines MD_ACCEL_CUDA_GRAPH).

   The scheme is md_accel/step.py's (the Python calculator's graphed step):
   the graph of N nodes and E edges is written into static buffers of a
   layout (node and edge capacities on a geometric ladder, so they change
   rarely); padding nodes (species 0) follow the real ones, every padding
   edge is a self-loop on a padding node with the vector (cutoff, 0, 0), and
   padding nodes are left out of the energy, so their edges' gradients are
   exactly zero. A layout serves exactly N nodes and min_edges..capacity
   edges; another count re-lays out and captures again.

   Per step: the host writes species, edges and vectors into pinned
   buffers, one asynchronous upload, the replay, one download of the node
   energies (float64), one wait; dE/d(edge_vec) stays on the device for
   the sums per node (node_sums.h).
------------------------------------------------------------------------- */

#ifndef LMP_MD_ACCEL_CUDA_GRAPH_STEP_H
#define LMP_MD_ACCEL_CUDA_GRAPH_STEP_H

#include "graph_layout.h"
#include "node_sums.h"

#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace at::cuda {
struct CUDAGraph;
}

namespace md_accel_lammps {

class CudaGraphStep {
 public:
  CudaGraphStep(torch::jit::Module model, torch::Device device, torch::Dtype dtype,
                double pad_length, int warmup = 2);
  ~CudaGraphStep();

  // Node energies [N] (float64, CPU) and dE/d(edge_vec) [E, 3] (float64, on the device, with the
  // graph's edges) of the graph (species [N], node indices src / dst [E], vectors [3E]; every
  // node's energy counts); both stay valid until the next call. Re-lays out and captures when
  // the counts do not fit.
  void run(const std::vector<int64_t> &species, const std::vector<int64_t> &src,
           const std::vector<int64_t> &dst, const std::vector<double> &vec,
           torch::Tensor &node_e, EdgeGradients &edges);

  const GraphLayout &layout() const { return layout_; }
  int64_t captures() const { return captures_; }

 private:
  void relayout(int64_t num_nodes, int64_t num_edges);
  void fill(const std::vector<int64_t> &species, const std::vector<int64_t> &src,
            const std::vector<int64_t> &dst, const std::vector<double> &vec);
  void evaluate();    // the captured work: static inputs -> static output
  void capture();
  void release();

  torch::jit::Module model_;
  torch::Device device_;
  torch::Dtype dtype_;
  double pad_length_;
  int warmup_;
  int threads_;    // host threads filling the pinned buffers (host_threads())
  GraphLayout layout_;
  int64_t captures_ = 0;
  c10::Stream stream_;    // a pool stream of the device: warm-up, capture and replay
  // [species n_cap | src e_cap | dst e_cap] (int64), [vec 3 e_cap] (model dtype),
  // [node_e N | grad 3 e_cap] (float64; the host one: node_e only); host ones pinned
  torch::Tensor host_index_, host_vec_, host_out_, dev_index_, dev_vec_, dev_out_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

}    // namespace md_accel_lammps

#endif
