// Edge-chunked materialised path of md_accel::tp_conv_fused_* (see tp_conv_chunked.h).
//
// Chunk c holds the receiver-sorted edges [e0, e1). Its graph: the receiver offsets dst_ptr
// clamped to the chunk (receivers without edges in it are skipped by the accumulating kernels),
// and its by-sender order, which is the global by-sender order src_perm restricted to the chunk:
// one run per sender (chunk_graph_kernels.cu; src_perm ascending within each sender, as
// build_graph makes it; BwdChunks builds every chunk's at once). The first chunk writes every row,
// the others add.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <c10/core/Storage.h>
#include <c10/util/intrusive_ptr.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tp_conv_chunked.h"

namespace md_accel {

// chunk_graph_kernels.cu
const char* chunk_sender_runs(const int64_t* src_perm, const int64_t* src_ptr, const int64_t* dst_ptr, int64_t n,
                              int64_t E, int64_t step, int64_t chunks, int64_t* lo, int64_t* count, int64_t* dst_c,
                              cudaStream_t stream);
const char* chunk_sender_perm(const int64_t* src_perm, const int64_t* lo, const int64_t* ptr_c, int64_t n, int64_t E,
                              int64_t step, int64_t chunks, int64_t* perm, cudaStream_t stream);
// row_sum_kernels.cu
template <typename T>
const char* rows_sum(const T* in, const int64_t* w_row, int64_t E, int64_t P, int64_t H, int* count, int64_t* slot,
                     T* out, cudaStream_t stream);

namespace {

using at::Tensor;
using CT = const Tensor&;

// a @ b through md_accel::linear_tf32x3 (3xTF32 tensor cores for CUDA float32, at::mm otherwise)
Tensor linear(CT a, CT b) {
  using Sig = Tensor(CT, CT);
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("md_accel::linear_tf32x3", "").typed<Sig>();
  return op.call(a, b);
}

// Edges per chunk: MD_ACCEL_WEIGHT_CHUNK_MIB (default 2048) MiB of w per chunk (read per call).
// Fewer, larger chunks cost memory (w_c and its gradient) and save launches over all receivers:
// MACE-MP-0 medium shape at 32k atoms, H200, 2048 vs 1024: 87.2 vs 90.3 ms, 16.6 vs 15.3 GiB.
int64_t chunk_edges(int64_t weights, int64_t elem) {
  const char* v = std::getenv("MD_ACCEL_WEIGHT_CHUNK_MIB");
  double mib = v ? std::atof(v) : 2048.0;
  if (!std::isfinite(mib) || !(mib > 0)) mib = 2048.0;
  return std::max<int64_t>(1, int64_t(mib * 1048576.0 / double(std::max<int64_t>(1, weights * elem))));
}

void check(const char* err) { TORCH_CHECK(err == nullptr, "md_accel tp_conv chunked: ", err); }

// The forward's graph of the edges [e0, e1): receiver offsets clamped to the chunk (it reads no
// by-sender order).
struct FwdChunk {
  Tensor dst_ptr;  // backs graph.dst_ptr
  TPGraph graph;
};

FwdChunk fwd_chunk(CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, int64_t e0, int64_t e1) {
  FwdChunk c;
  c.dst_ptr = dst_ptr.sub(e0).clamp_(0, e1 - e0);
  c.graph = {src.data_ptr<int64_t>() + e0, dst.data_ptr<int64_t>() + e0, c.dst_ptr.data_ptr<int64_t>(),
             src_perm.data_ptr<int64_t>(), src_ptr.data_ptr<int64_t>(), dst_ptr.numel() - 1, e1 - e0};
  return c;
}

// The backward's graphs of every chunk [c * step, min(E, (c + 1) * step)), built together (three
// launches per layer, chunk_graph_kernels.cu): receiver offsets clamped to each chunk and each
// chunk's by-sender order (the global one restricted to the chunk). by_sender false (atomic grad_x:
// no per-sender sums read it): one launch, the graphs' src_perm / src_ptr null.
class BwdChunks {
 public:
  BwdChunks(CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, int64_t step, bool by_sender = true)
      : src_(src), dst_(dst), N_(dst_ptr.numel() - 1), E_(src.numel()), step_(step) {
    const int64_t C = (E_ + step - 1) / step;
    auto stream = c10::cuda::getCurrentCUDAStream(src_perm.device().index()).stream();
    const auto opt = src_perm.options();
    const Tensor lo = at::empty({C, N_}, opt), count = at::empty({C, N_ + 1}, opt);
    dst_c_ = at::empty({C, N_ + 1}, opt);
    check(chunk_sender_runs(src_perm.data_ptr<int64_t>(), src_ptr.data_ptr<int64_t>(), dst_ptr.data_ptr<int64_t>(), N_,
                            E_, step, C, lo.data_ptr<int64_t>(), count.data_ptr<int64_t>(),
                            dst_c_.data_ptr<int64_t>(), stream));
    if (!by_sender) return;
    ptr_c_ = at::cumsum(count, 1);  // each chunk's sender offsets
    perm_ = at::empty({E_}, opt);
    check(chunk_sender_perm(src_perm.data_ptr<int64_t>(), lo.data_ptr<int64_t>(), ptr_c_.data_ptr<int64_t>(), N_, E_,
                            step, C, perm_.data_ptr<int64_t>(), stream));
  }

