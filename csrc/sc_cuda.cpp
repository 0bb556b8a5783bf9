// CUDA implementations of md_accel::symmetric_contraction_{fwd,bwd,dbwd}: argument checks, the
// per-term-list host tables (cached), the species sort for weight gradients, output allocation
// and the launch of the generated kernels (a dlopen'ed library whose recorded term list equals
// the call's, md_accel/ops/_sc_codegen.py) or else the generic ones (sc_kernels.cu).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <vector>

#include "sc_abi.h"
#include "spec_registry.h"

namespace md_accel {
namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------
// Generated kernel libraries. A term list uses the most recently loaded library that recorded
// it; MD_ACCEL_SC_KERNELS (colon-separated .so paths) preloads libraries for C++ users.
SpecRegistry<SCSpec> g_specs("symmetric_contraction", "md_accel_sc_spec_v1", kSCAbiVersion,
                             "MD_ACCEL_SC_KERNELS");

int64_t load_specialised(std::string path) { return g_specs.load(path); }

bool set_specialised(bool enabled) { return g_specs.set_enabled(enabled); }

// Host-side facts about one term list and its device tables. Entries hold strong references to
// the key tensors (their addresses cannot be reused); a changed version counter rebuilds.
struct TermsEntry {
  Tensor terms, values;  // the caller's tensors (keys)
  int64_t v_terms, v_values;
  int device;
  std::vector<int64_t> in_dims, out_dims;
  Tensor h_terms, h_values;                 // int32 / float64 host copies
  Tensor d_terms, d_in_map, d_out_map;      // int32 device tables (generic kernels)
  Tensor d_values_f32, d_values_f64;
  int64_t num_in = 0, num_out = 0, max_k = -1;
  const SCSpec* spec = nullptr;
  int spec_generation = -1;
};

bool spec_matches(const SCSpec* s, const TermsEntry& te) {
  const int64_t T = te.h_terms.size(0), W = te.h_terms.size(1);
  if (s->num_terms != T || s->term_width != W || s->num_in_blocks != int64_t(te.in_dims.size()) ||
      s->num_out_blocks != int64_t(te.out_dims.size()))
    return false;
  for (size_t i = 0; i < te.in_dims.size(); ++i)
    if (s->in_dims[i] != te.in_dims[i]) return false;
  for (size_t i = 0; i < te.out_dims.size(); ++i)
    if (s->out_dims[i] != te.out_dims[i]) return false;
  return std::memcmp(s->terms, te.h_terms.data_ptr<int32_t>(), sizeof(int32_t) * T * W) == 0 &&
         std::memcmp(s->values, te.h_values.data_ptr<double>(), sizeof(double) * T) == 0;
}

void attach_spec(TermsEntry& te) {
  const int gen = g_specs.generation();
  if (te.spec_generation == gen) return;
  te.spec = g_specs.find([&](const SCSpec* s) { return spec_matches(s, te); });
  te.spec_generation = gen;
}

Tensor component_map(const std::vector<int64_t>& dims) {
  int64_t total = 0;
  for (auto d : dims) total += d;
  Tensor map = at::empty({total, 3}, at::TensorOptions().dtype(at::kInt));
  int32_t* p = map.data_ptr<int32_t>();
  int64_t off = 0;
  for (auto d : dims) {
    for (int64_t m = 0; m < d; ++m, p += 3) {
      p[0] = int32_t(off);
      p[1] = int32_t(d);
      p[2] = int32_t(m);
    }
    off += d;
  }
  return map;
}

void build_entry(TermsEntry& te) {
  for (auto d : te.in_dims) TORCH_CHECK(d > 0, "md_accel symmetric_contraction: in_dims must be positive");
  for (auto d : te.out_dims) TORCH_CHECK(d > 0, "md_accel symmetric_contraction: out_dims must be positive");
  TORCH_CHECK(!te.in_dims.empty() && !te.out_dims.empty(), "md_accel symmetric_contraction: empty in_dims/out_dims");
  const Tensor terms = te.terms.to(at::kCPU, at::kInt).contiguous();
  const Tensor values = te.values.to(at::kCPU, at::kDouble).contiguous();
  TORCH_CHECK(terms.dim() == 2 && terms.size(1) >= 3, "md_accel symmetric_contraction: terms must be [T, 2 + nu_max]");
  TORCH_CHECK(values.dim() == 1 && values.size(0) == terms.size(0), "md_accel symmetric_contraction: values must be [T]");
  for (auto d : te.in_dims) te.num_in += d;
  for (auto d : te.out_dims) te.num_out += d;
  const int64_t T = terms.size(0), W = terms.size(1);
  const int32_t* p = terms.data_ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t, p += W) {
    TORCH_CHECK(p[0] >= 0 && p[0] < te.num_out && p[1] >= 0 && p[2] >= 0,
                "md_accel symmetric_contraction: term ", t, " out of range");
    te.max_k = std::max<int64_t>(te.max_k, p[1]);
    bool pad = false;
    for (int64_t j = 2; j < W; ++j) {
      TORCH_CHECK(p[j] < te.num_in && (p[j] >= 0 || p[j] == -1) && !(pad && p[j] >= 0),
                  "md_accel symmetric_contraction: term ", t, " has invalid input indices");
      pad = pad || p[j] < 0;
    }
  }
  const auto dev = at::Device(at::kCUDA, te.device);
  te.h_terms = terms;
  te.h_values = values;
  te.d_terms = terms.to(dev);
  te.d_values_f64 = values.to(dev);
  te.d_values_f32 = values.to(dev, at::kFloat);
  te.d_in_map = component_map(te.in_dims).to(dev);
  te.d_out_map = component_map(te.out_dims).to(dev);
  attach_spec(te);
}

