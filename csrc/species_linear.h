// Plain C++ interface between the torch glue (species_linear_cuda.cpp, g++) and the CUDA kernels
// of md_accel::species_linear_* (species_linear_kernels.cu, nvcc). No torch headers here.
//
// The op is out[n] = Linear_{species[n]}(x[n]) in e3nn's Linear layout. Nodes are visited in
// species-sorted order (order = stable argsort of species, computed by the caller), so a block
// works on a tile of nodes of one species and that species' weights.
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

namespace md_accel {

// Largest irrep dimension 2l+1 the kernels handle (l <= 7).
constexpr int kSLMaxDim = 15;

// One weight matrix contributing to a GEMM group (see SLGroup):
//   dst[n, dst_off + c*d + i] += pw * sum_k src[n, src_off + k*d + i] * B[k, c]
//   B[k, c] = W[s, w_off + k*w_ld + c]       (trans == false: forward)
//           = W[s, w_off + c*w_ld + k]       (trans == true: gradient with respect to x)
struct SLTerm {
  int src_off;
  int k;      // length of the summed multiplicity
  int w_off;
  int w_ld;   // the instruction's mul_out
  double pw;  // path weight
};

// One output block of the per-species GEMM: all terms writing dst[:, dst_off : dst_off+ncols*d].
struct SLGroup {
  int dst_off;
  int d;      // irrep dimension 2l+1 (<= kSLMaxDim)
  int ncols;  // multiplicity of the output block
  int first_term;
  int num_terms;
};

// Weight-gradient instruction: gW[s, w_off + u*mul_out + w] =
//   pw * sum_{n of species s} sum_i x[n, x_off + u*d + i] * g[n, g_off + w*d + i]
struct SLWInstr {
  int x_off, mul_in, g_off, mul_out, d, w_off;
  double pw;
};

// Sizes and operands shared by the launches. species/order: [N] int64; order[p] = node at
// species-sorted position p (stable argsort of species). Both null: one species, nodes in their
// own order (a plain equivariant Linear, which then needs no transposed copies of its blocks).
struct SLProblem {
  const int64_t* species;
  const int64_t* order;
  int64_t num_nodes;
  int64_t num_species;
  int64_t weight_numel;
};

// Scratch memory sizes (bytes) the launches need; allocate them with the caching allocator.
int64_t species_linear_gemm_scratch_bytes(const SLProblem& p, int num_groups);
int64_t species_linear_wgrad_scratch_bytes(const SLProblem& p, int num_instr, int elem_size);

// dst [N, ld_dst] (fully written where groups cover it; rows of nodes whose species is not in
// [0, S) are set to NaN), src [N, ld_src], weight [S, weight_numel]. Each returns nullptr on
// success, else a static error message. Groups must write disjoint column ranges.
template <typename T>
const char* species_linear_gemm_launch(const SLProblem& p, const T* src, int64_t ld_src, const T* weight,
                                       T* dst, int64_t ld_dst, const SLGroup* groups, int num_groups,
                                       const SLTerm* terms, int num_terms, bool trans, void* scratch,
                                       cudaStream_t stream);

// gw [S, weight_numel], fully written (zero for species without nodes); x [N, ld_x], g [N, ld_g].
template <typename T>
const char* species_linear_wgrad_launch(const SLProblem& p, const T* x, int64_t ld_x, const T* g, int64_t ld_g,
                                        T* gw, const SLWInstr* instr, int num_instr, void* scratch,
                                        cudaStream_t stream);

}  // namespace md_accel
