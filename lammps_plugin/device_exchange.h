/* -*- c++ -*- ----------------------------------------------------------
   md_accel pair style, comm layer: the ghost rows exchanged between the
   GPUs of one host without passing through host memory (exchange device).

   Every rank holds one device allocation shared with the other ranks of
   the host through CUDA IPC: two regions for its owned feature rows and two
   for its ghost nodes' gradient rows (layers alternate between the two, so
   one barrier per exchange suffices: a rank writes a region only after
   every rank has passed the barrier of the exchange in between, which it
   enters with its reads of the region done).
     forward: each rank copies its owned rows into its region; barrier;
       each rank gathers its ghost nodes' rows from their owners' regions
       (peer memory read over NVLink / PCIe by an index_select on its GPU).
     reverse: each rank copies its ghost nodes' gradients into its region;
       barrier; each owner gathers every copy of its atoms' gradients from
       the ranks that hold them and sums them in a fixed order (sorted by
       owned row, then rank, then position): bit-reproducible.
   The ghost nodes and their owners change every step (the graph's ghosts
   are the senders within the cutoff); setup() takes them and trades the
   lists the owners need (MPI_Alltoallv). Allocations grow only; a rank
   that grows its allocation shares the new one at the next setup().
------------------------------------------------------------------------- */

#ifndef LMP_MD_ACCEL_DEVICE_EXCHANGE_H
#define LMP_MD_ACCEL_DEVICE_EXCHANGE_H

#include <mpi.h>
#include <torch/script.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace md_accel_lammps {

class DeviceExchange {
 public:
  // Collective over `world`. nullptr on every rank (and `why` set) when the ranks are not all on
  // one host or CUDA IPC between their GPUs fails; the caller then exchanges through the host.
  static std::unique_ptr<DeviceExchange> create(MPI_Comm world, torch::Device device, torch::Dtype dtype,
                                                int64_t max_width, std::string &why);
  ~DeviceExchange();
  DeviceExchange(const DeviceExchange &) = delete;
  DeviceExchange &operator=(const DeviceExchange &) = delete;

  // Collective, once per evaluation: ghost node g (0 .. size-1) is row owner_index[g] of rank
  // owner_rank[g]; `nlocal` owned rows; `max_ghosts` bounds the ghost nodes until the next call
  // with a larger bound (LAMMPS' ghost atom count).
  void setup(int64_t nlocal, int64_t max_ghosts, const std::vector<int> &owner_rank,
             const std::vector<int64_t> &owner_index);
  // h_owned [nlocal, width] (undefined on a rank without atoms) -> the ghost nodes' rows
  // [ghosts, width]. Collective.
  torch::Tensor forward(const torch::Tensor &h_owned, int64_t width, int layer);
  // g_ghost [ghosts, width] -> the sums of every ghost copy's gradient per owned row
  // [nlocal, width]. Collective.
  torch::Tensor reverse(const torch::Tensor &g_ghost, int64_t width, int layer);

 private:
  DeviceExchange(MPI_Comm world, torch::Device device, torch::Dtype dtype, int64_t max_width);
  void reserve(int64_t owned_rows, int64_t ghost_rows);   // grows this rank's allocation
  void share();                                            // collective: handles to every rank
  // region `which` (0, 1: owned feature rows; 2, 3: ghost gradient rows) of rank r as [rows, width]
  torch::Tensor region(int rank, int which, int64_t width) const;
  void wait_for_all() const;

  MPI_Comm world_;
  int me_, nprocs_;
  torch::Device device_;
  torch::Dtype dtype_;
  int64_t max_width_, elem_;
  // this rank's allocation and, per rank, its base pointer (own or opened) and capacities
  void *base_ = nullptr;
  int64_t cap_owned_ = 0, cap_ghost_ = 0;
  int64_t generation_ = 0;
  std::vector<void *> peer_base_;
  std::vector<int64_t> peer_owned_, peer_ghost_, peer_generation_;
  // forward: per owner rank, the owned rows to read and the ghost positions they fill
  std::vector<torch::Tensor> pull_rows_, pull_into_;
  std::vector<int64_t> pull_count_;
  // reverse: per rank, the ghost positions of its copies of my atoms; then the fixed-order sum
  std::vector<torch::Tensor> copies_at_;
  torch::Tensor order_, offsets_, targets_;
  int64_t nlocal_ = 0, nghost_ = 0;
};

}    // namespace md_accel_lammps

#endif
