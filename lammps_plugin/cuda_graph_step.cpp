/* ----------------------------------------------------------------------
   md_accel: a model's energy + gradient replayed from a CUDA graph; the
   scheme is described in cuda_graph_step.h.
------------------------------------------------------------------------- */

#include "cuda_graph_step.h"

#include "host_threads.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <map>
#include <mutex>

using namespace md_accel_lammps;

namespace {

// Slots [begin, end) of the padded vectors: the real edges' (num_edges of them), then padding ones.
template <typename T>
void fill_vectors(T *out, const std::vector<double> &vec, int64_t num_edges, int64_t begin, int64_t end,
                  double pad_length)
{
  for (int64_t k = 3 * begin; k < 3 * std::min(end, num_edges); k++) out[k] = static_cast<T>(vec[k]);
  for (int64_t s = std::max(begin, num_edges); s < end; s++) {
    out[3 * s] = static_cast<T>(pad_length);
    out[3 * s + 1] = out[3 * s + 2] = T(0);
  }
}

// One stream per device for every CudaGraphStep: torch keeps a cuBLAS workspace per (handle,
// stream) for the life of the process, so a new pool stream per step object would leave more
// behind each time (md_accel/step.py's capture_stream, the same reason).
c10::Stream capture_stream(c10::DeviceIndex device)
{
  static std::mutex lock;
  static std::map<c10::DeviceIndex, c10::Stream> streams;
  std::lock_guard<std::mutex> guard(lock);
  auto it = streams.find(device);
  if (it == streams.end()) it = streams.emplace(device, c10::cuda::getStreamFromPool(false, device)).first;
  return it->second;
}

}    // namespace

CudaGraphStep::CudaGraphStep(torch::jit::Module model, torch::Device device, torch::Dtype dtype,
                             double pad_length, int warmup) :
    model_(std::move(model)), device_(device), dtype_(dtype), pad_length_(pad_length),
    warmup_(warmup), threads_(host_threads()), stream_(capture_stream(device.index()))
{
}

CudaGraphStep::~CudaGraphStep() = default;

void CudaGraphStep::release()
{
  graph_.reset();
  host_index_ = host_vec_ = host_out_ = dev_index_ = dev_vec_ = dev_out_ = torch::Tensor();
}

void CudaGraphStep::relayout(int64_t num_nodes, int64_t num_edges)
{
  release();
  layout_ = GraphLayout::for_graph(num_nodes, num_edges);
  const int64_t n_cap = layout_.node_capacity, e_cap = layout_.edge_capacity;
  auto pinned = [](torch::Dtype t) { return torch::TensorOptions().dtype(t).pinned_memory(true); };
  auto on_device = [this](torch::Dtype t) { return torch::TensorOptions().dtype(t).device(device_); };
  host_index_ = torch::empty({n_cap + 2 * e_cap}, pinned(torch::kInt64));
  host_vec_ = torch::empty({3 * e_cap}, pinned(dtype_));
  host_out_ = torch::empty({num_nodes}, pinned(torch::kFloat64));
  dev_index_ = torch::empty({n_cap + 2 * e_cap}, on_device(torch::kInt64));
  dev_vec_ = torch::empty({3 * e_cap}, on_device(dtype_));
  dev_out_ = torch::empty({num_nodes + 3 * e_cap}, on_device(torch::kFloat64));
}

