// Kernels of md_accel::symmetric_contraction_{fwd,bwd,dbwd}: one thread per (node, channel),
// channels contiguous across a warp (W[e, k, c] and the x rows load coalesced), no inter-thread
// communication. The per-thread work is a "body": generated per term structure (x, grad_x, ...
// in registers, terms unrolled; md_accel/ops/_sc_codegen.py) or the generic one below (term
// list read at run time). Weight gradients: see sc_chunking (sc_abi.h).
//
// With MD_ACCEL_SC_HOST this header compiles with a plain C++ compiler and every launch runs
// the blocks and threads one after another on the host (no barriers or shuffles are used, so
// that is exact): the tests check generated bodies against the reference that way.
#pragma once
#include <cmath>
#include <cstdint>

#include "sc_abi.h"

#ifdef MD_ACCEL_SC_HOST
#include <limits>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __constant__
#define __launch_bounds__(...)
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
namespace md_accel::sc_host {
inline thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;
inline thread_local unsigned char* smem = nullptr;

template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, A... args) {
  std::vector<unsigned char> buf(smem_bytes + 16, 0xff);  // 0xff: NaN-filled, unset reads show
  gridDim = grid;
  blockDim = block;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = dim3(bx, by, bz);
        smem = buf.data();
        for (unsigned tz = 0; tz < block.z; ++tz)
          for (unsigned ty = 0; ty < block.y; ++ty)
            for (unsigned tx = 0; tx < block.x; ++tx) {
              threadIdx = dim3(tx, ty, tz);
              kernel(args...);
            }
      }
}
}  // namespace md_accel::sc_host
using md_accel::sc_host::blockDim;
using md_accel::sc_host::blockIdx;
using md_accel::sc_host::gridDim;
using md_accel::sc_host::threadIdx;
#define SC_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
  ::md_accel::sc_host::launch(kernel, grid, block, smem_bytes, __VA_ARGS__)
#else
#define SC_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
  kernel<<<grid, block, smem_bytes, stream>>>(__VA_ARGS__)
#endif