  // The graph of the chunk starting at edge e0 (a multiple of step).
  TPGraph graph(int64_t e0) const {
    const int64_t c = e0 / step_, Ec = std::min(E_, e0 + step_) - e0;
    const bool by_sender = perm_.defined();
    return {src_.data_ptr<int64_t>() + e0, dst_.data_ptr<int64_t>() + e0, dst_c_.data_ptr<int64_t>() + c * (N_ + 1),
            by_sender ? perm_.data_ptr<int64_t>() + e0 : nullptr,
            by_sender ? ptr_c_.data_ptr<int64_t>() + c * (N_ + 1) : nullptr, N_, Ec};
  }

 private:
  Tensor src_, dst_, dst_c_, ptr_c_, perm_;
  int64_t N_, E_, step_;
};

// --- weight chunks kept from the forward for the backward -----------------------------------------
// The backward needs every chunk's w_c again. A chunk the forward kept is not recomputed; the
// forward keeps chunks while the kept chunks alive on the device (all layers, all steps: a chunk
// counts until autograd frees it) stay within a budget: MD_ACCEL_KEEP_WEIGHTS_MIB (read per call;
// 0 keeps none) when set. By default 8 GiB plus the largest tensor of rows offered for keeping on
// the device so far, at most a quarter of the device's memory: a layer whose rows are not kept
// recomputes them in its backward, so the step's peak already holds one layer's rows beside the
// kept ones; the default lets the kept rows grow by one such layer (for MACE's two interactions
// both layers' rows, with no higher peak: the second layer's backward runs first). Kept and
// recomputed chunks are bit-identical (the same deterministic GEMM on the same operands).

}  // namespace

namespace {
// The device's properties (queried once per device); memory 0 and one SM where the query fails.
struct DeviceFacts {
  int64_t memory = -1, sms = 1;
};

DeviceFacts device_facts(int device) {
  static std::mutex m;
  static std::vector<DeviceFacts> facts(64);
  std::lock_guard<std::mutex> lock(m);
  if (device < 0 || device >= int64_t(facts.size())) return {0, 1};
  if (facts[device].memory < 0) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
      facts[device] = {int64_t(prop.totalGlobalMem), std::max(1, prop.multiProcessorCount)};
    } else {
      facts[device] = {0, 1};
      cudaGetLastError();  // clear only this call's error
    }
  }
  return facts[device];
}
}  // namespace

int64_t device_memory(int device) { return device_facts(device).memory; }

int64_t sm_count(int device) { return device_facts(device).sms; }

namespace {

// MiB from an environment variable as bytes (0 when not positive), or -1 when it is not set.
int64_t env_mib(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return -1;
  const double mib = std::atof(v);
  return std::isfinite(mib) && mib > 0 ? int64_t(std::min(mib, 1e12) * 1048576.0) : 0;
}

class KeptChunks {
 public:
  // Whether `bytes` more fit in device's budget; if so they are counted from now on as `t`'s storage.
  bool admit(const Tensor& t, int device) {
    const int64_t bytes = int64_t(t.storage().nbytes());
    std::lock_guard<std::mutex> lock(m_);
    if (device >= 0 && device < int64_t(largest_.size())) largest_[device] = std::max(largest_[device], bytes);
    const int64_t budget = budget_bytes(device);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.storage.expired(); }),
                   entries_.end());
    int64_t live = 0;
    for (const Entry& e : entries_) live += e.device == device ? e.bytes : 0;
    if (live + bytes > budget) return false;
    entries_.push_back({device, bytes, t.storage().getWeakStorageImpl()});
    return true;
  }

 private:
  // The keep budget of `device` (m_ held).
  int64_t budget_bytes(int device) const {
    const int64_t set = env_mib("MD_ACCEL_KEEP_WEIGHTS_MIB");
    if (set >= 0) return set;
    const int64_t largest = device >= 0 && device < int64_t(largest_.size()) ? largest_[device] : 0;
    return std::min<int64_t>((int64_t(8) << 30) + largest, device_memory(device) / 4);
  }

  struct Entry {
    int device;
    int64_t bytes;
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  };
  std::mutex m_;
  std::vector<Entry> entries_;
  std::vector<int64_t> largest_ = std::vector<int64_t>(64, 0);  // per device: the largest tensor offered
};

