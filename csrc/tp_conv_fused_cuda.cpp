// CUDA implementations of md_accel::tp_conv_fused_{fwd,bwd}: the registry of fused kernel
// libraries (md_accel/ops/_codegen_fused.py, csrc/tp_fused_abi.h), argument checks and launches.
// A plan with no fused library for its hidden width (or with fused kernels switched off) runs the
// same maths materialised, one chunk of edges at a time (tp_conv_chunked.h).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "spec_registry.h"
#include "tp_conv_chunked.h"
#include "tp_fused_abi.h"

namespace md_accel {
namespace {

using at::Tensor;
using CT = const Tensor&;
using Tensor3 = std::tuple<Tensor, Tensor, Tensor>;
using Tensor4 = std::tuple<Tensor, Tensor, Tensor, Tensor>;

// --- fused libraries ------------------------------------------------------------------------------
// MD_ACCEL_TP_FUSED_KERNELS: colon-separated libraries to load at first use (C++ users).
SpecRegistry<TPFusedSpec> g_specs("tp_conv_fused", "md_accel_tp_fused_spec_v1", kTPFusedAbiVersion,
                                  "MD_ACCEL_TP_FUSED_KERNELS");

int64_t load_fused(std::string path) { return g_specs.load(path); }

bool set_fused(bool enabled) { return g_specs.set_enabled(enabled); }

// Host copy of a plan's integer tables, the row widths it needs, and the fused library found for
// one hidden width (re-searched when libraries are loaded). Cached per plan tensors and version.
struct FusedEntry {
  Tensor paths, cg_ptr, cg_idx;  // identity (the caller's tensors)
  int64_t v_paths = -1, v_ptr = -1, v_idx = -1;
  int device = -1;
  int64_t hidden = 0;
  Tensor h_paths, h_cg_ptr, h_cg_idx;  // int32, CPU
  int64_t ext_in1 = 0, ext_in2 = 0, ext_out = 0, ext_w = 0;
  const TPFusedSpec* spec = nullptr;
  int generation = -1;
};

const TPFusedSpec* find_spec(const FusedEntry& fe) {
  const int64_t P = fe.h_paths.size(0), nnz = fe.h_cg_idx.size(0);
  return g_specs.find([&](const TPFusedSpec* s) {
    return s->num_paths == P && s->nnz == nnz && s->hidden == fe.hidden &&
           std::memcmp(s->paths, fe.h_paths.data_ptr<int32_t>(), sizeof(int32_t) * P * kPathCols) == 0 &&
           std::memcmp(s->cg_ptr, fe.h_cg_ptr.data_ptr<int32_t>(), sizeof(int32_t) * (P + 1)) == 0 &&
           std::memcmp(s->cg_idx, fe.h_cg_idx.data_ptr<int32_t>(), sizeof(int32_t) * nnz * 3) == 0;
  });
}

void build_entry(FusedEntry& fe) {
  fe.h_paths = fe.paths.to(at::kCPU, at::kInt).contiguous();
  fe.h_cg_ptr = fe.cg_ptr.to(at::kCPU, at::kInt).contiguous();
  fe.h_cg_idx = fe.cg_idx.to(at::kCPU, at::kInt).contiguous();
  TORCH_CHECK(fe.h_paths.dim() == 2 && fe.h_paths.size(1) == kPathCols, "md_accel tp_conv_fused: paths must be [P, ",
              kPathCols, "]");
  TORCH_CHECK(fe.h_cg_idx.dim() == 2 && fe.h_cg_idx.size(1) == 3, "md_accel tp_conv_fused: cg_idx must be [nnz, 3]");
  const int32_t* r = fe.h_paths.data_ptr<int32_t>();
  for (int64_t p = 0; p < fe.h_paths.size(0); ++p, r += kPathCols) {
    const int64_t mul = r[1];
    fe.ext_in2 = std::max<int64_t>(fe.ext_in2, int64_t(r[3]) + 2 * r[4] + 1);
    if (mul > 0) {
      fe.ext_in1 = std::max<int64_t>(fe.ext_in1, r[0] + mul * (2 * r[2] + 1));
      fe.ext_out = std::max<int64_t>(fe.ext_out, r[5] + mul * (2 * r[6] + 1));
      fe.ext_w = std::max<int64_t>(fe.ext_w, r[7] + (mul - 1) * r[8] + 1);
    }
  }
}

FusedEntry fused_entry(CT paths, CT cg_ptr, CT cg_idx, int device, int64_t hidden) {
  static std::mutex mutex;
  static std::vector<FusedEntry> cache;
  std::lock_guard<std::mutex> lock(mutex);
  FusedEntry* hit = nullptr;
  for (auto& fe : cache)
    if (fe.device == device && fe.hidden == hidden && fe.paths.unsafeGetTensorImpl() == paths.unsafeGetTensorImpl() &&
        fe.cg_ptr.unsafeGetTensorImpl() == cg_ptr.unsafeGetTensorImpl() &&
        fe.cg_idx.unsafeGetTensorImpl() == cg_idx.unsafeGetTensorImpl())
      hit = &fe;
  if (hit == nullptr) {
    cache.push_back(FusedEntry{paths, cg_ptr, cg_idx});
    hit = &cache.back();
    hit->device = device;
    hit->hidden = hidden;
  }
  if (hit->v_paths != paths._version() || hit->v_ptr != cg_ptr._version() || hit->v_idx != cg_idx._version()) {
    hit->v_paths = paths._version();
    hit->v_ptr = cg_ptr._version();
    hit->v_idx = cg_idx._version();
    build_entry(*hit);
    hit->generation = -1;
  }
  const int gen = g_specs.generation();
  if (hit->generation != gen) {
    hit->spec = find_spec(*hit);
    hit->generation = gen;
  }
  return *hit;  // a copy: the cache may change once the lock is released
}

// --- checks ----------------------------------------------------------------------------------------
Tensor graph_tensor(CT t, const at::Device& dev, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.dim() == 1, "md_accel tp_conv_fused: ", name,
              " must be a 1-D int64 tensor");
  TORCH_CHECK(t.device() == dev, "md_accel tp_conv_fused: ", name, " must be on ", dev);
  return t.contiguous();
}

// Contiguous and 16-byte aligned (the kernels read hidden rows as 16-byte vectors).
Tensor operand(CT t, CT x, int64_t rows, const char* name) {
  TORCH_CHECK(t.defined() && t.device() == x.device() && t.scalar_type() == x.scalar_type(),
              "md_accel tp_conv_fused: ", name, " must be a ", x.scalar_type(), " tensor on ", x.device());
  TORCH_CHECK(t.dim() == 2 && (rows < 0 || t.size(0) == rows), "md_accel tp_conv_fused: ", name, " must have ",
              rows, " rows, got ", t.sizes());
  TORCH_CHECK(t.size(1) < (int64_t(1) << 30), "md_accel tp_conv_fused: ", name, " rows too wide");
  Tensor c = t.contiguous();
  if (reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 != 0) c = c.clone();
  return c;
}

struct Call {
  Tensor x, y, h, W, g, src, dst, dst_ptr, src_perm, src_ptr, cg_val, w_row;
  TPGraph graph;
  TPDims dims;
  const TPFusedSpec* spec = nullptr;
};

// The checks of both ops (fused, pair): a CUDA float32 / float64 x, the graph's int64 tensors on its
// device, x, y, hidden (one row per edge where h_per_edge), W and grad_out of matching shapes.
Call prepare_operands(CT x_, CT y_, CT h_, CT W_, CT g_, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr,
                      bool h_per_edge, int64_t dim_out) {
  TORCH_CHECK(x_.is_cuda(), "md_accel tp_conv_fused (CUDA): x must be a CUDA tensor");
  TORCH_CHECK(x_.scalar_type() == at::kFloat || x_.scalar_type() == at::kDouble,
              "md_accel tp_conv_fused: float32 or float64 features only, got ", x_.scalar_type());
  const auto dev = x_.device();
  Call c;
  c.src = graph_tensor(src, dev, "src");
  c.dst = graph_tensor(dst, dev, "dst");
  c.dst_ptr = graph_tensor(dst_ptr, dev, "dst_ptr");
  c.src_perm = graph_tensor(src_perm, dev, "src_perm");
  c.src_ptr = graph_tensor(src_ptr, dev, "src_ptr");
  const int64_t N = c.dst_ptr.numel() - 1, E = c.src.numel();
  TORCH_CHECK(N >= 0 && c.src_ptr.numel() == N + 1, "md_accel tp_conv_fused: dst_ptr and src_ptr must be [N+1]");
  TORCH_CHECK(c.dst.numel() == E && c.src_perm.numel() == E, "md_accel tp_conv_fused: src, dst, src_perm must be [E]");
  c.x = operand(x_, x_, N, "x");
  c.y = operand(y_, x_, E, "y");
  c.h = operand(h_, x_, h_per_edge ? E : -1, "hidden");
  c.W = operand(W_, x_, c.h.size(1), "W");
  if (g_.defined()) c.g = operand(g_, x_, N, "grad_out");
  TORCH_CHECK(dim_out >= 0 && dim_out < (int64_t(1) << 30), "md_accel tp_conv_fused: bad dim_out ", dim_out);
  c.graph = {c.src.data_ptr<int64_t>(), c.dst.data_ptr<int64_t>(), c.dst_ptr.data_ptr<int64_t>(),
             c.src_perm.data_ptr<int64_t>(), c.src_ptr.data_ptr<int64_t>(), N, E};
  c.dims = {int(c.x.size(1)), int(c.y.size(1)), int(c.W.size(1)), int(dim_out)};
  return c;
}

Call prepare(CT x_, CT y_, CT h_, CT W_, CT g_, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
             CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out) {
  Call c = prepare_operands(x_, y_, h_, W_, g_, src, dst, dst_ptr, src_perm, src_ptr, true, dim_out);
  const auto dev = x_.device();
  const FusedEntry fe = fused_entry(paths, cg_ptr, cg_idx, dev.index(), c.h.size(1));
  TORCH_CHECK(cg_val.dim() == 1 && cg_val.numel() == fe.h_cg_idx.size(0), "md_accel tp_conv_fused: cg_val must be [nnz]");
  c.cg_val = cg_val.to(dev, x_.scalar_type()).contiguous();
  if (g_specs.enabled() && fe.spec != nullptr) {
    TORCH_CHECK(c.x.size(1) >= fe.ext_in1 && c.y.size(1) >= fe.ext_in2 && c.W.size(1) >= fe.ext_w && dim_out >= fe.ext_out,
                "md_accel tp_conv_fused: operand widths (x ", c.x.size(1), ", y ", c.y.size(1), ", W ", c.W.size(1),
                ", out ", dim_out, ") too small for the plan (", fe.ext_in1, ", ", fe.ext_in2, ", ", fe.ext_w, ", ",
                fe.ext_out, ")");
    c.spec = fe.spec;
  }
  return c;
}

template <typename T>
T* ptr(CT t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

void check_launch(const char* err) { TORCH_CHECK(err == nullptr, "md_accel tp_conv_fused: ", err); }

// --- ops -------------------------------------------------------------------------------------------

// kept: see tp_conv_chunked.h (the fused kernels keep nothing: they never materialise w).
Tensor fused_fwd(CT x_, CT y_, CT h_, CT W_, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, CT paths, CT cg_ptr,
                 CT cg_idx, CT cg_val, int64_t dim_out, std::vector<Tensor>* kept) {
  c10::cuda::CUDAGuard guard(x_.device());
  Call c = prepare(x_, y_, h_, W_, Tensor(), src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out);
  const bool f64 = c.x.scalar_type() == at::kDouble;
  if (c.spec == nullptr || (f64 ? c.spec->fwd_f64 == nullptr : c.spec->fwd_f32 == nullptr))
    return tp_conv_chunked_fwd(c.x, c.y, c.h, c.W, c.src, c.dst, c.dst_ptr, c.src_perm, c.src_ptr, paths, cg_ptr,
                               cg_idx, cg_val, dim_out, kept);  // the caller's cg_val: matched once per tensor
  Tensor out = at::empty({c.graph.num_nodes, dim_out}, c.x.options());
  auto stream = c10::cuda::getCurrentCUDAStream(c.x.device().index()).stream();
  if (f64) {
    const TPFusedTensors<double> t{ptr<double>(c.x), ptr<double>(c.y), ptr<double>(c.h), ptr<double>(c.W), nullptr,
                                   ptr<double>(out), nullptr, nullptr, nullptr, nullptr};
    check_launch(c.spec->fwd_f64(t, c.graph, ptr<double>(c.cg_val), c.dims, stream));
  } else {
    const TPFusedTensors<float> t{ptr<float>(c.x), ptr<float>(c.y), ptr<float>(c.h), ptr<float>(c.W), nullptr,
                                  ptr<float>(out), nullptr, nullptr, nullptr, nullptr};
    check_launch(c.spec->fwd_f32(t, c.graph, ptr<float>(c.cg_val), c.dims, stream));
  }
  return out;
}

Tensor tp_conv_fused_fwd_cuda(CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                              CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out) {
  return fused_fwd(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out, nullptr);
}

std::tuple<Tensor, std::vector<Tensor>> tp_conv_fused_fwd_keep_cuda(CT x, CT y, CT h, CT W, CT src, CT dst,
                                                                    CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                                                                    CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out) {
  std::vector<Tensor> kept;
  Tensor out = fused_fwd(x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out, &kept);
  return {out, kept};
}

// grad_W is h^T grad_w when asked (grad_w then materialised by the kernel), else an empty [0, w].
Tensor4 fused_bwd(CT g_, CT x_, CT y_, CT h_, CT W_, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                  CT cg_ptr, CT cg_idx, CT cg_val, bool need_W, const std::vector<Tensor>& kept) {
  c10::cuda::CUDAGuard guard(x_.device());
  TORCH_CHECK(g_.dim() == 2, "md_accel tp_conv_fused_bwd: grad_out must be 2-D");
  Call c = prepare(x_, y_, h_, W_, g_, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, g_.size(1));
  const bool f64 = c.x.scalar_type() == at::kDouble;
  const Tensor no_W = at::empty({0, c.W.size(1)}, c.W.options());
  if (c.spec == nullptr || (f64 ? c.spec->bwd_f64 == nullptr : c.spec->bwd_f32 == nullptr))
    return tp_conv_chunked_bwd(c.g, c.x, c.y, c.h, c.W, c.src, c.dst, c.dst_ptr, c.src_perm, c.src_ptr, paths, cg_ptr,
                               cg_idx, cg_val, need_W, kept);
  Tensor gx = at::empty_like(c.x), gy = at::empty_like(c.y), gh = at::empty_like(c.h);
  Tensor gw = need_W ? at::empty({c.graph.num_edges, c.W.size(1)}, c.x.options()) : Tensor();
  Tensor work = at::empty({c.graph.num_edges, c.x.size(1)}, c.x.options());
  auto stream = c10::cuda::getCurrentCUDAStream(c.x.device().index()).stream();
  if (f64) {
    const TPFusedTensors<double> t{ptr<double>(c.x), ptr<double>(c.y), ptr<double>(c.h), ptr<double>(c.W),
                                   ptr<double>(c.g), nullptr, ptr<double>(gx), ptr<double>(gy), ptr<double>(gh),
                                   ptr<double>(gw)};
    check_launch(c.spec->bwd_f64(t, c.graph, ptr<double>(c.cg_val), c.dims, ptr<double>(work), stream));
  } else {
    const TPFusedTensors<float> t{ptr<float>(c.x), ptr<float>(c.y), ptr<float>(c.h), ptr<float>(c.W),
                                  ptr<float>(c.g), nullptr, ptr<float>(gx), ptr<float>(gy), ptr<float>(gh),
                                  ptr<float>(gw)};
    check_launch(c.spec->bwd_f32(t, c.graph, ptr<float>(c.cg_val), c.dims, ptr<float>(work), stream));
  }
  return {gx, gy, gh, need_W ? at::mm(c.h.t(), gw) : no_W};
}

Tensor4 tp_conv_fused_bwd_cuda(CT g, CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr,
                               CT paths, CT cg_ptr, CT cg_idx, CT cg_val, bool need_W) {
  return fused_bwd(g, x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, need_W, {});
}

Tensor4 tp_conv_fused_bwd_kept_cuda(CT g, CT x, CT y, CT h, CT W, CT src, CT dst, CT dst_ptr, CT src_perm,
                                    CT src_ptr, CT paths, CT cg_ptr, CT cg_idx, CT cg_val, at::TensorList kept,
                                    bool need_W) {
  return fused_bwd(g, x, y, h, W, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, need_W,
                   kept.vec());
}

// --- edges sharing weight rows (md_accel::tp_conv_pair_fwd, tp_conv_chunked.h) ---------------------
Call prepare_pair(CT x_, CT y_, CT h_, CT W_, CT g_, CT w_row, CT src, CT dst, CT dst_ptr, CT src_perm, CT src_ptr,
                  int64_t dim_out) {
  Call c = prepare_operands(x_, y_, h_, W_, g_, src, dst, dst_ptr, src_perm, src_ptr, false, dim_out);
  c.w_row = graph_tensor(w_row, x_.device(), "w_row");
  const int64_t E = c.src.numel();
  TORCH_CHECK(c.w_row.numel() == E, "md_accel tp_conv_fused: w_row must be [E]");
  TORCH_CHECK(E == 0 || c.h.size(0) > 0, "md_accel tp_conv_fused: hidden has no rows for ", E, " edges");
  return c;
}

std::tuple<Tensor, std::vector<Tensor>> tp_conv_pair_fwd_keep_cuda(CT x, CT y, CT h, CT W, CT w_row, CT src, CT dst,
                                                                   CT dst_ptr, CT src_perm, CT src_ptr, CT paths,
                                                                   CT cg_ptr, CT cg_idx, CT cg_val, int64_t dim_out,
                                                                   bool keep) {
  c10::cuda::CUDAGuard guard(x.device());
  const Call c = prepare_pair(x, y, h, W, Tensor(), w_row, src, dst, dst_ptr, src_perm, src_ptr, dim_out);
  std::vector<Tensor> kept;
  Tensor out = tp_conv_pair_fwd(c.x, c.y, c.h, c.W, c.w_row, c.src, c.dst, c.dst_ptr, c.src_perm, c.src_ptr, paths,
                                cg_ptr, cg_idx, cg_val, dim_out, keep ? &kept : nullptr);
  return {out, kept};
}

Tensor4 tp_conv_pair_bwd_cuda(CT g, CT x, CT y, CT h, CT W, CT w_row, CT src, CT dst, CT dst_ptr, CT src_perm,
                              CT src_ptr, CT paths, CT cg_ptr, CT cg_idx, CT cg_val, at::TensorList kept,
                              bool need_W) {
  c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(g.dim() == 2, "md_accel tp_conv_pair_bwd: grad_out must be 2-D");
  const Call c = prepare_pair(x, y, h, W, g, w_row, src, dst, dst_ptr, src_perm, src_ptr, g.size(1));
  return tp_conv_pair_bwd(c.g, c.x, c.y, c.h, c.W, c.w_row, c.src, c.dst, c.dst_ptr, c.src_perm, c.src_ptr, paths,
                          cg_ptr, cg_idx, cg_val, need_W, kept.vec());
}

}  // namespace
}  // namespace md_accel

// Management of the fused kernel libraries (no tensor arguments: catch-all kernels).
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def("_tp_conv_fused_load(str path) -> int", md_accel::load_fused);
  m.def("_tp_conv_fused_set(bool enabled) -> bool", md_accel::set_fused);
}

TORCH_LIBRARY_IMPL(md_accel, CUDA, m) {
  m.impl("tp_conv_fused_fwd", md_accel::tp_conv_fused_fwd_cuda);
  m.impl("tp_conv_fused_bwd", md_accel::tp_conv_fused_bwd_cuda);
  m.impl("_tp_conv_fused_fwd_keep", md_accel::tp_conv_fused_fwd_keep_cuda);
  m.impl("_tp_conv_fused_bwd_kept", md_accel::tp_conv_fused_bwd_kept_cuda);
  m.impl("_tp_conv_pair_fwd_keep", md_accel::tp_conv_pair_fwd_keep_cuda);
  m.impl("_tp_conv_pair_bwd", md_accel::tp_conv_pair_bwd_cuda);
}