namespace md_accel {
namespace sc {

template <typename T>
__device__ __forceinline__ T ld(const T* p) {
#ifdef MD_ACCEL_SC_HOST
  return *p;
#else
  return __ldg(p);
#endif
}

template <typename T>
__device__ __forceinline__ T fma_(T a, T b, T c) {
#ifdef MD_ACCEL_SC_HOST
  return std::fma(a, b, c);
#else
  return fma(a, b, c);
#endif
}

template <typename T>
__device__ __forceinline__ T nan_() {
#ifdef MD_ACCEL_SC_HOST
  return std::numeric_limits<T>::quiet_NaN();
#else
  if constexpr (sizeof(T) == 4)
    return __int_as_float(0x7fc00000);
  else
    return __longlong_as_double(0x7ff8000000000000LL);
#endif
}

// An empty asm that "changes" v: the compiler may neither reuse expressions of v across it nor
// move it; the generated bodies apply it to their inputs at each weight column, so common
// subexpressions of different columns do not stay live across the whole kernel.
template <typename T>
__device__ __forceinline__ void opaque(T& v) {
#ifndef MD_ACCEL_SC_HOST
  if constexpr (sizeof(T) == 4)
    asm volatile("" : "+f"(v));
  else
    asm volatile("" : "+d"(v));
#else
  (void)v;
#endif
}

// Compiler-level memory barrier: keeps the weight-gradient accumulator updates of one weight
// column from being sunk to the end of a generated body (their values would stay live).
__device__ __forceinline__ void fence() {
#ifndef MD_ACCEL_SC_HOST
  asm volatile("" ::: "memory");
#endif
}

template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
#ifdef MD_ACCEL_SC_HOST
  return reinterpret_cast<T*>(sc_host::smem);
#else
  extern __shared__ __align__(16) unsigned char sc_smem_raw[];
  return reinterpret_cast<T*>(sc_smem_raw);
#endif
}

inline const char* last_error() {
#ifdef MD_ACCEL_SC_HOST
  return nullptr;
#else
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
#endif
}

constexpr int kThreads = 128;

// The weight-gradient kernels run a node's body in a loop over the chunk's nodes: called, not
// inlined, or the compiler hoists every loop-invariant term value and weight load out of the
// loop (thousands of registers).
template <class Body, int MODE, typename T>
__device__ __noinline__ void node_in_chunk(const Body& body, const SCArgs<T>& a, int64_t n, int64_t c, int64_t s,
                                           T* acc, int64_t stride) {
  body.template node<MODE, true, T>(a, n, c, s, acc, stride);
}

// Body interface: template <int MODE, bool WG, typename T> void node(a, n, c, s, acc, stride):
// all of node n's work for channel c (species s; out of [0, E): NaN outputs). WG: adds
// sum_o g[o] * P_{o,k} (bwd) or g[o] * DP_{o,k} (dbwd) to acc[k * stride] for every k.
template <class Body, typename T, int MODE, bool WG>
__global__ void __launch_bounds__(kThreads) main_kernel(const SCArgs<T> a, const Body body) {
  const int64_t c = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= a.C) return;
  if constexpr (!WG) {
    const int64_t n = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
    if (n >= a.N) return;
    body.template node<MODE, false, T>(a, n, c, a.species[n], nullptr, 0);
  } else {
    const int64_t j = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;  // chunk
    const int64_t nbk = a.E + 2;                                       // buckets
    if (j >= a.chunk_off[nbk]) return;
    int64_t lo = 0, hi = nbk;  // chunk_off[lo] <= j < chunk_off[hi]
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (a.chunk_off[mid] <= j) lo = mid; else hi = mid;
    }
    const int64_t start = a.bucket_off[lo] + (j - a.chunk_off[lo]) * a.nb;
    const int64_t end = start + a.nb < a.bucket_off[lo + 1] ? start + a.nb : a.bucket_off[lo + 1];
    const int64_t e = lo - 1;
    const bool valid = e >= 0 && e < a.E;
    const int64_t stride = int64_t(blockDim.x) * blockDim.y;
    T* acc = dynamic_smem<T>() + threadIdx.y * blockDim.x + threadIdx.x;
    if (valid)
      for (int64_t k = 0; k < a.K; ++k) acc[k * stride] = T(0);
    for (int64_t p = start; p < end; ++p)
      node_in_chunk<Body, MODE, T>(body, a, a.perm[p], c, valid ? e : -1, acc, stride);
    if (valid)
      for (int64_t k = 0; k < a.K; ++k) a.partial[(j * a.K + k) * a.C + c] = acc[k * stride];
  }
}

// Bucket and chunk offsets of the species-sorted nodes (one thread: E + 3 binary searches).
static __global__ void chunk_kernel(const int64_t* __restrict__ sorted, int64_t N, int64_t E, int64_t nb,
                             int64_t* __restrict__ bucket_off, int64_t* __restrict__ chunk_off) {
  bucket_off[0] = 0;
  for (int64_t e = 0; e <= E; ++e) {  // first position with species >= e
    int64_t lo = 0, hi = N;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted[mid] < e) lo = mid + 1; else hi = mid;
    }
    bucket_off[e + 1] = lo;
  }
  bucket_off[E + 2] = N;
  chunk_off[0] = 0;
  for (int64_t b = 0; b < E + 2; ++b)
    chunk_off[b + 1] = chunk_off[b] + (bucket_off[b + 1] - bucket_off[b] + nb - 1) / nb;
}

// gw[e, k, c] = sum of the partials of element e's chunks, in chunk order.
template <typename T>
__global__ void reduce_kernel(const SCArgs<T> a) {
  const int64_t kc = a.K * a.C, total = a.E * kc;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < total;
       q += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = q / kc, r = q - e * kc;
    T s = T(0);
    for (int64_t j = a.chunk_off[e + 1]; j < a.chunk_off[e + 2]; ++j) s += a.partial[j * kc + r];
    a.gw[q] = s;
  }
}