// Appends w (chunk number kept->size()) to *kept when the budget admits it; chunks are kept as a
// prefix (once one is refused, later ones are not tried: the backward matches chunks by index).
void maybe_keep(std::vector<Tensor>* kept, const Tensor& w, bool& refused) {
  static KeptChunks registry;
  if (kept == nullptr || refused) return;
  if (registry.admit(w, w.device().index())) kept->push_back(w);
  else refused = true;
}

// Chunk i's kept w when the forward kept it with these rows and columns, else undefined.
Tensor kept_chunk(const std::vector<Tensor>& kept, size_t i, int64_t rows, int64_t cols) {
  if (i >= kept.size()) return Tensor();
  const Tensor& w = kept[i];
  return w.defined() && w.dim() == 2 && w.size(0) == rows && w.size(1) == cols ? w : Tensor();
}

// --- edges sharing weight rows ---------------------------------------------------------------------
// The whole [P, weights] rows are held while a layer's forward or backward runs: at most
// MD_ACCEL_PAIR_WEIGHTS_MIB (read once per process, so that a forward and its backward take the
// same path), by default 24 GiB but at most a quarter of the device's memory. Above it, and where
// no generated kernels serve the plan (only they read TPGraph::w_row), the rows are expanded per edge.
int64_t pair_budget_bytes(int device) {
  static const int64_t set = env_mib("MD_ACCEL_PAIR_WEIGHTS_MIB");
  return set >= 0 ? set : std::min<int64_t>(int64_t(24) << 30, device_memory(device) / 4);
}

bool rows_whole(const TPSpec* spec, CT h, CT W) {
  return spec != nullptr && h.size(0) * W.size(1) * h.element_size() <= pair_budget_bytes(h.device().index());
}

// Memory-lean graphs: per-edge weights E x weights of at most MD_ACCEL_LEAN_WEIGHTS_MIB (default 1.5 GiB;
// read per call; 0 turns it off): the pair op keeps no rows for the backward (one GEMM recomputes them) and
// runs the backward in MD_ACCEL_LEAN_CHUNKS (default 6) edge chunks of ceil(E / 6) edges (or more chunks,
// of MD_ACCEL_WEIGHT_CHUNK_MIB), so grad_w and the kernels' per-edge workspace exist a sixth at a time.
// Larger layers keep their rows within the keep budget (speed). E counts the CUDA graph's edge slots where
// the step is captured (GraphedStep pads up to 300,000 edges). The threshold is the smallest that kept every
// measured step's peak at least 10 % under its cuEquivariance peer's (H200, session 32, Calculator step at
// 864 / 4,000 / 16,384 Cu atoms): MACE-MP-0-medium shape float32 at 4,000 atoms (312,000 edges, 1,523 MiB in
// its second layer) stays lean, since its rows would take the peak to 3.90 GiB against mace +
// cuEquivariance's 4.32 (the ratio falls with size: 0.52 at 16,384). Above it, keeping the rows made steps
// 1.02-1.31x faster (SevenNet-l3i5 float64 at 4,000 atoms: 36.0 against 47.1 ms, 8.45 GiB against the peer's
// 12.2). Since session 24 hidden's per-edge gradient ([E, hidden], 4 / 8 bytes) is held whole in the backward.
bool lean_graph(int64_t E, int64_t weights, int64_t elem) {
  const int64_t set = env_mib("MD_ACCEL_LEAN_WEIGHTS_MIB");
  const int64_t limit = set >= 0 ? set : int64_t(3) << 29;
  return E * weights * elem <= limit;
}