TermsEntry terms_entry(const Tensor& terms, const Tensor& values, c10::IntArrayRef in_dims,
                       c10::IntArrayRef out_dims, int device) {
  static std::mutex mutex;
  static std::vector<TermsEntry> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& te : cache) {
    if (te.device == device && te.terms.unsafeGetTensorImpl() == terms.unsafeGetTensorImpl() &&
        te.values.unsafeGetTensorImpl() == values.unsafeGetTensorImpl() && te.in_dims == in_dims.vec() &&
        te.out_dims == out_dims.vec()) {
      if (te.v_terms == terms._version() && te.v_values == values._version()) {
        attach_spec(te);
        return te;
      }
      TermsEntry fresh{terms, values, terms._version(), values._version(), device, in_dims.vec(), out_dims.vec()};
      build_entry(fresh);
      te = fresh;
      return fresh;
    }
  }
  TermsEntry fresh{terms, values, terms._version(), values._version(), device, in_dims.vec(), out_dims.vec()};
  build_entry(fresh);
  cache.push_back(fresh);
  return fresh;  // a copy: the cache may change once the lock is released
}

// Checked operands of one call; the held tensors keep the storage alive.
struct Prepared {
  TermsEntry te;
  Tensor x, species, w;
  int64_t N = 0, C = 0, E = 0, K = 0;
  const SCSpec* spec = nullptr;  // null: generic kernels
};

void check_like(const Tensor& t, const Tensor& x, const char* name) {
  TORCH_CHECK(t.defined() && t.device() == x.device(), "md_accel symmetric_contraction: ", name, " must be on ",
              x.device());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), "md_accel symmetric_contraction: ", name, " must be ",
              x.scalar_type());
}