// One main kernel's launch: <MODE, WG> is <0, false> (fwd), <1, false> (bwd), <1, true> (bwd with
// the weight gradient) or <2, true> (dbwd). Generated libraries compile each in its own
// translation unit (in parallel: the large term lists take minutes of nvcc each).
template <typename T>
using MainLaunch = const char* (*)(const SCArgs<T>& a, int64_t rows, unsigned bc, unsigned by, size_t smem,
                                   cudaStream_t stream);

template <typename T>
struct MainLaunches {
  MainLaunch<T> fwd, bwd, bwd_wg, dbwd;
};

template <class Body, typename T, int MODE, bool WG>
const char* launch_main(const SCArgs<T>& a, int64_t rows, unsigned bc, unsigned by, size_t smem,
                        cudaStream_t stream) {
  auto* kernel = &main_kernel<Body, T, MODE, WG>;
#ifndef MD_ACCEL_SC_HOST
  if (smem > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
#endif
  if ((rows + by - 1) / by > 0x7fffffffLL) return "too many nodes";
  const dim3 grid(unsigned((rows + by - 1) / by), unsigned((a.C + bc - 1) / bc));
  const dim3 block(bc, by);
  SC_LAUNCH(kernel, grid, block, smem, stream, a, Body{});
  return last_error();
}

template <class Body, typename T>
MainLaunches<T> main_launches() {
  return {&launch_main<Body, T, 0, false>, &launch_main<Body, T, 1, false>, &launch_main<Body, T, 1, true>,
          &launch_main<Body, T, 2, true>};
}

template <typename T>
const char* launch(int mode, const SCArgs<T>& a, const MainLaunches<T>& k, cudaStream_t stream) {
  if (mode < 0 || mode > 2) return "unknown mode";
  if ((a.C + kThreads - 1) / kThreads > 65535) return "too many channels";
  unsigned bc = unsigned(std::min<int64_t>((a.C + 31) / 32 * 32, kThreads));
  const bool wg = mode == 2 || (mode == 1 && a.gw != nullptr);
  if (mode == 2 && a.gw == nullptr) return "the double backward needs g_w";
  if (!wg) {
    if (a.N == 0 || a.C == 0) return nullptr;
    const unsigned by = kThreads / bc;
    return (mode == 0 ? k.fwd : k.bwd)(a, a.N, bc, by, 0, stream);
  }
  // per-thread weight-gradient accumulators in shared memory: keep a block within 48 KB if possible
  const size_t per_thread = size_t(a.K) * sizeof(T);
  while (bc > 32 && bc * per_thread > 48 * 1024) bc -= 32;
  const size_t smem = bc * per_thread;
  if (smem > 227 * 1024) return "too many weight columns for the shared-memory accumulators";
  auto* chunks = &chunk_kernel;
  SC_LAUNCH(chunks, dim3(1), dim3(1), 0, stream, a.sorted_species, a.N, a.E, a.nb, a.bucket_off, a.chunk_off);
  if (const char* err = last_error()) return err;
  if (a.N > 0 && a.C > 0) {
    if (const char* err = (mode == 1 ? k.bwd_wg : k.dbwd)(a, a.num_chunks, bc, 1, smem, stream)) return err;
  }
  const int64_t total = a.E * a.K * a.C;
  if (total == 0) return nullptr;
  const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 1 << 16));
  auto* reduce = &reduce_kernel<T>;
  SC_LAUNCH(reduce, dim3(blocks), dim3(256), 0, stream, a);
  return last_error();
}

// Column of component q of a row in e3nn layout: map = (block offset, block dim, m).
__device__ __forceinline__ int64_t column(const int32_t* map, int64_t q, int64_t C, int64_t c) {
  return C * map[3 * q] + c * map[3 * q + 1] + map[3 * q + 2];
}

