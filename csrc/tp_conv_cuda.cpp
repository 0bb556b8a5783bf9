// CUDA implementations of md_accel::tp_conv_{fwd,bwd,dbwd}: argument checks, the per-plan host
// preprocessing (cached), output allocation and the kernel launches (tp_conv_kernels.cu).
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "final_backward.h"
#include "tp_conv.h"
#include "tp_conv_chunked.h"
#include "spec_registry.h"
#include "tp_spec_abi.h"

namespace md_accel {
namespace {

using at::Tensor;

// ---------------------------------------------------------------------------------------------
// Plan-specialised kernel libraries (md_accel/ops/_codegen.py, csrc/tp_spec_abi.h). A call uses
// the most recently loaded library whose integer tables equal its plan's and whose compiled-in CG
// values equal the call's cg_val in the call's dtype; otherwise the generic kernels.
// MD_ACCEL_TP_KERNELS (colon-separated .so paths) preloads libraries for C++ users.
SpecRegistry<TPSpec> g_specs("tp_conv", "md_accel_tp_spec_v1", kTPSpecAbiVersion, "MD_ACCEL_TP_KERNELS");

int64_t load_specialised(std::string path) { return g_specs.load(path); }

bool set_specialised(bool enabled) { return g_specs.set_enabled(enabled); }

// Deterministic grad_x in the specialised backward and double backward (the default): per-edge rows
// summed per sender in a fixed order. Off (MD_ACCEL_DETERMINISTIC=0 or md_accel::set_deterministic):
// atomic adds straight into grad_x (TPDims::atomic_gx), E x in1 elements less memory and one pass less,
// results not bit-reproducible; torch.use_deterministic_algorithms(True) keeps it deterministic.
std::atomic<bool> g_deterministic{[] {
  const char* env = std::getenv("MD_ACCEL_DETERMINISTIC");
  return env == nullptr || std::strcmp(env, "0") != 0;
}()};

bool set_deterministic(bool enabled) { return g_deterministic.exchange(enabled); }

// Where the deterministic specialised backward and double backward keep each edge's grad_x row until the
// per-sender sum: in a scratch buffer of E x in1 elements, or in grad_w columns that are written later
// (TPDims::rows_in_gw, no scratch, where the library offers it; md_accel/ops/_rows_plan.py). Modes: off (always
// the scratch), on (grad_w wherever offered: the op's backward and double backward, the edge chunks of the
// fused-radial and pair ops), auto (the default: grad_w only in the plain op's final backwards, final_backward.h,
// where the rows set the pass's peak). From MD_ACCEL_ROWS_IN_GRAD_W=0 / 1 / auto or md_accel::set_rows_in_grad_w.
enum RowsMode : int64_t { kRowsOff = 0, kRowsOn = 1, kRowsAuto = 2 };
std::atomic<int64_t> g_rows_mode{[] {
  const char* env = std::getenv("MD_ACCEL_ROWS_IN_GRAD_W");
  if (env == nullptr || std::strcmp(env, "auto") == 0) return int64_t(kRowsAuto);
  if (std::strcmp(env, "0") == 0) return int64_t(kRowsOff);
  if (std::strcmp(env, "1") == 0) return int64_t(kRowsOn);
  TORCH_WARN("md_accel: MD_ACCEL_ROWS_IN_GRAD_W=", env, " is none of 0, 1, auto: auto");
  return int64_t(kRowsAuto);
}()};

int64_t set_rows_in_grad_w(int64_t mode) {
  TORCH_CHECK(mode == kRowsOff || mode == kRowsOn || mode == kRowsAuto,
              "md_accel: rows-in-grad_w mode must be 0 (off), 1 (on) or 2 (auto), got ", mode);
  return g_rows_mode.exchange(mode);
}

// Whether a final double backward writes its grad_w into the gg_w that its caller donated (final_backward.h:
// DonatedGgW), where the kernels allow it. On by default; MD_ACCEL_DBWD_IN_GG_W=0 or
// md_accel::set_dbwd_in_gg_w(false) turns it off.
std::atomic<bool> g_dbwd_in_gg_w{[] {
  const char* env = std::getenv("MD_ACCEL_DBWD_IN_GG_W");
  if (env == nullptr || std::strcmp(env, "1") == 0) return true;
  if (std::strcmp(env, "0") == 0) return false;
  TORCH_WARN("md_accel: MD_ACCEL_DBWD_IN_GG_W=", env, " is neither 0 nor 1: 1");
  return true;
}()};

bool set_dbwd_in_gg_w(bool enabled) { return g_dbwd_in_gg_w.exchange(enabled); }

// The bit of x's dtype in TPSpec's per-dtype fields (rows_in_gw per pass, dbwd_in_gg_w): 1 float32, 2 float64.
int dtype_bit(const Tensor& x) { return x.scalar_type() == at::kDouble ? 2 : 1; }

// Whether a deterministic launch of spec's backward (dbwd: double backward) in x's dtype keeps its rows in grad_w.
bool rows_in_grad_w(const TPSpec* spec, bool dbwd, const Tensor& x) {
  const int bit = dtype_bit(x) << (dbwd ? 2 : 0);
  const int64_t mode = g_rows_mode.load();
  const bool wanted = mode == kRowsOn || (mode == kRowsAuto && FinalBackward::active());
  return wanted && (spec->rows_in_gw & bit) != 0;
}

// Host-side facts about one plan, and its device tables. The paths/cg tables are read on the
// host once per plan (one device->host copy); entries hold strong references to the key tensors
// so their addresses cannot be reused, and a changed version counter invalidates the entry.
struct PlanEntry {
  Tensor paths, cg_ptr, cg_idx;  // the caller's tensors (keys)
  int64_t v_paths, v_ptr, v_idx;
  int device;
  Tensor d_paths, d_cg_ptr, d_cg_ijk;  // int32 device copies
  int num_paths = 0, nnz = 0, max_mul = 0;
  int64_t ext_in1 = 0, ext_in2 = 0, ext_out = 0, ext_w = 0;  // minimal row widths
  Tensor h_paths, h_cg_ptr, h_cg_idx;  // int32 host copies (matched against specialised libraries)
  // The specialised libraries per dtype (null: none) for the CG values of the call that matched
  // them last: that call's cg_val (a strong reference) at its version, and the registry generation.
  const TPSpec* spec_f32 = nullptr;
  const TPSpec* spec_f64 = nullptr;
  Tensor matched_val;
  int64_t v_matched_val = -1;
  int spec_generation = -1;
};

bool tables_match(const TPSpec* s, const PlanEntry& pe) {
  const int64_t P = pe.num_paths, nnz = pe.nnz;
  return s->num_paths == P && s->nnz == nnz &&
         std::memcmp(s->paths, pe.h_paths.data_ptr<int>(), sizeof(int32_t) * P * kPathCols) == 0 &&
         std::memcmp(s->cg_ptr, pe.h_cg_ptr.data_ptr<int>(), sizeof(int32_t) * (P + 1)) == 0 &&
         std::memcmp(s->cg_idx, pe.h_cg_idx.data_ptr<int>(), sizeof(int32_t) * nnz * 3) == 0;
}

// The compiled-in values serve a call whose cg_val (vals: its values, exactly, as double) converts
// to the same numbers in the call's dtype.
bool values_match(const double* compiled, const double* vals, int64_t nnz, bool f64) {
  for (int64_t q = 0; q < nnz; ++q)
    if (f64 ? compiled[q] != vals[q] : float(compiled[q]) != float(vals[q])) return false;
  return true;
}

// Whether the current stream of `device` is capturing a CUDA graph (the raw runtime call: the c10
// helpers for it differ between torch versions). A failed query counts as capturing.
bool stream_is_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(c10::cuda::getCurrentCUDAStream(device).stream(), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

// Finds the libraries serving the call's cg_val. Its values are read (one device->host copy) only
// when a library has the plan's integer tables and cg_val is not the tensor, at the same version,
// matched last. Inference tensors have no version counter: matched on every call. During CUDA
// graph capture (no copy allowed) an unmatched cg_val gets the generic kernels for that call.
// cg_val must change only through tensor operations: a write that leaves its version counter alone
// (through .data, a raw pointer) is not seen.
void attach_spec(PlanEntry& pe, const Tensor& cg_val) {
  if (!g_specs.enabled()) return;  // nothing is used, nothing recorded
  const int gen = g_specs.generation();
  const bool versioned = !cg_val.is_inference();
  if (pe.spec_generation == gen && versioned && pe.matched_val.defined() &&
      pe.matched_val.unsafeGetTensorImpl() == cg_val.unsafeGetTensorImpl() &&
      pe.v_matched_val == cg_val._version())
    return;
  pe.spec_f32 = pe.spec_f64 = nullptr;
  pe.matched_val = Tensor();
  pe.spec_generation = gen;
  const bool candidate = g_specs.find([&](const TPSpec* s) { return tables_match(s, pe); }) != nullptr;
  if (candidate && cg_val.dim() == 1 && cg_val.numel() == pe.nnz && cg_val.is_floating_point()) {
    if (cg_val.is_cuda() && stream_is_capturing(pe.device)) {
      pe.spec_generation = -1;  // matched after the capture
      return;
    }
    const Tensor vals = cg_val.to(at::kCPU, at::kDouble).contiguous();  // exact for float32 and float64
    for (const bool f64 : {false, true}) {
      const TPSpec* s = g_specs.find([&](const TPSpec* c) {
        return tables_match(c, pe) && values_match(c->cg_val, vals.data_ptr<double>(), pe.nnz, f64);
      });
      (f64 ? pe.spec_f64 : pe.spec_f32) = s;
    }
  }
  if (versioned) {
    pe.matched_val = cg_val;
    pe.v_matched_val = cg_val._version();
  }
}

void build_entry(PlanEntry& pe) {
  const Tensor paths = pe.paths.to(at::kCPU, at::kInt).contiguous();
  const Tensor ptr = pe.cg_ptr.to(at::kCPU, at::kInt).contiguous();
  const Tensor idx = pe.cg_idx.to(at::kCPU, at::kInt).contiguous();
  TORCH_CHECK(paths.dim() == 2 && paths.size(1) == kPathCols, "md_accel tp_conv: paths must be [P, ",
              kPathCols, "], got ", paths.sizes());
  const int64_t P = paths.size(0);
  TORCH_CHECK(ptr.dim() == 1 && ptr.numel() == P + 1, "md_accel tp_conv: cg_ptr must be [P+1]");
  const int64_t nnz = idx.numel() / 3;
  TORCH_CHECK(idx.dim() == 2 && idx.size(1) == 3, "md_accel tp_conv: cg_idx must be [nnz, 3]");
  const int* pp = paths.data_ptr<int>();
  const int* cp = ptr.data_ptr<int>();
  const int* ip = idx.data_ptr<int>();
  TORCH_CHECK(cp[0] == 0 && cp[P] == nnz, "md_accel tp_conv: cg_ptr must run from 0 to nnz");
  Tensor ijk = at::empty({nnz}, at::TensorOptions().dtype(at::kInt));
  int* kp = ijk.data_ptr<int>();
  for (int64_t p = 0; p < P; ++p) {
    const int* r = pp + kPathCols * p;
    const int in1_off = r[0], mul = r[1], l1 = r[2], in2_off = r[3], l2 = r[4], out_off = r[5],
              l3 = r[6], w_off = r[7], w_stride = r[8];
    TORCH_CHECK(in1_off >= 0 && mul >= 0 && in2_off >= 0 && out_off >= 0 && w_off >= 0 &&
                    w_stride >= 0 && l1 >= 0 && l2 >= 0 && l3 >= 0 && l1 < 100 && l2 < 100 &&
                    l3 < 100,
                "md_accel tp_conv: invalid paths row ", p);
    TORCH_CHECK(cp[p] <= cp[p + 1], "md_accel tp_conv: cg_ptr must be non-decreasing");
    const int d1 = 2 * l1 + 1, d2 = 2 * l2 + 1, d3 = 2 * l3 + 1;
    pe.max_mul = std::max(pe.max_mul, mul);
    pe.ext_in2 = std::max<int64_t>(pe.ext_in2, int64_t(in2_off) + d2);
    if (mul > 0) {
      pe.ext_in1 = std::max<int64_t>(pe.ext_in1, in1_off + int64_t(mul) * d1);
      pe.ext_out = std::max<int64_t>(pe.ext_out, out_off + int64_t(mul) * d3);
      pe.ext_w = std::max<int64_t>(pe.ext_w, w_off + int64_t(mul - 1) * w_stride + 1);
    }
    for (int q = cp[p]; q < cp[p + 1]; ++q) {
      const int i = ip[3 * q], j = ip[3 * q + 1], k = ip[3 * q + 2];
      TORCH_CHECK(0 <= i && i < d1 && 0 <= j && j < d2 && 0 <= k && k < d3,
                  "md_accel tp_conv: cg_idx entry ", q, " out of range for path ", p);
      kp[q] = i | (j << 8) | (k << 16);
    }
  }
  pe.num_paths = int(P);
  pe.nnz = int(nnz);
  const auto dev = at::Device(at::kCUDA, pe.device);
  pe.d_paths = paths.to(dev);
  pe.d_cg_ptr = ptr.to(dev);
  pe.d_cg_ijk = ijk.to(dev);
  pe.h_paths = paths;
  pe.h_cg_ptr = ptr;
  pe.h_cg_idx = idx.reshape({nnz, 3});
}

PlanEntry plan_entry(const Tensor& paths, const Tensor& cg_ptr, const Tensor& cg_idx, const Tensor& cg_val,
                     int device) {
  static std::mutex mutex;
  static std::vector<PlanEntry> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& pe : cache) {
    if (pe.device == device && pe.paths.unsafeGetTensorImpl() == paths.unsafeGetTensorImpl() &&
        pe.cg_ptr.unsafeGetTensorImpl() == cg_ptr.unsafeGetTensorImpl() &&
        pe.cg_idx.unsafeGetTensorImpl() == cg_idx.unsafeGetTensorImpl()) {
      if (pe.v_paths == paths._version() && pe.v_ptr == cg_ptr._version() &&
          pe.v_idx == cg_idx._version()) {
        attach_spec(pe, cg_val);
        return pe;
      }
      PlanEntry fresh{paths, cg_ptr, cg_idx, paths._version(), cg_ptr._version(),
                      cg_idx._version(), device};
      build_entry(fresh);
      attach_spec(fresh, cg_val);
      pe = fresh;
      return fresh;
    }
  }
  PlanEntry fresh{paths, cg_ptr, cg_idx, paths._version(), cg_ptr._version(), cg_idx._version(),
                  device};
  build_entry(fresh);
  attach_spec(fresh, cg_val);
  cache.push_back(fresh);
  return fresh;  // a copy: the cache may change once the lock is released
}

// Everything a launch needs, checked and made contiguous. Held tensors keep the storage alive.
struct Prepared {
  TPGraph graph;
  TPPlan plan;
  TPDims dims;
  Tensor src, dst, dst_ptr, src_perm, src_ptr, cg_val;
  Tensor d_paths, d_cg_ptr, d_cg_ijk;
  const TPSpec* spec = nullptr;  // null: generic kernels
};

Tensor graph_tensor(const Tensor& t, const at::Device& dev, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kLong && t.dim() == 1, "md_accel tp_conv: ", name,
              " must be a 1-D int64 tensor");
  TORCH_CHECK(t.device() == dev, "md_accel tp_conv: ", name, " must be on ", dev);
  return t.contiguous();
}

void check_features(const Tensor& t, const Tensor& x, int64_t rows, const char* name) {
  TORCH_CHECK(t.defined(), "md_accel tp_conv: ", name, " is undefined");
  TORCH_CHECK(t.device() == x.device(), "md_accel tp_conv: ", name, " must be on ", x.device());
  TORCH_CHECK(t.scalar_type() == x.scalar_type(), "md_accel tp_conv: ", name, " must be ",
              x.scalar_type());
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows, "md_accel tp_conv: ", name, " must have ", rows,
              " rows, got ", t.sizes());
  TORCH_CHECK(t.size(1) < (int64_t(1) << 30), "md_accel tp_conv: ", name, " rows too wide");
}

