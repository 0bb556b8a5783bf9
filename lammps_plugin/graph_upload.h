/* -*- c++ -*- ----------------------------------------------------------
   md_accel LAMMPS plugin: a step's graph onto the model's device.

   species [N], node_src / node_dst [E] (int64) and the edge vectors [E, 3]
   (float64 on the host, the model's dtype on the device). On CUDA they
   are staged into one pinned host buffer on the host threads (the vectors
   converted on the way) and copied in one transfer into fresh device
   memory: the copies from pageable vectors it replaces took 5.9-8.7 ms
   per step for ~38 MB (session 36, 32,000 atoms, H200). On the CPU the
   same staging, into fresh memory that is the result.
------------------------------------------------------------------------- */

#ifndef MD_ACCEL_LAMMPS_GRAPH_UPLOAD_H
#define MD_ACCEL_LAMMPS_GRAPH_UPLOAD_H

#include <torch/script.h>

#include <cstdint>
#include <vector>

namespace md_accel_lammps {

struct GraphOnDevice {
  torch::Tensor species, src, dst;    // int64
  torch::Tensor vec;                  // [E, 3], the model's dtype (no gradient yet)
};

class GraphUpload {
 public:
  explicit GraphUpload(int threads) : threads_(threads < 1 ? 1 : threads) {}
  // The arrays must stay unchanged until the call returns; the result does not alias them.
  GraphOnDevice upload(std::vector<int64_t> &species, std::vector<int64_t> &src, std::vector<int64_t> &dst,
                       std::vector<double> &vec, torch::Device device, torch::Dtype dtype);

 private:
  int threads_;
  torch::Tensor staging_;    // pinned bytes, kept between steps (grown when a graph needs more)
};

}    // namespace md_accel_lammps

#endif
