// CUDA implementations of md_accel::species_linear_{fwd,bwd_x,bwd_w}: argument checks, the
// instruction table -> GEMM groups (host, per call: a few dozen integers), output and scratch
// allocation, and the launches (species_linear_kernels.cu).
//
// Instruction table `ins`: 6 integers per instruction (i_off, mul_in, o_off, mul_out, d, w_off)
// with path weights `path_weights` (see md_accel/ops/sl_reference.py). Empty species and order:
// one species (weight [1, numel]), the plain Linear.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "species_linear.h"

namespace md_accel {
namespace {

using at::Tensor;

struct Instr {
  int64_t i_off, mul_in, o_off, mul_out, d, w_off;
  double pw;
};

// Parses and checks the table against the row widths; returns the instructions with weights
// (mul_in, mul_out > 0) and the weight row length they define.
std::vector<Instr> parse(c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t dim_in, int64_t dim_out,
                         int64_t* weight_numel) {
  TORCH_CHECK(ins.size() % 6 == 0, "md_accel species_linear: ins must hold 6 integers per instruction");
  const size_t P = ins.size() / 6;
  TORCH_CHECK(pw.size() == P, "md_accel species_linear: ", pw.size(), " path weights for ", P, " instructions");
  std::vector<Instr> out;
  std::vector<std::pair<int64_t, int64_t>> w_ranges;
  for (size_t k = 0; k < P; ++k) {
    const int64_t* r = ins.data() + 6 * k;
    const Instr in{r[0], r[1], r[2], r[3], r[4], r[5], pw[k]};
    TORCH_CHECK(in.i_off >= 0 && in.mul_in >= 0 && in.o_off >= 0 && in.mul_out >= 0 && in.w_off >= 0 &&
                    in.d >= 1 && in.d <= kSLMaxDim && in.d % 2 == 1,
                "md_accel species_linear: invalid instruction ", k, " (irrep dimension must be odd and <= ",
                kSLMaxDim, ")");
    TORCH_CHECK(in.i_off + in.mul_in * in.d <= dim_in && in.o_off + in.mul_out * in.d <= dim_out,
                "md_accel species_linear: instruction ", k, " exceeds the feature widths (", dim_in, ", ", dim_out,
                ")");
    if (in.mul_in == 0 || in.mul_out == 0) continue;
    TORCH_CHECK(in.mul_in < (1 << 20) && in.mul_out < (1 << 20), "md_accel species_linear: multiplicity too large");
    out.push_back(in);
    w_ranges.emplace_back(in.w_off, in.mul_in * in.mul_out);
  }
  // the weights of the instructions tile [0, weight_numel) exactly (e3nn's layout)
  std::sort(w_ranges.begin(), w_ranges.end());
  int64_t end = 0;
  for (const auto& r : w_ranges) {
    TORCH_CHECK(r.first == end, "md_accel species_linear: instruction weights must tile the weight row");
    end += r.second;
  }
  *weight_numel = end;
  return out;
}

// GEMM groups: forward groups instructions by output block, the x-gradient by input block.
// Returns whether the groups cover every column of the destination (else it must be zeroed).
bool build_groups(const std::vector<Instr>& ins, bool trans, int64_t dim_dst, std::vector<SLGroup>* groups,
                  std::vector<SLTerm>* terms) {
  std::vector<int64_t> keys;
  for (const Instr& in : ins) {
    const int64_t key = trans ? in.i_off : in.o_off;
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  std::sort(keys.begin(), keys.end());
  int64_t covered = 0, prev_end = 0;
  for (const int64_t key : keys) {
    SLGroup g{int(key), 0, 0, int(terms->size()), 0};
    for (const Instr& in : ins) {
      if ((trans ? in.i_off : in.o_off) != key) continue;
      const int64_t ncols = trans ? in.mul_in : in.mul_out;
      TORCH_CHECK(g.num_terms == 0 || (g.d == in.d && g.ncols == ncols),
                  "md_accel species_linear: instructions sharing a block offset disagree on its shape");
      g.d = int(in.d);
      g.ncols = int(ncols);
      terms->push_back({int(trans ? in.o_off : in.i_off), int(trans ? in.mul_out : in.mul_in), int(in.w_off),
                        int(in.mul_out), in.pw});
      ++g.num_terms;
    }
    TORCH_CHECK(key >= prev_end, "md_accel species_linear: overlapping blocks in the instruction table");
    prev_end = key + int64_t(g.ncols) * g.d;
    covered += int64_t(g.ncols) * g.d;
    groups->push_back(g);
  }
  return covered == dim_dst;
}

void check_float(const Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "md_accel species_linear (CUDA): ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
              "md_accel species_linear: float32 or float64 only, got ", t.scalar_type(), " for ", name);
  TORCH_CHECK(t.dim() == 2 && t.size(1) < (int64_t(1) << 30), "md_accel species_linear: ", name, " must be 2-D");
}

void check_same(const Tensor& t, const Tensor& ref, const char* name) {
  TORCH_CHECK(t.device() == ref.device() && t.scalar_type() == ref.scalar_type(), "md_accel species_linear: ", name,
              " must be ", ref.scalar_type(), " on ", ref.device());
}

// species and order both empty (and num_species 1): every node is species 0, in its own order.
SLProblem problem(const Tensor& species, const Tensor& order, const Tensor& feat, int64_t num_species,
                  int64_t weight_numel) {
  if (species.numel() == 0 && order.numel() == 0 && feat.size(0) > 0) {
    TORCH_CHECK(num_species == 1, "md_accel species_linear: without species the weight must have one row");
    return {nullptr, nullptr, feat.size(0), num_species, weight_numel};
  }
  for (const Tensor* t : {&species, &order}) {
    TORCH_CHECK(t->scalar_type() == at::kLong && t->dim() == 1 && t->numel() == feat.size(0),
                "md_accel species_linear: species and order must be int64 [", feat.size(0), "]");
    TORCH_CHECK(t->device() == feat.device(), "md_accel species_linear: species and order must be on ",
                feat.device());
    TORCH_CHECK(t->is_contiguous(), "md_accel species_linear: species and order must be contiguous");
  }
  return {species.data_ptr<int64_t>(), order.data_ptr<int64_t>(), feat.size(0), num_species, weight_numel};
}

void check_launch(const char* err) { TORCH_CHECK(err == nullptr, "md_accel species_linear: ", err); }

Tensor gemm(const Tensor& src, const Tensor& weight, const Tensor& species_, const Tensor& order_,
            c10::IntArrayRef ins, c10::ArrayRef<double> pw, int64_t dim_dst, bool trans) {
  c10::cuda::CUDAGuard guard(src.device());
  check_float(src, trans ? "grad_out" : "x");
  check_float(weight, "weight");
  check_same(weight, src, "weight");
  TORCH_CHECK(dim_dst >= 0 && dim_dst < (int64_t(1) << 30), "md_accel species_linear: invalid output width");
  const Tensor x = src.contiguous(), w = weight.contiguous(), species = species_.contiguous(),
               order = order_.contiguous();
  int64_t numel = 0;
  const int64_t dim_in = trans ? dim_dst : x.size(1), dim_out = trans ? x.size(1) : dim_dst;
  const std::vector<Instr> list = parse(ins, pw, dim_in, dim_out, &numel);
  TORCH_CHECK(w.size(1) == numel, "md_accel species_linear: weight has ", w.size(1), " columns, the instructions ",
              numel);
  std::vector<SLGroup> groups;
  std::vector<SLTerm> terms;
  const bool covers = build_groups(list, trans, dim_dst, &groups, &terms);
  const SLProblem p = problem(species, order, x, w.size(0), numel);
  const int64_t N = x.size(0);
  Tensor out = covers ? at::empty({N, dim_dst}, x.options()) : at::zeros({N, dim_dst}, x.options());
  if (N == 0 || groups.empty()) return out;
  const Tensor scratch = at::empty({species_linear_gemm_scratch_bytes(p, int(groups.size()))},
                                   x.options().dtype(at::kByte));
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (x.scalar_type() == at::kDouble)
    check_launch(species_linear_gemm_launch<double>(p, x.data_ptr<double>(), x.size(1), w.data_ptr<double>(),
                                                    out.data_ptr<double>(), dim_dst, groups.data(),
                                                    int(groups.size()), terms.data(), int(terms.size()), trans,
                                                    scratch.data_ptr(), stream));
  else
    check_launch(species_linear_gemm_launch<float>(p, x.data_ptr<float>(), x.size(1), w.data_ptr<float>(),
                                                   out.data_ptr<float>(), dim_dst, groups.data(), int(groups.size()),
                                                   terms.data(), int(terms.size()), trans, scratch.data_ptr(),
                                                   stream));
  return out;
}

Tensor species_linear_fwd_cuda(const Tensor& x, const Tensor& weight, const Tensor& species, const Tensor& order,
                               c10::IntArrayRef ins, c10::ArrayRef<double> path_weights, int64_t dim_out) {
  return gemm(x, weight, species, order, ins, path_weights, dim_out, false);
}

Tensor species_linear_bwd_x_cuda(const Tensor& grad_out, const Tensor& weight, const Tensor& species,
                                 const Tensor& order, c10::IntArrayRef ins, c10::ArrayRef<double> path_weights,
                                 int64_t dim_in) {
  return gemm(grad_out, weight, species, order, ins, path_weights, dim_in, true);
}

Tensor species_linear_bwd_w_cuda(const Tensor& x_, const Tensor& grad_out, const Tensor& species_,
                                 const Tensor& order_, c10::IntArrayRef ins, c10::ArrayRef<double> path_weights,
                                 int64_t num_species) {
  c10::cuda::CUDAGuard guard(x_.device());
  check_float(x_, "x");
  check_float(grad_out, "grad_out");
  check_same(grad_out, x_, "grad_out");
  TORCH_CHECK(grad_out.size(0) == x_.size(0), "md_accel species_linear: x and grad_out must have the same rows");
  TORCH_CHECK(num_species >= 0, "md_accel species_linear: num_species must be >= 0");
  const Tensor x = x_.contiguous(), g = grad_out.contiguous(), species = species_.contiguous(),
               order = order_.contiguous();
  int64_t numel = 0;
  const std::vector<Instr> list = parse(ins, path_weights, x.size(1), g.size(1), &numel);
  const SLProblem p = problem(species, order, x, num_species, numel);
  if (x.size(0) == 0 || list.empty() || num_species == 0) return at::zeros({num_species, numel}, x.options());
  Tensor gw = at::empty({num_species, numel}, x.options());
  std::vector<SLWInstr> wi;
  for (const Instr& in : list)
    wi.push_back({int(in.i_off), int(in.mul_in), int(in.o_off), int(in.mul_out), int(in.d), int(in.w_off), in.pw});
  const Tensor scratch = at::empty(
      {species_linear_wgrad_scratch_bytes(p, int(wi.size()), int(x.element_size()))}, x.options().dtype(at::kByte));
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  if (x.scalar_type() == at::kDouble)
    check_launch(species_linear_wgrad_launch<double>(p, x.data_ptr<double>(), x.size(1), g.data_ptr<double>(),
                                                     g.size(1), gw.data_ptr<double>(), wi.data(), int(wi.size()),
                                                     scratch.data_ptr(), stream));
  else
    check_launch(species_linear_wgrad_launch<float>(p, x.data_ptr<float>(), x.size(1), g.data_ptr<float>(),
                                                    g.size(1), gw.data_ptr<float>(), wi.data(), int(wi.size()),
                                                    scratch.data_ptr(), stream));
  return gw;
}

}  // namespace
}  // namespace md_accel

TORCH_LIBRARY_IMPL(md_accel, CUDA, m) {
  m.impl("species_linear_fwd", md_accel::species_linear_fwd_cuda);
  m.impl("species_linear_bwd_x", md_accel::species_linear_bwd_x_cuda);
  m.impl("species_linear_bwd_w", md_accel::species_linear_bwd_w_cuda);
}