Prepared prepare(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& src,
                 const Tensor& dst, const Tensor& dst_ptr, const Tensor& src_perm,
                 const Tensor& src_ptr, const Tensor& paths, const Tensor& cg_ptr,
                 const Tensor& cg_idx, const Tensor& cg_val, int64_t dim_out) {
  TORCH_CHECK(x.is_cuda(), "md_accel tp_conv (CUDA): x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble,
              "md_accel tp_conv: float32 or float64 features only, got ", x.scalar_type());
  const auto dev = x.device();
  Prepared p;
  p.src = graph_tensor(src, dev, "src");
  p.dst = graph_tensor(dst, dev, "dst");
  p.dst_ptr = graph_tensor(dst_ptr, dev, "dst_ptr");
  p.src_perm = graph_tensor(src_perm, dev, "src_perm");
  p.src_ptr = graph_tensor(src_ptr, dev, "src_ptr");
  const int64_t N = p.dst_ptr.numel() - 1;
  const int64_t E = p.src.numel();
  TORCH_CHECK(N >= 0 && p.src_ptr.numel() == N + 1, "md_accel tp_conv: dst_ptr and src_ptr must be [N+1]");
  TORCH_CHECK(p.dst.numel() == E && p.src_perm.numel() == E, "md_accel tp_conv: src, dst, src_perm must be [E]");
  check_features(x, x, N, "x");
  check_features(y, x, E, "y");
  check_features(w, x, E, "w");

  const PlanEntry pe = plan_entry(paths, cg_ptr, cg_idx, cg_val, dev.index());
  TORCH_CHECK(cg_val.dim() == 1 && cg_val.numel() == pe.nnz, "md_accel tp_conv: cg_val must be [nnz]");
  p.cg_val = cg_val.to(dev, x.scalar_type()).contiguous();
  p.d_paths = pe.d_paths;
  p.d_cg_ptr = pe.d_cg_ptr;
  p.d_cg_ijk = pe.d_cg_ijk;
  p.spec = g_specs.enabled() ? (x.scalar_type() == at::kDouble ? pe.spec_f64 : pe.spec_f32) : nullptr;
  TORCH_CHECK(x.size(1) >= pe.ext_in1, "md_accel tp_conv: x has ", x.size(1), " columns, the plan needs ", pe.ext_in1);
  TORCH_CHECK(y.size(1) >= pe.ext_in2, "md_accel tp_conv: y has ", y.size(1), " columns, the plan needs ", pe.ext_in2);
  TORCH_CHECK(w.size(1) >= pe.ext_w, "md_accel tp_conv: w has ", w.size(1), " columns, the plan needs ", pe.ext_w);
  TORCH_CHECK(dim_out >= pe.ext_out && dim_out < (int64_t(1) << 30), "md_accel tp_conv: dim_out ", dim_out,
              " but the plan needs ", pe.ext_out);

  p.graph = {p.src.data_ptr<int64_t>(), p.dst.data_ptr<int64_t>(), p.dst_ptr.data_ptr<int64_t>(),
             p.src_perm.data_ptr<int64_t>(), p.src_ptr.data_ptr<int64_t>(), N, E};
  p.plan = {p.d_paths.data_ptr<int32_t>(), p.d_cg_ptr.data_ptr<int32_t>(), p.d_cg_ijk.data_ptr<int32_t>(),
            p.cg_val.data_ptr(), pe.num_paths, pe.nnz, pe.max_mul};
  p.dims = {int(x.size(1)), int(y.size(1)), int(w.size(1)), int(dim_out)};
  return p;
}