// Edges per backward chunk of the pair op: MD_ACCEL_WEIGHT_CHUNK_MIB's, and on lean graphs at most
// E / MD_ACCEL_LEAN_CHUNKS.
int64_t pair_bwd_chunk_edges(int64_t E, int64_t weights, int64_t elem) {
  const int64_t step = chunk_edges(weights, elem);
  if (!lean_graph(E, weights, elem)) return step;
  const char* v = std::getenv("MD_ACCEL_LEAN_CHUNKS");
  const int64_t chunks = v ? std::max<int64_t>(1, std::atoll(v)) : 6;
  return std::max<int64_t>(1, std::min(step, (E + chunks - 1) / chunks));
}

// Sum over the edges of each of the P rows: [E, H] -> [P, H] (row_sum_kernels.cu; bit-reproducible for
// rows of at most two edges).
Tensor edges_to_rows(CT g_e, CT w_row, int64_t P) {
  const int64_t E = g_e.size(0), H = g_e.size(1);
  Tensor out = at::empty({P, H}, g_e.options());
  Tensor count = at::zeros({P}, w_row.options().dtype(at::kInt));
  Tensor slot = at::empty({P, 2}, w_row.options());
  const Tensor in = g_e.contiguous();
  auto stream = c10::cuda::getCurrentCUDAStream(g_e.device().index()).stream();
  const char* err = nullptr;
  if (g_e.scalar_type() == at::kDouble)
    err = rows_sum(in.data_ptr<double>(), w_row.data_ptr<int64_t>(), E, P, H, count.data_ptr<int>(),
                   slot.data_ptr<int64_t>(), out.data_ptr<double>(), stream);
  else
    err = rows_sum(in.data_ptr<float>(), w_row.data_ptr<int64_t>(), E, P, H, count.data_ptr<int>(),
                   slot.data_ptr<int64_t>(), out.data_ptr<float>(), stream);
  check(err);
  return out;
}

}  // namespace

int64_t tp_conv_bwd_chunk_edges(int64_t num_edges, int64_t in1, int64_t elem) {
  const int64_t budget = env_mib("MD_ACCEL_BWD_WORK_MIB");  // -1 unset, 0 off
  const int64_t row = std::max<int64_t>(1, in1 * elem);
  if (budget <= 0 || num_edges * row <= budget) return std::max<int64_t>(1, num_edges);
  return std::max<int64_t>(1, budget / row);
}

void tp_conv_bwd_edge_chunks(const TPSpec* spec, CT g, CT x, CT y, CT w, CT src, CT dst, CT dst_ptr, CT src_perm,
                             CT src_ptr, int64_t step, CT gx, CT gy, CT gw) {
  const int64_t E = src.numel();
  const BwdChunks chunks(src, dst, dst_ptr, src_perm, src_ptr, step);
  const Tensor work = at::empty({std::min(E, step), x.size(1)}, x.options());
  for (int64_t e0 = 0; e0 < E; e0 += step) {
    const int64_t Ec = std::min(E, e0 + step) - e0;
    tp_conv_chunk_launch(spec, true, x, y.narrow(0, e0, Ec), w.narrow(0, e0, Ec), g, chunks.graph(e0), E, g.size(1),
                         e0 > 0, gx, gy.narrow(0, e0, Ec), gw.narrow(0, e0, Ec), work.narrow(0, 0, Ec));
  }
}

