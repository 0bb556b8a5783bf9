/* ----------------------------------------------------------------------
   md_accel pair style: comm layer's exchange between the GPUs of one host
   (device_exchange.h has the scheme)
------------------------------------------------------------------------- */

#include "device_exchange.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace md_accel_lammps {

namespace {

void check(cudaError_t status, const char *what)
{
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

torch::Tensor to_device(const std::vector<int64_t> &v, torch::Device device)
{
  return torch::tensor(v, torch::TensorOptions().dtype(torch::kInt64)).to(device);
}

// what each rank tells the others in share()
struct Shared {
  cudaIpcMemHandle_t handle;
  int64_t owned, ghost, generation;
};

}    // namespace

DeviceExchange::DeviceExchange(MPI_Comm world, torch::Device device, torch::Dtype dtype, int64_t max_width) :
    world_(world), device_(device), dtype_(dtype), max_width_(max_width),
    elem_(static_cast<int64_t>(c10::elementSize(dtype)))
{
  MPI_Comm_rank(world_, &me_);
  MPI_Comm_size(world_, &nprocs_);
  peer_base_.assign(nprocs_, nullptr);
  peer_owned_.assign(nprocs_, 0);
  peer_ghost_.assign(nprocs_, 0);
  peer_generation_.assign(nprocs_, 0);
  pull_rows_.resize(nprocs_);
  pull_into_.resize(nprocs_);
  pull_count_.assign(nprocs_, 0);
  copies_at_.resize(nprocs_);
}

std::unique_ptr<DeviceExchange> DeviceExchange::create(MPI_Comm world, torch::Device device, torch::Dtype dtype,
                                                       int64_t max_width, std::string &why)
{
  int nprocs = 0, on_host = 0;
  MPI_Comm_size(world, &nprocs);
  MPI_Comm host;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
  MPI_Comm_size(host, &on_host);
  MPI_Comm_free(&host);
  int together = on_host == nprocs ? 1 : 0, all_together = 0;
  MPI_Allreduce(&together, &all_together, 1, MPI_INT, MPI_MIN, world);
  if (!all_together) {
    why = "the ranks are on several hosts";
    return nullptr;
  }
  int cuda = device.is_cuda() ? 1 : 0, all_cuda = 0;
  MPI_Allreduce(&cuda, &all_cuda, 1, MPI_INT, MPI_MIN, world);
  if (!all_cuda) {
    why = "the model is not on CUDA";
    return nullptr;
  }
  std::unique_ptr<DeviceExchange> ex(new DeviceExchange(world, device, dtype, max_width));
  try {
    ex->share();   // collective; throws on every rank if any rank cannot open another's memory
  } catch (const std::exception &e) {
    why = e.what();
    return nullptr;
  }
  return ex;
}

DeviceExchange::~DeviceExchange()
{
  const c10::cuda::CUDAGuard guard(device_);
  for (int r = 0; r < nprocs_; r++)
    if (r != me_ && peer_base_[r] != nullptr) cudaIpcCloseMemHandle(peer_base_[r]);
  if (base_ != nullptr) cudaFree(base_);
}

void DeviceExchange::reserve(int64_t owned_rows, int64_t ghost_rows)
{
  if (owned_rows <= cap_owned_ && ghost_rows <= cap_ghost_ && base_ != nullptr) return;
  const c10::cuda::CUDAGuard guard(device_);
  const int64_t owned = std::max(cap_owned_, owned_rows + owned_rows / 4 + 16);
  const int64_t ghost = std::max(cap_ghost_, ghost_rows + ghost_rows / 4 + 16);
  void *fresh = nullptr;
  check(cudaMalloc(&fresh, static_cast<size_t>(2 * (owned + ghost) * max_width_ * elem_)),
        "md_accel device exchange: cudaMalloc");
  if (base_ != nullptr) check(cudaFree(base_), "md_accel device exchange: cudaFree");
  base_ = fresh;
  cap_owned_ = owned;
  cap_ghost_ = ghost;
  generation_++;
}

void DeviceExchange::share()
{
  const c10::cuda::CUDAGuard guard(device_);
  std::string error;
  Shared mine{};
  try {
    reserve(1, 1);
    check(cudaIpcGetMemHandle(&mine.handle, base_), "cudaIpcGetMemHandle");
    mine.owned = cap_owned_;
    mine.ghost = cap_ghost_;
    mine.generation = generation_;
  } catch (const std::exception &e) {
    error = e.what();
    mine.generation = -1;
  }
  std::vector<Shared> all(nprocs_);
  MPI_Allgather(&mine, sizeof(Shared), MPI_BYTE, all.data(), sizeof(Shared), MPI_BYTE, world_);
  for (int r = 0; r < nprocs_ && error.empty(); r++) {
    if (all[r].generation < 0) {
      error = "rank " + std::to_string(r) + " could not share its device memory";
    } else if (r != me_ && all[r].generation != peer_generation_[r]) {
      if (peer_base_[r] != nullptr) cudaIpcCloseMemHandle(peer_base_[r]);
      peer_base_[r] = nullptr;
      const cudaError_t status =
          cudaIpcOpenMemHandle(&peer_base_[r], all[r].handle, cudaIpcMemLazyEnablePeerAccess);
      if (status != cudaSuccess) {
        peer_base_[r] = nullptr;
        error = "cudaIpcOpenMemHandle of rank " + std::to_string(r) + "'s memory on rank " +
            std::to_string(me_) + ": " + cudaGetErrorString(status);
      }
    }
    peer_owned_[r] = all[r].owned;
    peer_ghost_[r] = all[r].ghost;
    if (error.empty()) peer_generation_[r] = all[r].generation;
  }
  int ok = error.empty() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world_);
  if (!all_ok)
    throw std::runtime_error(error.empty() ? "another rank could not map this rank's device memory" : error);
}