// TPDims::split for a specialised backward launch over `launch_edges` of a graph of N receivers and
// `graph_edges` edges (an edge chunk: launch_edges < graph_edges), whose per-edge kernel keeps
// `per_sm` blocks resident per SM (TPSpec::bwd_per_sm). With one part per receiver, small graphs and
// chunks (their edges sit at about N * launch_edges / graph_edges receivers) leave SMs idle while a
// few blocks walk whole degrees (SevenNet-l3i5 at 864 atoms: 0.67 ms per layer for the backward
// kernel, ~15x less work than at 32k for ~20x less time). So receivers are cut into parts until
// two resident waves of parts have edges, each part keeping at least 8 of the average degree's
// edges (a part loads its receiver's grad_out once per pass). MD_ACCEL_BWD_SPLIT (read per call)
// sets it instead; 0 or unset: this choice.
int receiver_split(int64_t N, int64_t launch_edges, int64_t graph_edges, int per_sm, int device) {
  if (N <= 0 || graph_edges <= 0) return 1;
  int64_t split = 0;
  if (const char* v = std::getenv("MD_ACCEL_BWD_SPLIT")) split = std::max<int64_t>(0, std::atoll(v));
  if (split == 0) {
    constexpr int64_t kMinEdges = 8;
    const int64_t want = 2 * std::max(1, per_sm) * sm_count(device);
    const int64_t busy = std::max<int64_t>(1, N * launch_edges / graph_edges);  // receivers with edges here
    const int64_t most = std::max<int64_t>(1, graph_edges / N / kMinEdges);
    split = busy >= want ? 1 : std::min((want + busy - 1) / busy, most);
  }
  return int(std::max<int64_t>(1, std::min<int64_t>(split, int64_t(0x7fffffff) / N)));
}

