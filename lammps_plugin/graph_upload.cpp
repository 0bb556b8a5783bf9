/* ----------------------------------------------------------------------
   md_accel LAMMPS plugin: a step's graph onto the model's device
   (graph_upload.h)
------------------------------------------------------------------------- */

#include "graph_upload.h"

#include "host_threads.h"

#include <algorithm>
#include <cstring>

namespace md_accel_lammps {

namespace {

template <typename T>
void convert(const double *from, T *to, int64_t begin, int64_t end)
{
  for (int64_t k = begin; k < end; k++) to[k] = static_cast<T>(from[k]);
}

}    // namespace

GraphOnDevice GraphUpload::upload(std::vector<int64_t> &species, std::vector<int64_t> &src,
                                  std::vector<int64_t> &dst, std::vector<double> &vec, torch::Device device,
                                  torch::Dtype dtype)
{
  const int64_t nodes = static_cast<int64_t>(species.size()), edges = static_cast<int64_t>(src.size());
  TORCH_CHECK(dtype == torch::kFloat32 || dtype == torch::kFloat64, "md_accel: models in float32 or float64 only");
  // bytes: [species | src | dst | vec (dtype)], every part at a multiple of 8
  const int64_t elem = dtype == torch::kFloat32 ? 4 : 8;
  const int64_t at_src = 8 * nodes, at_dst = at_src + 8 * edges, at_vec = at_dst + 8 * edges;
  const int64_t bytes = at_vec + (3 * edges * elem + 7) / 8 * 8;
  // CUDA: the pinned staging buffer; CPU: fresh memory, which is then the result itself
  const auto bytes_on = torch::TensorOptions().dtype(torch::kUInt8);
  torch::Tensor host_bytes;
  if (device.is_cuda()) {
    if (!staging_.defined() || staging_.numel() < bytes)
      staging_ = torch::empty({bytes + bytes / 4}, bytes_on.pinned_memory(true));
    host_bytes = staging_.narrow(0, 0, bytes);
  } else {
    host_bytes = torch::empty({bytes}, bytes_on);
  }
  char *host = static_cast<char *>(host_bytes.data_ptr());

  // each thread fills its share of every part
  const int nthreads = copy_threads(threads_, bytes);
  run_threads(nthreads, [&](int t) {
    int64_t b, e;
    thread_share(nodes, t, nthreads, b, e);
    if (e > b) std::memcpy(host + 8 * b, species.data() + b, 8 * (e - b));
    thread_share(edges, t, nthreads, b, e);
    if (e > b) {
      std::memcpy(host + at_src + 8 * b, src.data() + b, 8 * (e - b));
      std::memcpy(host + at_dst + 8 * b, dst.data() + b, 8 * (e - b));
    }
    thread_share(3 * edges, t, nthreads, b, e);
    if (dtype == torch::kFloat32)
      convert(vec.data(), reinterpret_cast<float *>(host + at_vec), b, e);
    else
      convert(vec.data(), reinterpret_cast<double *>(host + at_vec), b, e);
  });

  // fresh device memory each step: nothing the model may keep from the last step is overwritten
  torch::Tensor on_device = host_bytes;
  if (device.is_cuda()) {
    on_device = torch::empty({bytes}, bytes_on.device(device));
    on_device.copy_(host_bytes);
  }
  auto part = [&](int64_t at, int64_t count, torch::Dtype type, int64_t size) {
    return on_device.narrow(0, at, count * size).view(type);
  };
  // detached: leaves of their own (the caller asks for the vectors' gradient)
  return {part(0, nodes, torch::kInt64, 8).detach(), part(at_src, edges, torch::kInt64, 8).detach(),
          part(at_dst, edges, torch::kInt64, 8).detach(),
          part(at_vec, 3 * edges, dtype, elem).view({edges, 3}).detach()};
}

}    // namespace md_accel_lammps