torch::Tensor DeviceExchange::region(int rank, int which, int64_t width) const
{
  const bool mine = rank == me_;
  const int64_t owned = mine ? cap_owned_ : peer_owned_[rank];
  const int64_t ghost = mine ? cap_ghost_ : peer_ghost_[rank];
  const int64_t starts[4] = {0, owned, 2 * owned, 2 * owned + ghost};
  char *base = static_cast<char *>(mine ? base_ : peer_base_[rank]);
  const int64_t rows = which < 2 ? owned : ghost;
  return torch::from_blob(base + starts[which] * max_width_ * elem_, {rows, width},
                          torch::TensorOptions().dtype(dtype_).device(device_));
}

void DeviceExchange::wait_for_all() const
{
  c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
  MPI_Barrier(world_);
}

void DeviceExchange::setup(int64_t nlocal, int64_t max_ghosts, const std::vector<int> &owner_rank,
                           const std::vector<int64_t> &owner_index)
{
  const c10::cuda::CUDAGuard guard(device_);
  // every rank is past its last evaluation's reads (its forces were copied to the host) before any
  // rank replaces its allocation
  MPI_Barrier(world_);
  reserve(nlocal, std::max<int64_t>(max_ghosts, static_cast<int64_t>(owner_rank.size())));
  share();
  nlocal_ = nlocal;
  nghost_ = static_cast<int64_t>(owner_rank.size());

  // forward: my ghost node g reads row owner_index[g] of rank owner_rank[g]
  std::vector<std::vector<int64_t>> rows(nprocs_), into(nprocs_);
  for (int64_t g = 0; g < nghost_; g++) {
    rows[owner_rank[g]].push_back(owner_index[g]);
    into[owner_rank[g]].push_back(g);
  }
  for (int r = 0; r < nprocs_; r++) {
    pull_count_[r] = static_cast<int64_t>(rows[r].size());
    pull_rows_[r] = pull_count_[r] ? to_device(rows[r], device_) : torch::Tensor();
    pull_into_[r] = pull_count_[r] ? to_device(into[r], device_) : torch::Tensor();
  }

  // reverse: each owner learns where its atoms' copies sit: (owned row, ghost position) pairs
  std::vector<int> send_counts(nprocs_), recv_counts(nprocs_), send_at(nprocs_), recv_at(nprocs_);
  std::vector<int64_t> send;
  send.reserve(2 * nghost_);
  for (int r = 0; r < nprocs_; r++) {
    send_at[r] = static_cast<int>(send.size());
    for (size_t k = 0; k < rows[r].size(); k++) {
      send.push_back(rows[r][k]);
      send.push_back(into[r][k]);
    }
    send_counts[r] = static_cast<int>(send.size()) - send_at[r];
  }
  MPI_Alltoall(send_counts.data(), 1, MPI_INT, recv_counts.data(), 1, MPI_INT, world_);
  int total = 0;
  for (int r = 0; r < nprocs_; r++) {
    recv_at[r] = total;
    total += recv_counts[r];
  }
  std::vector<int64_t> recv(std::max(total, 1));
  MPI_Alltoallv(send.data(), send_counts.data(), send_at.data(), MPI_INT64_T, recv.data(), recv_counts.data(),
                recv_at.data(), MPI_INT64_T, world_);

  // the copies in rank order, each rank's in its ghost order; summed per owned row in that order
  const int64_t copies = total / 2;
  std::vector<int64_t> target(copies);
  for (int r = 0; r < nprocs_; r++) {
    std::vector<int64_t> at;
    for (int k = recv_at[r]; k < recv_at[r] + recv_counts[r]; k += 2) {
      target[k / 2] = recv[k];
      at.push_back(recv[k + 1]);
    }
    copies_at_[r] = at.empty() ? torch::Tensor() : to_device(at, device_);
  }
  std::vector<int64_t> order(copies);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return target[a] < target[b]; });
  std::vector<int64_t> offsets, targets;
  for (int64_t k = 0; k < copies; k++)
    if (k == 0 || target[order[k]] != target[order[k - 1]]) {
      offsets.push_back(k);
      targets.push_back(target[order[k]]);
    }
  offsets.push_back(copies);
  order_ = to_device(order, device_);
  offsets_ = to_device(offsets, device_);
  targets_ = to_device(targets, device_);
}