// Generic body: the term list read at run time, per-thread arrays in local memory. Correct for
// any structure within the kSCGeneric* limits; the generated bodies are the fast path.
struct GenericBody {
  template <int MODE, bool WG, typename T>
  __device__ void node(const SCArgs<T>& a, int64_t n, int64_t c, int64_t s, T* acc, int64_t stride) const {
    const int64_t C = a.C, I = a.num_in, O = a.num_out;
    const int64_t xrow = n * C * I, orow = n * C * O;
    if (s < 0 || s >= a.E) {
      if (MODE != 1)
        for (int64_t q = 0; q < O; ++q) a.out[orow + column(a.out_map, q, C, c)] = nan_<T>();
      if (MODE != 0)
        for (int64_t q = 0; q < I; ++q) a.gx[xrow + column(a.in_map, q, C, c)] = nan_<T>();
      return;
    }
    T x[kSCGenericMaxIn], h[kSCGenericMaxIn], gx[kSCGenericMaxIn], out[kSCGenericMaxOut], g[kSCGenericMaxOut];
    for (int64_t q = 0; q < I; ++q) {
      x[q] = ld(a.x + xrow + column(a.in_map, q, C, c));
      h[q] = MODE == 2 ? ld(a.ggx + xrow + column(a.in_map, q, C, c)) : T(0);
      gx[q] = T(0);
    }
    for (int64_t q = 0; q < O; ++q) {
      g[q] = MODE != 0 ? ld(a.g + orow + column(a.out_map, q, C, c)) : T(0);
      out[q] = T(0);
    }
    const T* wr = a.w + s * a.K * C + c;
    const T* vr = MODE == 2 ? a.ggw + s * a.K * C + c : nullptr;
    for (int64_t t = 0; t < a.num_terms; ++t) {
      const int32_t* row = a.terms + t * a.term_width;
      const int o = row[0];
      const int64_t k = row[1];
      int idx[kSCGenericMaxNu];
      int nu = 0;
      while (nu < a.term_width - 2 && row[2 + nu] >= 0) {
        idx[nu] = row[2 + nu];
        ++nu;
      }
      const T val = a.values[t], wk = ld(wr + k * C);
      T mono = T(1);
      for (int j = 0; j < nu; ++j) mono *= x[idx[j]];
      if constexpr (MODE == 0) {
        out[o] = fma_(val * wk, mono, out[o]);
      } else if constexpr (MODE == 1) {
        const T coef = val * g[o];
        for (int j = 0; j < nu; ++j) {
          T p = T(1);
          for (int l = 0; l < nu; ++l)
            if (l != j) p *= x[idx[l]];
          gx[idx[j]] = fma_(coef * wk, p, gx[idx[j]]);
        }
        if constexpr (WG) acc[k * stride] = fma_(coef, mono, acc[k * stride]);
      } else {
        const T vk = ld(vr + k * C);
        T dm = T(0);
        for (int j = 0; j < nu; ++j) {
          T p = h[idx[j]];
          for (int l = 0; l < nu; ++l)
            if (l != j) p *= x[idx[l]];
          dm += p;
        }
        out[o] = fma_(val, fma_(wk, dm, vk * mono), out[o]);
        const T coef = val * g[o];
        if constexpr (WG) acc[k * stride] = fma_(coef, dm, acc[k * stride]);
        for (int l = 0; l < nu; ++l) {
          T dl_m = T(1), dl_d = T(0);
          for (int q = 0; q < nu; ++q)
            if (q != l) dl_m *= x[idx[q]];
          for (int j = 0; j < nu; ++j) {
            if (j == l) continue;
            T p = h[idx[j]];
            for (int q = 0; q < nu; ++q)
              if (q != l && q != j) p *= x[idx[q]];
            dl_d += p;
          }
          gx[idx[l]] = fma_(coef, fma_(wk, dl_d, vk * dl_m), gx[idx[l]]);
        }
      }
    }
    if (MODE != 1)
      for (int64_t q = 0; q < O; ++q) a.out[orow + column(a.out_map, q, C, c)] = out[q];
    if (MODE != 0)
      for (int64_t q = 0; q < I; ++q) a.gx[xrow + column(a.in_map, q, C, c)] = gx[q];
  }
};

}  // namespace sc
}  // namespace md_accel