// Resident blocks per SM of spec's per-edge backward (dbwd: double backward) kernel in x's dtype.
int per_sm(const TPSpec* spec, bool dbwd, const Tensor& x) {
  const auto fn = dbwd ? spec->dbwd_per_sm : spec->bwd_per_sm;
  return fn ? fn(x.scalar_type() == at::kDouble ? 1 : 0) : 1;
}

template <typename T>
const T* cptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <typename T>
T* mptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

template <typename T>
TPTensors<T> tensors(const Tensor& x, const Tensor& y, const Tensor& w, const Tensor& g,
                     const Tensor& ggx, const Tensor& ggy, const Tensor& ggw, const Tensor& out,
                     const Tensor& gx, const Tensor& gy, const Tensor& gw) {
  return {cptr<T>(x),   cptr<T>(y),   cptr<T>(w),  cptr<T>(g),  cptr<T>(ggx), cptr<T>(ggy),
          cptr<T>(ggw), mptr<T>(out), mptr<T>(gx), mptr<T>(gy), mptr<T>(gw)};
}

void check_launch(const char* err) { TORCH_CHECK(err == nullptr, "md_accel tp_conv: ", err); }

Tensor tp_conv_fwd_cuda(const Tensor& x_, const Tensor& y_, const Tensor& w_, const Tensor& src,
                        const Tensor& dst, const Tensor& dst_ptr, const Tensor& src_perm,
                        const Tensor& src_ptr, const Tensor& paths, const Tensor& cg_ptr,
                        const Tensor& cg_idx, const Tensor& cg_val, int64_t dim_out) {
  c10::cuda::CUDAGuard guard(x_.device());
  const Tensor x = x_.contiguous(), y = y_.contiguous(), w = w_.contiguous();
  Prepared p = prepare(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, dim_out);
  Tensor out = at::empty({p.graph.num_nodes, dim_out}, x.options());
  const Tensor none;
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (x.scalar_type() == at::kDouble) {
    const auto t = tensors<double>(x, y, w, none, none, none, none, out, none, none, none);
    if (p.spec && p.spec->fwd_f64)
      check_launch(p.spec->fwd_f64(t, p.graph, p.dims, stream));
    else
      check_launch(tp_conv_fwd_launch<double>(t, p.graph, p.plan, p.dims, stream));
  } else {
    const auto t = tensors<float>(x, y, w, none, none, none, none, out, none, none, none);
    if (p.spec && p.spec->fwd_f32)
      check_launch(p.spec->fwd_f32(t, p.graph, p.dims, stream));
    else
      check_launch(tp_conv_fwd_launch<float>(t, p.graph, p.plan, p.dims, stream));
  }
  return out;
}