Prepared prepare(const Tensor& x, const Tensor& species, const Tensor& w, const Tensor& terms,
                 const Tensor& values, c10::IntArrayRef in_dims, c10::IntArrayRef out_dims) {
  TORCH_CHECK(x.is_cuda(), "md_accel symmetric_contraction (CUDA): x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "md_accel symmetric_contraction: float32 or float64 only, got ", x.scalar_type());
  Prepared p;
  p.te = terms_entry(terms, values, in_dims, out_dims, x.device().index());
  p.x = x.contiguous();
  p.w = w.contiguous();
  TORCH_CHECK(p.x.dim() == 2 && p.x.size(1) % p.te.num_in == 0, "md_accel symmetric_contraction: x must be [N, C * ",
              p.te.num_in, "], got ", x.sizes());
  p.N = p.x.size(0);
  p.C = p.x.size(1) / p.te.num_in;
  check_like(p.w, p.x, "w");
  TORCH_CHECK(p.w.dim() == 3 && p.w.size(2) == p.C && p.w.size(1) > p.te.max_k,
              "md_accel symmetric_contraction: w must be [E, K > ", p.te.max_k, ", ", p.C, "], got ", w.sizes());
  p.E = p.w.size(0);
  p.K = p.w.size(1);
  TORCH_CHECK(species.device() == x.device() && species.scalar_type() == at::kLong && species.dim() == 1 &&
                  species.size(0) == p.N,
              "md_accel symmetric_contraction: species must be int64 [", p.N, "] on ", x.device());
  p.species = species.contiguous();
  p.spec = g_specs.enabled() && p.te.spec != nullptr && p.te.spec->num_k == p.K ? p.te.spec : nullptr;
  return p;
}

template <typename T>
const T* cptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <typename T>
T* mptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// Scratch of the weight-gradient reduction (sc_chunking); kept alive by the caller.
struct WeightScratch {
  Tensor sorted, perm, bucket_off, chunk_off, partial;
  int64_t nb = 1, num_chunks = 0;
};

WeightScratch weight_scratch(const Prepared& p) {
  WeightScratch s;
  std::tie(s.sorted, s.perm) = at::sort(p.species, /*stable=*/true, 0, false);
  sc_chunking(p.N, p.C, p.E, &s.nb, &s.num_chunks);
  const auto idx = p.species.options();
  s.bucket_off = at::empty({p.E + 3}, idx);
  s.chunk_off = at::empty({p.E + 3}, idx);
  s.partial = at::empty({s.num_chunks * p.K * p.C}, p.x.options());
  return s;
}

template <typename T>
SCArgs<T> args(const Prepared& p, const Tensor& g, const Tensor& ggx, const Tensor& ggw, const Tensor& out,
               const Tensor& gx, const Tensor& gw, const WeightScratch* ws) {
  SCArgs<T> a{};
  a.N = p.N;
  a.C = p.C;
  a.E = p.E;
  a.K = p.K;
  a.x = cptr<T>(p.x);
  a.species = p.species.data_ptr<int64_t>();
  a.w = cptr<T>(p.w);
  a.g = cptr<T>(g);
  a.ggx = cptr<T>(ggx);
  a.ggw = cptr<T>(ggw);
  a.out = mptr<T>(out);
  a.gx = mptr<T>(gx);
  a.gw = mptr<T>(gw);
  if (ws != nullptr) {
    a.perm = ws->perm.data_ptr<int64_t>();
    a.sorted_species = ws->sorted.data_ptr<int64_t>();
    a.bucket_off = ws->bucket_off.data_ptr<int64_t>();
    a.chunk_off = ws->chunk_off.data_ptr<int64_t>();
    a.partial = mptr<T>(ws->partial);
    a.nb = ws->nb;
    a.num_chunks = ws->num_chunks;
  }
  a.terms = p.te.d_terms.data_ptr<int32_t>();
  a.values = sizeof(T) == 4 ? static_cast<const T*>(p.te.d_values_f32.data_ptr())
                            : static_cast<const T*>(p.te.d_values_f64.data_ptr());
  a.in_map = p.te.d_in_map.data_ptr<int32_t>();
  a.out_map = p.te.d_out_map.data_ptr<int32_t>();
  a.num_terms = p.te.h_terms.size(0);
  a.term_width = p.te.h_terms.size(1);
  a.num_in = p.te.num_in;
  a.num_out = p.te.num_out;
  return a;
}

template <typename T>
void run(int mode, const Prepared& p, const SCArgs<T>& a) {
  auto stream = c10::cuda::getCurrentCUDAStream(p.x.device().index()).stream();
  const char* err;
  if (p.spec != nullptr) {
    if constexpr (sizeof(T) == 4)
      err = p.spec->launch_f32(mode, &a, stream);
    else
      err = p.spec->launch_f64(mode, &a, stream);
  } else
    err = sc_generic_launch<T>(mode, &a, stream);
  TORCH_CHECK(err == nullptr, "md_accel symmetric_contraction: ", err);
}

void dispatch(int mode, const Prepared& p, const Tensor& g, const Tensor& ggx, const Tensor& ggw, const Tensor& out,
              const Tensor& gx, const Tensor& gw, const WeightScratch* ws) {
  if (p.x.scalar_type() == at::kDouble)
    run<double>(mode, p, args<double>(p, g, ggx, ggw, out, gx, gw, ws));
  else
    run<float>(mode, p, args<float>(p, g, ggx, ggw, out, gx, gw, ws));
}

Tensor sc_fwd_cuda(const Tensor& x, const Tensor& species, const Tensor& w, const Tensor& terms, const Tensor& values,
                   c10::IntArrayRef in_dims, c10::IntArrayRef out_dims) {
  c10::cuda::CUDAGuard guard(x.device());
  const Prepared p = prepare(x, species, w, terms, values, in_dims, out_dims);
  Tensor out = at::empty({p.N, p.C * p.te.num_out}, p.x.options());
  const Tensor none;
  dispatch(0, p, none, none, none, out, none, none, nullptr);
  return out;
}

Tensor checked_rows(const Tensor& t, const Prepared& p, int64_t width, const char* name) {
  check_like(t, p.x, name);
  TORCH_CHECK(t.dim() == 2 && t.size(0) == p.N && t.size(1) == width, "md_accel symmetric_contraction: ", name,
              " must be [", p.N, ", ", width, "], got ", t.sizes());
  return t.contiguous();
}

std::tuple<Tensor, Tensor> sc_bwd_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& species,
                                       const Tensor& w, const Tensor& terms, const Tensor& values,
                                       c10::IntArrayRef in_dims, c10::IntArrayRef out_dims, bool need_w) {
  c10::cuda::CUDAGuard guard(x.device());
  const Prepared p = prepare(x, species, w, terms, values, in_dims, out_dims);
  const Tensor g = checked_rows(grad_out, p, p.C * p.te.num_out, "grad_out");
  Tensor gx = at::empty_like(p.x);
  const Tensor none;
  if (!need_w) {
    dispatch(1, p, g, none, none, none, gx, none, nullptr);
    return {gx, at::zeros_like(p.w)};
  }
  Tensor gw = at::empty_like(p.w);
  const WeightScratch ws = weight_scratch(p);
  dispatch(1, p, g, none, none, none, gx, gw, &ws);
  return {gx, gw};
}

