// Plain C++ interface of md_accel's symmetric-contraction kernels (md_accel::symmetric_contraction_*),
// shared by the torch glue (sc_cuda.cpp, g++), the generic kernels (sc_kernels.cu) and the
// kernel libraries generated per term structure (md_accel/ops/_sc_codegen.py, dlopen'ed).
// No torch headers. With MD_ACCEL_SC_HOST defined it compiles without CUDA (host emulation of
// the kernels, used by the tests to check generated code on the CPU).
#pragma once
#include <algorithm>
#include <cstdint>

#ifdef MD_ACCEL_SC_HOST
typedef struct CUstream_st* cudaStream_t;
#else
#include <cuda_runtime_api.h>
#endif

namespace md_accel {

constexpr int kSCAbiVersion = 1;

// Operands of one launch (see md_accel/ops/sc_reference.py for the math). Everything is
// contiguous device memory; unused pointers are null. Only 8-byte members (a ctypes mirror
// is a flat list of int64 / pointers).
template <typename T>
struct SCArgs {
  int64_t N, C, E, K;         // nodes, channels, elements (w.size(0)), weight columns (w.size(1))
  const T* x;                 // [N, C * I]  e3nn layout
  const int64_t* species;     // [N]
  const T* w;                 // [E, K, C]
  const T* g;                 // [N, C * O]  grad_out (bwd, dbwd)
  const T* ggx;               // [N, C * I]  dbwd: incoming gradient of grad_x
  const T* ggw;               // [E, K, C]   dbwd: incoming gradient of grad_w
  T* out;                     // fwd: out; dbwd: g_grad_out  [N, C * O]
  T* gx;                      // bwd: grad_x; dbwd: g_x  [N, C * I]
  T* gw;                      // bwd: grad_w (null: not wanted); dbwd: g_w  [E, K, C]
  // weight gradients (gw set): nodes sorted by species, scratch filled by the launcher
  const int64_t* perm;            // [N] node ids, stable-sorted by species
  const int64_t* sorted_species;  // [N] species[perm]
  int64_t* bucket_off;            // [E + 3]
  int64_t* chunk_off;             // [E + 3]
  T* partial;                     // [num_chunks, K, C]
  int64_t nb, num_chunks;         // from sc_chunking
  // generic kernels only (the generated ones have the structure compiled in)
  const int32_t* terms;    // [num_terms, term_width]: (o, k, i_1 .. i_nu, -1 ..)
  const T* values;         // [num_terms]
  const int32_t* in_map;   // [num_in, 3]: (block offset, block dim, m) of input component i
  const int32_t* out_map;  // [num_out, 3]
  int64_t num_terms, term_width, num_in, num_out;
};

// Weight gradients are reduced per element without atomics: the species-sorted nodes form
// buckets (species < 0, each element, species >= E), each cut into chunks of nb nodes; a thread
// sums its channel over one chunk, then chunk partials are summed per element in chunk order.
// nb depends only on (N, C), so results are bit-reproducible.
inline void sc_chunking(int64_t N, int64_t C, int64_t E, int64_t* nb, int64_t* num_chunks) {
  const int64_t target = std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(C, 1));
  const int64_t b = std::min<int64_t>(64, std::max<int64_t>(1, (N + target - 1) / target));
  *nb = b;
  *num_chunks = (N + b - 1) / b + E + 2;
}

// mode: 0 fwd (out), 1 bwd (gx; gw if set), 2 dbwd (out = g_grad_out, gx, gw; gw required).
// Returns nullptr on success, else a static error message. Outputs are fully written.
template <typename T>
using SCLaunchFn = const char* (*)(int mode, const SCArgs<T>* args, cudaStream_t stream);

// A generated kernel library: serves the term list recorded here (compared by the op library).
struct SCSpec {
  int abi_version;  // kSCAbiVersion
  int num_in_blocks, num_out_blocks, num_k, term_width, num_terms;
  const int32_t* in_dims;   // [num_in_blocks]
  const int32_t* out_dims;  // [num_out_blocks]
  const int32_t* terms;     // [num_terms * term_width]
  const double* values;     // [num_terms]
  SCLaunchFn<float> launch_f32;
  SCLaunchFn<double> launch_f64;
};

// The generic kernels (term list read at run time), in the op library.
template <typename T>
const char* sc_generic_launch(int mode, const SCArgs<T>* args, cudaStream_t stream);
constexpr int kSCGenericMaxIn = 64, kSCGenericMaxOut = 64, kSCGenericMaxNu = 8;

}  // namespace md_accel

// The one symbol a generated library exports.
extern "C" const md_accel::SCSpec* md_accel_sc_spec_v1();