// The specialised backward's (and double backward's) grad_x scratch: each edge's contribution, a row per
// edge summed per sender by the launcher; with p.dims.atomic_gx grad_x itself, zeroed (the kernels add
// into it). Undefined for the generic kernels and with p.dims.rows_in_gw (the rows live in grad_w).
Tensor grad_x_workspace(const Prepared& p, bool spec, const Tensor& gx) {
  if (!spec || p.dims.rows_in_gw) return Tensor();
  if (p.dims.atomic_gx) return gx.zero_();
  return at::empty({p.graph.num_edges, gx.size(1)}, gx.options());
}

std::tuple<Tensor, Tensor, Tensor> tp_conv_bwd_cuda(
    const Tensor& g_, const Tensor& x_, const Tensor& y_, const Tensor& w_, const Tensor& src,
    const Tensor& dst, const Tensor& dst_ptr, const Tensor& src_perm, const Tensor& src_ptr,
    const Tensor& paths, const Tensor& cg_ptr, const Tensor& cg_idx, const Tensor& cg_val) {
  c10::cuda::CUDAGuard guard(x_.device());
  const Tensor g = g_.contiguous(), x = x_.contiguous(), y = y_.contiguous(), w = w_.contiguous();
  TORCH_CHECK(g.dim() == 2, "md_accel tp_conv_bwd: grad_out must be 2-D");
  Prepared p = prepare(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, g.size(1));
  check_features(g, x, p.graph.num_nodes, "grad_out");
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gw = at::empty_like(w);
  const Tensor none;
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const bool spec = p.spec && (x.scalar_type() == at::kDouble ? p.spec->bwd_f64 != nullptr
                                                               : p.spec->bwd_f32 != nullptr);
  p.dims.atomic_gx = spec && tp_conv_atomic_gx();
  p.dims.rows_in_gw = spec && !p.dims.atomic_gx && rows_in_grad_w(p.spec, false, x);
  if (spec && !p.dims.atomic_gx && !p.dims.rows_in_gw) {  // large graphs: edge chunks, for memory (tp_conv_chunked.h)
    const int64_t step = tp_conv_bwd_chunk_edges(p.graph.num_edges, x.size(1), x.element_size());
    if (step < p.graph.num_edges) {
      tp_conv_bwd_edge_chunks(p.spec, g, x, y, w, p.src, p.dst, p.dst_ptr, p.src_perm, p.src_ptr, step, gx, gy,
                              gw);
      return {gx, gy, gw};
    }
  }
  const Tensor work = grad_x_workspace(p, spec, gx);
  if (spec)
    p.dims.split = receiver_split(p.graph.num_nodes, p.graph.num_edges, p.graph.num_edges, per_sm(p.spec, false, x),
                                  x.device().index());
  if (x.scalar_type() == at::kDouble) {
    const auto t = tensors<double>(x, y, w, g, none, none, none, none, gx, gy, gw);
    if (spec)
      check_launch(p.spec->bwd_f64(t, p.graph, p.dims, mptr<double>(work), stream));
    else
      check_launch(tp_conv_bwd_launch<double>(t, p.graph, p.plan, p.dims, stream));
  } else {
    const auto t = tensors<float>(x, y, w, g, none, none, none, none, gx, gy, gw);
    if (spec)
      check_launch(p.spec->bwd_f32(t, p.graph, p.dims, mptr<float>(work), stream));
    else
      check_launch(tp_conv_bwd_launch<float>(t, p.graph, p.plan, p.dims, stream));
  }
  return {gx, gy, gw};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> tp_conv_dbwd_cuda(
    const Tensor& ggx_, const Tensor& ggy_, const Tensor& ggw_, const Tensor& g_, const Tensor& x_,
    const Tensor& y_, const Tensor& w_, const Tensor& src, const Tensor& dst, const Tensor& dst_ptr,
    const Tensor& src_perm, const Tensor& src_ptr, const Tensor& paths, const Tensor& cg_ptr,
    const Tensor& cg_idx, const Tensor& cg_val, bool need_grad_out) {
  c10::cuda::CUDAGuard guard(x_.device());
  const Tensor g = g_.contiguous(), x = x_.contiguous(), y = y_.contiguous(), w = w_.contiguous();
  const Tensor ggx = ggx_.contiguous(), ggy = ggy_.contiguous(), ggw = ggw_.contiguous();
  TORCH_CHECK(g.dim() == 2, "md_accel tp_conv_dbwd: grad_out must be 2-D");
  Prepared p = prepare(x, y, w, src, dst, dst_ptr, src_perm, src_ptr, paths, cg_ptr, cg_idx, cg_val, g.size(1));
  check_features(g, x, p.graph.num_nodes, "grad_out");
  check_features(ggx, x, x.size(0), "gg_x");
  check_features(ggy, x, y.size(0), "gg_y");
  check_features(ggw, x, w.size(0), "gg_w");
  TORCH_CHECK(ggx.size(1) == x.size(1) && ggy.size(1) == y.size(1) && ggw.size(1) == w.size(1),
              "md_accel tp_conv_dbwd: gg_x, gg_y, gg_w must have the shapes of x, y, w");
  // g_grad_out: an empty [0, out] unless asked for (its kernel, a forward pass, is then not launched)
  Tensor ggo = need_grad_out ? at::empty_like(g) : g.new_empty({0, g.size(1)});
  const Tensor ggo_out = need_grad_out ? ggo : Tensor();  // undefined: null t.out, no g_grad_out
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const bool spec = p.spec && (x.scalar_type() == at::kDouble ? p.spec->dbwd_f64 != nullptr
                                                               : p.spec->dbwd_f32 != nullptr);
  p.dims.atomic_gx = spec && tp_conv_atomic_gx();
  // grad_w into the donated gg_w (final_backward.h): with the scratch or atomic grad_x, whose part 1 reads each
  // gg_w element before writing that grad_w element; the rows in grad_w would overwrite gg_w columns that later
  // runs read. Preferred to the rows unless they are forced on (mode on): E x w memory less for E x in1 more.
  // The result then aliases the gg_w argument, which the schema does not declare: only the marking backward,
  // which drops gg_w, sees it (a call through the dispatcher with any other tensor, opcheck or a fake tensor
  // included, gets fresh outputs).
  const bool in_gg_w = spec && g_dbwd_in_gg_w.load() && g_rows_mode.load() != kRowsOn &&
                       (p.spec->dbwd_in_gg_w & dtype_bit(x)) != 0 &&
                       DonatedGgW::is(ggw_) && ggw.is_same(ggw_);
  Tensor gx = at::empty_like(x), gy = at::empty_like(y), gw = in_gg_w ? ggw : at::empty_like(w);
  p.dims.rows_in_gw = spec && !p.dims.atomic_gx && !in_gg_w && rows_in_grad_w(p.spec, true, x);
  const Tensor work = grad_x_workspace(p, spec, gx);
  if (spec)
    p.dims.split = receiver_split(p.graph.num_nodes, p.graph.num_edges, p.graph.num_edges, per_sm(p.spec, true, x),
                                  x.device().index());
  if (x.scalar_type() == at::kDouble) {
    const auto t = tensors<double>(x, y, w, g, ggx, ggy, ggw, ggo_out, gx, gy, gw);
    if (spec)
      check_launch(p.spec->dbwd_f64(t, p.graph, p.dims, mptr<double>(work), stream));
    else
      check_launch(tp_conv_dbwd_launch<double>(t, p.graph, p.plan, p.dims, stream));
  } else {
    const auto t = tensors<float>(x, y, w, g, ggx, ggy, ggw, ggo_out, gx, gy, gw);
    if (spec)
      check_launch(p.spec->dbwd_f32(t, p.graph, p.dims, mptr<float>(work), stream));
    else
      check_launch(tp_conv_dbwd_launch<float>(t, p.graph, p.plan, p.dims, stream));
  }
  return {ggo, gx, gy, gw};
}

}  // namespace