torch::Tensor DeviceExchange::forward(const torch::Tensor &h_owned, int64_t width, int layer)
{
  const c10::cuda::CUDAGuard guard(device_);
  const int which = layer % 2;
  if (nlocal_ > 0 && h_owned.defined()) region(me_, which, width).narrow(0, 0, nlocal_).copy_(h_owned);
  wait_for_all();
  torch::Tensor out = torch::empty({nghost_, width}, torch::TensorOptions().dtype(dtype_).device(device_));
  for (int r = 0; r < nprocs_; r++)
    if (pull_count_[r] > 0)
      out.index_copy_(0, pull_into_[r], region(r, which, width).index_select(0, pull_rows_[r]));
  return out;
}

torch::Tensor DeviceExchange::reverse(const torch::Tensor &g_ghost, int64_t width, int layer)
{
  const c10::cuda::CUDAGuard guard(device_);
  const int which = 2 + layer % 2;
  if (nghost_ > 0 && g_ghost.defined()) region(me_, which, width).narrow(0, 0, nghost_).copy_(g_ghost);
  wait_for_all();
  auto options = torch::TensorOptions().dtype(dtype_).device(device_);
  torch::Tensor sums = torch::zeros({nlocal_, width}, options);
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < nprocs_; r++)
    if (copies_at_[r].defined()) parts.push_back(region(r, which, width).index_select(0, copies_at_[r]));
  if (parts.empty()) return sums;
  torch::Tensor copies = torch::cat(parts).index_select(0, order_);
  torch::Tensor per_row = torch::segment_reduce(copies, "sum", {}, {}, offsets_, 0, true);
  sums.index_copy_(0, targets_, per_row);
  return sums;
}

}    // namespace md_accel_lammps