std::tuple<Tensor, Tensor, Tensor> sc_dbwd_cuda(const Tensor& gg_x, const Tensor& gg_w, const Tensor& grad_out,
                                                const Tensor& x, const Tensor& species, const Tensor& w,
                                                const Tensor& terms, const Tensor& values,
                                                c10::IntArrayRef in_dims, c10::IntArrayRef out_dims) {
  c10::cuda::CUDAGuard guard(x.device());
  const Prepared p = prepare(x, species, w, terms, values, in_dims, out_dims);
  const Tensor g = checked_rows(grad_out, p, p.C * p.te.num_out, "grad_out");
  const Tensor ggx = checked_rows(gg_x, p, p.x.size(1), "gg_x");
  check_like(gg_w, p.x, "gg_w");
  TORCH_CHECK(gg_w.sizes() == p.w.sizes(), "md_accel symmetric_contraction: gg_w must have the shape of w");
  const Tensor ggw = gg_w.contiguous();
  Tensor ggo = at::empty_like(g), gx = at::empty_like(p.x), gw = at::empty_like(p.w);
  const WeightScratch ws = weight_scratch(p);
  dispatch(2, p, g, ggx, ggw, ggo, gx, gw, &ws);
  return {ggo, gx, gw};
}

}  // namespace
}  // namespace md_accel

// Management of the generated kernel libraries (no tensor arguments: catch-all kernels).
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def("_sc_load_specialised(str path) -> int", md_accel::load_specialised);
  m.def("_sc_set_specialised(bool enabled) -> bool", md_accel::set_specialised);
}

TORCH_LIBRARY_IMPL(md_accel, CUDA, m) {
  m.impl("symmetric_contraction_fwd", md_accel::sc_fwd_cuda);
  m.impl("symmetric_contraction_bwd", md_accel::sc_bwd_cuda);
  m.impl("symmetric_contraction_dbwd", md_accel::sc_dbwd_cuda);
}