bool tp_conv_atomic_gx() { return !g_deterministic.load() && !at::globalContext().deterministicAlgorithms(); }

// --- edge chunks (tp_conv_chunked.h) -----------------------------------------------------------------
const TPSpec* tp_conv_spec_for(const Tensor& x, const Tensor& paths, const Tensor& cg_ptr, const Tensor& cg_idx,
                               const Tensor& cg_val) {
  if (!g_specs.enabled() || !x.is_cuda()) return nullptr;
  const bool f64 = x.scalar_type() == at::kDouble;
  const PlanEntry pe = plan_entry(paths, cg_ptr, cg_idx, cg_val, x.device().index());
  const TPSpec* s = f64 ? pe.spec_f64 : pe.spec_f32;
  if (s == nullptr) return nullptr;
  return (f64 ? (s->fwd_f64 && s->bwd_f64) : (s->fwd_f32 && s->bwd_f32)) ? s : nullptr;
}

namespace {
template <typename T>
void chunk_launch(TPSpecFwdFn<T> fwd, TPSpecBwdFn<T> bwd, bool backward, const Tensor& x, const Tensor& y_c,
                  const Tensor& w_c, const Tensor& g, const TPGraph& chunk, const TPDims& d, const Tensor& out_or_gx,
                  const Tensor& gy_c, const Tensor& gw_c, const Tensor& work_c) {
  const Tensor none;
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (backward)  // with d.atomic_gx the kernels add into grad_x itself; with d.rows_in_gw no work rows
    check_launch(bwd(tensors<T>(x, y_c, w_c, g, none, none, none, none, out_or_gx, gy_c, gw_c), chunk, d,
                     d.rows_in_gw ? nullptr : (d.atomic_gx ? out_or_gx : work_c).data_ptr<T>(), stream));
  else
    check_launch(fwd(tensors<T>(x, y_c, w_c, none, none, none, none, out_or_gx, none, none, none), chunk, d, stream));
}
}  // namespace