Tensor tp_conv_chunked_fwd(CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                           CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out, std::vector<Tensor>* kept) {
  using FwdSig = Tensor(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, int64_t);
  const int64_t N = dst_ptr.numel() - 1, E = src.numel();
  const int64_t step = chunk_edges(W.size(1), x.element_size());
  const TPSpec* spec = E > step ? tp_conv_spec_for(x, paths, cg_ptr, cg_idx, cg_val) : nullptr;
  bool refused = false;
  if (spec == nullptr) {
    static const auto fwd = c10::Dispatcher::singleton().findSchemaOrThrow("md_accel::tp_conv_fwd", "").typed<FwdSig>();
    const Tensor w = linear(h, W);
    maybe_keep(kept, w, refused);
    return fwd.call(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out);
  }
  Tensor out = at::empty({N, dim_out}, x.options());
  for (int64_t e0 = 0; e0 < E; e0 += step) {
    const int64_t e1 = std::min(E, e0 + step);
    const FwdChunk c = fwd_chunk(src, dst, dst_ptr, src_perm, src_ptr, e0, e1);
    const Tensor w_c = linear(h.narrow(0, e0, e1 - e0), W);
    maybe_keep(kept, w_c, refused);
    tp_conv_chunk_launch(spec, false, x, y.narrow(0, e0, e1 - e0), w_c, Tensor(), c.graph, E, dim_out, e0 > 0,
                         out, Tensor(), Tensor(), Tensor());
  }
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> tp_conv_chunked_bwd(CT g, CT x, CT y, CT h, CT W, CT src, CT dst,
                                                               CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                                                               CT cg_ptr, CT cg_idx, CT cg_val, bool need_W,
                                                               const std::vector<Tensor>& kept) {
  using BwdSig = std::tuple<Tensor, Tensor, Tensor>(CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT, CT);
  const int64_t E = src.numel();
  const int64_t step = chunk_edges(W.size(1), x.element_size());
  const Tensor Wt = W.t().contiguous();
  const Tensor no_W = at::empty({0, W.size(1)}, W.options());
  const TPSpec* spec = E > step ? tp_conv_spec_for(x, paths, cg_ptr, cg_idx, cg_val) : nullptr;
  if (spec == nullptr) {
    static const auto bwd = c10::Dispatcher::singleton().findSchemaOrThrow("md_accel::tp_conv_bwd", "").typed<BwdSig>();
    Tensor w = kept_chunk(kept, 0, E, W.size(1));
    if (!w.defined()) w = linear(h, W);
    auto r = bwd.call(g, x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val);
    const Tensor& gw = std::get<2>(r);
    return {std::get<0>(r), std::get<1>(r), linear(gw, Wt), need_W ? at::mm(h.t(), gw) : no_W};
  }
  // the forward's chunks serve only the same chunking (MD_ACCEL_WEIGHT_CHUNK_MIB is read per call)
  const std::vector<Tensor> none;
  const std::vector<Tensor>& use = !kept.empty() && kept[0].size(0) == std::min(E, step) ? kept : none;
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gh = at::empty_like(h);
  Tensor gW = need_W ? at::zeros({W.size(0), W.size(1)}, W.options()) : no_W;
  const bool atomic = tp_conv_atomic_gx();  // no per-chunk grad_x rows, no per-sender orders
  const bool rows_in_gw = tp_conv_chunk_rows_in_gw(spec, x, atomic);  // the rows in gw_c: no work_c
  const BwdChunks chunks(src, dst, dst_ptr, src_perm, src_ptr, step, !atomic);
  size_t i = 0;
  for (int64_t e0 = 0; e0 < E; e0 += step, ++i) {
    const int64_t e1 = std::min(E, e0 + step), Ec = e1 - e0;
    const TPGraph graph = chunks.graph(e0);
    const Tensor h_c = h.narrow(0, e0, Ec);
    Tensor w_c = kept_chunk(use, i, Ec, W.size(1));
    if (!w_c.defined()) w_c = linear(h_c, W);  // recomputed: the forward did not keep it
    const Tensor gw_c = at::empty({Ec, W.size(1)}, x.options());
    const Tensor work_c = atomic || rows_in_gw ? Tensor() : at::empty({Ec, x.size(1)}, x.options());
    tp_conv_chunk_launch(spec, true, x, y.narrow(0, e0, Ec), w_c, g, graph, E, g.size(1), e0 > 0, gx,
                         gy.narrow(0, e0, Ec), gw_c, work_c, atomic);
    gh.narrow(0, e0, Ec).copy_(linear(gw_c, Wt));
    if (need_W) gW.addmm_(h_c.t(), gw_c);
  }
  return {gx, gy, gh, gW};
}

}  // namespace md_accel