void CudaGraphStep::fill(const std::vector<int64_t> &species, const std::vector<int64_t> &src,
                         const std::vector<int64_t> &dst, const std::vector<double> &vec)
{
  const int64_t n = layout_.num_nodes, n_cap = layout_.node_capacity;
  const int64_t e = static_cast<int64_t>(src.size()), e_cap = layout_.edge_capacity;
  int64_t *index = host_index_.data_ptr<int64_t>();
  int64_t *s = index + n_cap, *d = s + e_cap;
  // each thread fills its share of the nodes and of the edge slots (as GraphUpload does for the plain step)
  const int64_t bytes = 8 * (n_cap + 2 * e_cap) + 3 * e_cap * static_cast<int64_t>(c10::elementSize(dtype_));
  const int nthreads = copy_threads(threads_, bytes);
  run_threads(nthreads, [&](int t) {
    int64_t b, end;
    thread_share(n_cap, t, nthreads, b, end);
    for (int64_t i = b; i < end; i++) index[i] = i < n ? species[i] : 0;
    thread_share(e_cap, t, nthreads, b, end);
    for (int64_t slot = b; slot < std::min(end, e); slot++) {
      s[slot] = src[slot];
      d[slot] = dst[slot];
    }
    for (int64_t slot = std::max(b, e); slot < end; slot++) s[slot] = d[slot] = layout_.padding_node(slot);
    if (dtype_ == torch::kFloat32)
      fill_vectors(host_vec_.data_ptr<float>(), vec, e, b, end, pad_length_);
    else
      fill_vectors(host_vec_.data_ptr<double>(), vec, e, b, end, pad_length_);
  });
}

void CudaGraphStep::evaluate()
{
  const int64_t n = layout_.num_nodes, n_cap = layout_.node_capacity, e_cap = layout_.edge_capacity;
  torch::Tensor species = dev_index_.narrow(0, 0, n_cap);
  torch::Tensor src = dev_index_.narrow(0, n_cap, e_cap);
  torch::Tensor dst = dev_index_.narrow(0, n_cap + e_cap, e_cap);
  torch::Tensor vec = dev_vec_.view({e_cap, 3}).detach().requires_grad_(true);
  torch::Tensor node_e = model_.get_method("node_energies")({species, vec, src, dst}).toTensor();
  torch::Tensor energy = node_e.narrow(0, 0, n).sum();    // the padding nodes' energies left out
  torch::Tensor g;
  if (energy.requires_grad()) g = torch::autograd::grad({energy}, {vec}, {}, false, false, true)[0];
  torch::NoGradGuard no_grad;
  dev_out_.narrow(0, 0, n).copy_(node_e.detach().narrow(0, 0, n));
  torch::Tensor out_grad = dev_out_.narrow(0, n, 3 * e_cap).view({e_cap, 3});
  if (g.defined())
    out_grad.copy_(g);
  else
    out_grad.zero_();
}

// Warm-up calls first (the custom ops read their plans on the host at first use, cuBLAS sets up
// its workspace on this stream), then the captured call; the caller has made stream_ current.
void CudaGraphStep::capture()
{
  for (int i = 0; i < warmup_; i++) evaluate();
  // as torch.cuda.graph does: the device idle and the allocator's unused cached blocks released
  // (the previous layout's among them) before the capture starts
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  graph_ = std::make_unique<at::cuda::CUDAGraph>();
  graph_->capture_begin();
  try {
    evaluate();
  } catch (...) {
    try {
      graph_->capture_end();    // leaves the stream's capture mode; the graph is invalid anyway
    } catch (...) {
    }
    release();
    throw;
  }
  graph_->capture_end();
  captures_++;
}

void CudaGraphStep::run(const std::vector<int64_t> &species, const std::vector<int64_t> &src,
                        const std::vector<int64_t> &dst, const std::vector<double> &vec,
                        torch::Tensor &node_e, EdgeGradients &edges)
{
  const int64_t n = static_cast<int64_t>(species.size()), e = static_cast<int64_t>(src.size());
  c10::cuda::CUDAStreamGuard guard(stream_);
  const bool fresh = !graph_ || !layout_.fits(n, e);
  if (fresh) relayout(n, e);
  fill(species, src, dst, vec);
  dev_index_.copy_(host_index_, true);
  dev_vec_.copy_(host_vec_, true);
  if (fresh) capture();
  graph_->replay();
  host_out_.copy_(dev_out_.narrow(0, 0, n), true);
  guard.current_stream().synchronize();
  node_e = host_out_;
  const int64_t n_cap = layout_.node_capacity, e_cap = layout_.edge_capacity;
  edges = EdgeGradients{dev_out_.narrow(0, n, 3 * e).view({e, 3}), dev_index_.narrow(0, n_cap, e),
                        dev_index_.narrow(0, n_cap + e_cap, e), dev_vec_.narrow(0, 0, 3 * e).view({e, 3}),
                        true, n};
}