bool tp_conv_chunk_rows_in_gw(const TPSpec* spec, const Tensor& x, bool atomic_gx) {
  return !atomic_gx && rows_in_grad_w(spec, false, x);
}

void tp_conv_chunk_launch(const TPSpec* spec, bool backward, const Tensor& x, const Tensor& y_c, const Tensor& w_c,
                          const Tensor& g, const TPGraph& chunk, int64_t graph_edges, int64_t dim_out,
                          bool accumulate, const Tensor& out_or_gx, const Tensor& gy_c, const Tensor& gw_c,
                          const Tensor& work_c, bool atomic_gx) {
  TPDims d{int(x.size(1)), int(y_c.size(1)), int(w_c.size(1)), int(dim_out), accumulate ? 1 : 0};
  if (backward) {
    d.split = receiver_split(chunk.num_nodes, chunk.num_edges, graph_edges, per_sm(spec, false, x), x.device().index());
    d.atomic_gx = atomic_gx ? 1 : 0;
    d.rows_in_gw = !atomic_gx && !work_c.defined();  // the caller's choice (tp_conv_chunk_rows_in_gw)
    if (atomic_gx && !accumulate) out_or_gx.zero_();  // the first chunk's kernels add into it
  }
  if (x.scalar_type() == at::kDouble)
    chunk_launch<double>(spec->fwd_f64, spec->bwd_f64, backward, x, y_c, w_c, g, chunk, d, out_or_gx, gy_c, gw_c,
                         work_c);
  else
    chunk_launch<float>(spec->fwd_f32, spec->bwd_f32, backward, x, y_c, w_c, g, chunk, d, out_or_gx, gy_c, gw_c,
                        work_c);
}

}  // namespace md_accel