namespace md_accel {

Tensor tp_conv_pair_fwd(CT x, CT y, CT h, CT W, CT w_row, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                        CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out, std::vector<Tensor>* kept) {
  const TPSpec* spec = tp_conv_spec_for(x, paths, cg_ptr, cg_idx, cg_val);
  if (!rows_whole(spec, h, W))
    return tp_conv_chunked_fwd(x, y, at::index_select(h, 0, w_row), W, src, dst, dst_ptr, src_perm, src_ptr, paths,
                               cg_ptr, cg_idx, cg_val, dim_out, kept);
  const int64_t N = dst_ptr.numel() - 1, E = src.numel();
  const Tensor w = linear(h, W);  // the P rows, read by edge through w_row
  bool refused = lean_graph(E, W.size(1), x.element_size());  // small graphs keep nothing
  maybe_keep(kept, w, refused);
  Tensor out = at::empty({N, dim_out}, x.options());
  TPGraph graph{src.data_ptr<int64_t>(),      dst.data_ptr<int64_t>(),     dst_ptr.data_ptr<int64_t>(),
                src_perm.data_ptr<int64_t>(), src_ptr.data_ptr<int64_t>(), N,
                E,                            w_row.data_ptr<int64_t>()};
  tp_conv_chunk_launch(spec, false, x, y, w, Tensor(), graph, E, dim_out, false, out, Tensor(), Tensor(), Tensor());
  return out;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> tp_conv_pair_bwd(CT g, CT x, CT y, CT h, CT W, CT w_row, CT src, CT dst,
                                                            CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                                                            CT cg_ptr, CT cg_idx, CT cg_val, bool need_W,
                                                            const std::vector<Tensor>& kept) {
  const int64_t P = h.size(0), E = src.numel(), N = dst_ptr.numel() - 1;
  const TPSpec* spec = tp_conv_spec_for(x, paths, cg_ptr, cg_idx, cg_val);
  if (!rows_whole(spec, h, W)) {
    auto r = tp_conv_chunked_bwd(g, x, y, at::index_select(h, 0, w_row), W, src, dst, dst_ptr, src_perm, src_ptr,
                                 paths, cg_ptr, cg_idx, cg_val, need_W, kept);
    return {std::get<0>(r), std::get<1>(r), edges_to_rows(std::get<2>(r), w_row, P), std::get<3>(r)};
  }
  Tensor w = kept_chunk(kept, 0, P, W.size(1));
  if (!w.defined()) w = linear(h, W);  // recomputed: the forward did not keep it
  const Tensor Wt = W.t().contiguous();
  const int64_t step = pair_bwd_chunk_edges(E, W.size(1), x.element_size());
  Tensor gx = at::empty_like(x), gy = at::empty_like(y);
  Tensor gh_e = at::empty({E, h.size(1)}, h.options());  // hidden's gradient per edge, summed per row below
  Tensor gW = need_W ? at::zeros({W.size(0), W.size(1)}, W.options()) : at::empty({0, W.size(1)}, W.options());
  if (E == 0) gx.zero_();
  const bool atomic = tp_conv_atomic_gx();  // no per-chunk grad_x rows, no per-sender orders
  const bool rows_in_gw = tp_conv_chunk_rows_in_gw(spec, x, atomic);  // the rows in gw_c: no work_c
  std::optional<BwdChunks> chunks;  // none for one chunk: the whole graph as it is
  if (step < E) chunks.emplace(src, dst, dst_ptr, src_perm, src_ptr, step, !atomic);
  for (int64_t e0 = 0; e0 < E; e0 += step) {
    const int64_t e1 = std::min(E, e0 + step), Ec = e1 - e0;
    TPGraph graph = chunks ? chunks->graph(e0)
                           : TPGraph{src.data_ptr<int64_t>(), dst.data_ptr<int64_t>(), dst_ptr.data_ptr<int64_t>(),
                                     src_perm.data_ptr<int64_t>(), src_ptr.data_ptr<int64_t>(), N, E};
    graph.w_row = w_row.data_ptr<int64_t>() + e0;
    const Tensor gw_c = at::empty({Ec, W.size(1)}, x.options());
    const Tensor work_c = atomic || rows_in_gw ? Tensor() : at::empty({Ec, x.size(1)}, x.options());
    tp_conv_chunk_launch(spec, true, x, y.narrow(0, e0, Ec), w, g, graph, E, g.size(1), e0 > 0, gx,
                         gy.narrow(0, e0, Ec), gw_c, work_c, atomic);
    Tensor gh_c = gh_e.narrow(0, e0, Ec);
    if (x.scalar_type() == at::kDouble) at::mm_out(gh_c, gw_c, Wt);
    else gh_c.copy_(linear(gw_c, Wt));  // 3xTF32 (linear_tf32x3 has no out= form)
    if (need_W) gW.addmm_(at::index_select(h, 0, w_row.narrow(0, e0, Ec)).t(), gw_c);
  }
  return {gx, gy, edges_to_rows(gh_e, w_row, P), gW};
}

}  // namespace md_accel