// Management of the specialised kernel libraries (catch-all kernels). _tp_conv_specialised_for:
// whether a loaded library serves calls with features like x and this plan and cg_val (forward
// and backward), i.e. whether tp_conv runs generated kernels for them.
TORCH_LIBRARY_FRAGMENT(md_accel, m) {
  m.def("_tp_conv_load_specialised(str path) -> int", md_accel::load_specialised);
  m.def("_tp_conv_set_specialised(bool enabled) -> bool", md_accel::set_specialised);
  m.def("_tp_conv_set_deterministic(bool enabled) -> bool", md_accel::set_deterministic);
  m.def("_tp_conv_set_rows_in_grad_w(int mode) -> int", md_accel::set_rows_in_grad_w);
  m.def("_tp_conv_set_dbwd_in_gg_w(bool enabled) -> bool", md_accel::set_dbwd_in_gg_w);
  m.def("_tp_conv_specialised_for(Tensor x, Tensor paths, Tensor cg_ptr, Tensor cg_idx, Tensor cg_val) -> bool",
        [](const at::Tensor& x, const at::Tensor& paths, const at::Tensor& cg_ptr, const at::Tensor& cg_idx,
           const at::Tensor& cg_val) {
          return md_accel::tp_conv_spec_for(x, paths, cg_ptr, cg_idx, cg_val) != nullptr;
        });
}

TORCH_LIBRARY_IMPL(md_accel, CUDA, m) {
  m.impl("tp_conv_fwd", md_accel::tp_conv_fwd_cuda);
  m.impl("tp_conv_bwd", md_accel::tp_conv_bwd_cuda);
  m.impl("tp_conv_dbwd", md_accel::tp_conv_dbwd_cuda);
}
