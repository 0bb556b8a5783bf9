// Fused kernels of md_accel::mlp_hidden_{fwd,bwd} (interface: mlp_hidden.h).
//
// One thread per edge (grid-stride over edges, so a block stages the weights once). The edge's
// hidden vector v lives in registers; every layer's weights sit in shared memory, zero-padded to
// the compile-time widths K0P (input) x HP (hidden), and are read as broadcasts (all threads of a
// warp load the same 16 bytes). A layer computes v <- epi(v @ W) in chunks of CH outputs: with
// CH == HP (float32) the accumulators are a second register vector; otherwise (float64) each
// chunk is parked in this thread's shared-memory column so that registers hold v and one chunk
// only. Zero padding is exact: padded columns give silu(0) = 0. Only HP = 64 is compiled (every
// radial MLP of MACE, SevenNet and NequIP): each (K0P, HP) pair costs minutes of nvcc time, which
// every fresh GPU machine pays at its first import; wider MLPs run the ATen composition.
//
// Backward: recompute the forward, keeping the derivative factors cst * silu'(z_l) of layers
// 0..L-2 in shared memory (per thread, [l][j] with stride = block size: conflict-free). Storing
// them costs (L-1)*HP values per thread but avoids recomputing layers (L(L+1)/2 passes instead
// of L); registers cannot hold them next to v. The last layer's factor is multiplied into grad_h
// at once, then v <- (v * factor_l) @ W_l^T layer by layer down to grad_x.
//
// Each output element is written by one thread with a fixed summation order: deterministic.
//
// float32 problems of the usual radial-MLP shape (input <= 16, 2 or 3 layers of width <= 64) run the
// tensor-core kernels of mlp_hidden_mma.cuh instead on sm_80+ (MD_ACCEL_MLP_MMA=0: these kernels);
// float64 ones on DMMA likewise (MD_ACCEL_MLP_MMA64=0: these kernels).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "mlp_hidden.h"
#include "mlp_hidden_mma.cuh"
#include "vec16.cuh"

namespace md_accel {
namespace {

template <typename T>
constexpr int kThreads = sizeof(T) == 4 ? 128 : 64;  // float64 needs twice the shared memory per thread
template <typename T>
constexpr int kVec = 16 / int(sizeof(T));  // elements per 16-byte load

// Accumulator chunk: the whole hidden vector when it fits next to v in registers, else 32 registers.
template <typename T, int HP>
constexpr int kChunk = HP * int(sizeof(T)) <= 256 ? HP : 128 / int(sizeof(T));

__device__ __forceinline__ float sigmoid(float z) { return 1.f / (1.f + expf(-z)); }
__device__ __forceinline__ double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

template <typename T>
__device__ __forceinline__ bool aligned16(const T* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// v[0:N) = src[0:n), zeros beyond n (n <= N).
template <int N, typename T, int M>
__device__ __forceinline__ void load_row(T (&v)[M], const T* __restrict__ src, int n) {
  if (n == N && aligned16(src)) {
#pragma unroll
    for (int j = 0; j < N; j += kVec<T>) ld16(v + j, src + j);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) v[j] = j < n ? src[j] : T(0);
  }
}

// dst[0:n) = v[0:n) (n <= N).
template <int N, typename T, int M>
__device__ __forceinline__ void store_row(T* __restrict__ dst, const T (&v)[M], int n) {
  if (n == N && aligned16(dst)) {
#pragma unroll
    for (int j = 0; j < N; j += kVec<T>) st16(dst + j, v + j);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j)
      if (j < n) dst[j] = v[j];
  }
}

// acc[o] = sum_{i < IN} v[i] M(i, c + o), M = W ([IN][OUT] row-major) or, with TRANS, W^T (W is
// [OUT][IN]); the 16-byte shared-memory loads run along W's rows either way.
template <int IN, int OUT, bool TRANS, typename T, int N, int C>
__device__ __forceinline__ void accumulate(T (&acc)[C], const T (&v)[N], const T* __restrict__ W, int c) {
  T w[kVec<T>];
#pragma unroll
  for (int o = 0; o < C; ++o) acc[o] = T(0);
  if constexpr (!TRANS) {
#pragma unroll
    for (int i = 0; i < IN; ++i)
#pragma unroll
      for (int o = 0; o < C; o += kVec<T>) {
        ld16(w, W + i * OUT + c + o);
#pragma unroll
        for (int q = 0; q < kVec<T>; ++q) acc[o + q] = fma(v[i], w[q], acc[o + q]);
      }
  } else {
#pragma unroll
    for (int o = 0; o < C; ++o)
#pragma unroll
      for (int i = 0; i < IN; i += kVec<T>) {
        ld16(w, W + (c + o) * IN + i);
#pragma unroll
        for (int q = 0; q < kVec<T>; ++q) acc[o] = fma(v[i + q], w[q], acc[o]);
      }
  }
}

// v[0:OUT) <- epi(o, sum_i v[i] M(i, o)) in chunks of CH outputs; chunks wait in this thread's
// shared-memory column `stage` (stride NT) until v[0:IN) is no longer needed.
template <int IN, int OUT, bool TRANS, int CH, int NT, typename T, int N, typename Epi>
__device__ __forceinline__ void layer(T (&v)[N], const T* __restrict__ W, T* stage, Epi epi) {
  static_assert(IN <= N && OUT <= N, "vector too short");
  constexpr int C = OUT < CH ? OUT : CH;
  static_assert(OUT % C == 0 && C % kVec<T> == 0 && IN % kVec<T> == 0, "widths must be multiples of the chunk");
  if constexpr (C == OUT) {
    T acc[OUT];
    accumulate<IN, OUT, TRANS>(acc, v, W, 0);
#pragma unroll
    for (int o = 0; o < OUT; ++o) v[o] = epi(o, acc[o]);
  } else {
#pragma unroll 1
    for (int c = 0; c < OUT; c += C) {
      T acc[C];
      accumulate<IN, OUT, TRANS>(acc, v, W, c);
#pragma unroll
      for (int o = 0; o < C; ++o) stage[(c + o) * NT] = epi(c + o, acc[o]);
    }
#pragma unroll
    for (int o = 0; o < OUT; ++o) v[o] = stage[o * NT];
  }
}

// Offset of layer l's weights in shared memory (layer 0: [K0P][HP], the others [HP][HP]);
// layer_offset(L) is their total.
template <int K0P, int HP>
__host__ __device__ constexpr int64_t layer_offset(int l) {
  return l == 0 ? 0 : int64_t(K0P) * HP + int64_t(l - 1) * HP * HP;
}

template <typename T, int K0P, int HP>
__host__ size_t smem_bytes(int num_layers, bool backward) {
  constexpr int NT = kThreads<T>;
  int64_t n = layer_offset<K0P, HP>(num_layers);
  if (kChunk<T, HP> < HP) n += int64_t(HP) * NT;          // chunk staging
  if (backward) n += int64_t(num_layers - 1) * HP * NT;  // derivative factors
  return size_t(n) * sizeof(T);
}

// Every layer's weights, zero-padded.
template <typename T, int K0P, int HP, int NT>
__device__ void stage_weights(const MLPHiddenProblem<T>& p, T* w) {
  for (int l = 0; l < p.num_layers; ++l) {
    const int rows = l == 0 ? K0P : HP, in = p.width[l], out = p.width[l + 1];
    const T* __restrict__ src = p.w[l];
    T* dst = w + layer_offset<K0P, HP>(l);
    for (int i = threadIdx.x; i < rows * HP; i += NT) {
      const int k = i / HP, j = i % HP;
      dst[i] = k < in && j < out ? src[k * out + j] : T(0);
    }
  }
  __syncthreads();
}

template <typename T, int K0P, int HP, bool BWD>
__global__ void __launch_bounds__(kThreads<T>)
    mlp_hidden_kernel(const MLPHiddenProblem<T> p, const T* __restrict__ grad_h, T* __restrict__ out) {
  constexpr int NT = kThreads<T>, CH = kChunk<T, HP>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* const w = reinterpret_cast<T*>(smem_raw);
  stage_weights<T, K0P, HP, NT>(p, w);
  const int L = p.num_layers, k0 = p.width[0], hl = p.width[L];
  const T cst = p.cst;
  T* const stage = w + layer_offset<K0P, HP>(L) + threadIdx.x;  // this thread's column (stride NT)
  T* const fac = stage + (CH < HP ? HP * NT : 0);                // [L-1][HP] derivative factors

  for (int64_t e = int64_t(blockIdx.x) * NT + threadIdx.x; e < p.num_edges; e += int64_t(gridDim.x) * NT) {
    T v[HP];
    load_row<K0P>(v, p.x + e * k0, k0);
    for (int l = 0; l < L; ++l) {
      auto epi = [&](int j, T z) -> T {
        const T s = sigmoid(z);
        if constexpr (BWD) {
          const T f = cst * s * (T(1) + z * (T(1) - s));
          if (l == L - 1) return j < hl ? f * grad_h[e * hl + j] : T(0);  // grad_h times the last factor
          fac[(l * HP + j) * NT] = f;
        }
        return z * s * cst;
      };
      if (l == 0)
        layer<K0P, HP, false, CH, NT>(v, w, stage, epi);
      else
        layer<HP, HP, false, CH, NT>(v, w + layer_offset<K0P, HP>(l), stage, epi);
    }
    if constexpr (!BWD) {
      store_row<HP>(out + e * hl, v, hl);
    } else {
      for (int l = L - 1; l >= 1; --l) {
        const T* fl = fac + (l - 1) * HP * NT;  // factors of the layer below
        layer<HP, HP, true, CH, NT>(v, w + layer_offset<K0P, HP>(l), stage, [&](int j, T a) { return a * fl[j * NT]; });
      }
      layer<HP, K0P, true, CH, NT>(v, w, stage, [](int, T a) { return a; });
      store_row<K0P>(out + e * k0, v, k0);
    }
  }
}

template <int K0P_, int HP_>
struct Widths {
  static constexpr int K0P = K0P_, HP = HP_;
};

// Calls f(Widths<K0P, HP>{}) with the padded widths serving p; false when none does.
template <typename T, typename F>
bool dispatch(const MLPHiddenProblem<T>& p, F&& f) {
  if (p.num_layers < 1 || p.num_layers > kMLPMaxLayers) return false;
  int hmax = 0;
  for (int l = 1; l <= p.num_layers; ++l) hmax = p.width[l] > hmax ? p.width[l] : hmax;
  const int k0 = p.width[0];
  auto by_hidden = [&](auto k0p) {
    constexpr int K0P = decltype(k0p)::value;
    if (hmax <= 64) return f(Widths<K0P, 64>{}), true;
    return false;
  };
  if (k0 <= 8) return by_hidden(std::integral_constant<int, 8>{});
  if (k0 <= 16) return by_hidden(std::integral_constant<int, 16>{});
  return false;
}

// an attribute of the current device
int device_attr(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&v, attr, dev);
  return v;
}

int max_smem_per_block() { return device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin); }

// Grid of a persistent kernel: as many blocks as fit on the device at once, at most `blocks`.
template <typename K>
const char* persistent_grid(K kernel, int threads, size_t smem, int64_t blocks, int& grid) {
  const int sms = device_attr(cudaDevAttrMultiProcessorCount);
  int per_sm = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess || per_sm < 1)
    return "md_accel mlp_hidden: the weights do not fit in shared memory";
  grid = int(blocks < int64_t(per_sm) * sms ? blocks : int64_t(per_sm) * sms);
  return nullptr;
}

// The tensor-core kernels serve p: their shapes, sm_80+, unless switched off (MD_ACCEL_MLP_MMA=0 for
// float32, MD_ACCEL_MLP_MMA64=0 for float64). Float64 fwd + bwd at 2.5M edges on an H200: 8.7 ms on
// DMMA vs 30.1 ms on the CUDA-core kernel (MACE-MP-0 shape, benchmarks/radial_mlp.py).
template <typename T>
bool use_mma(const MLPHiddenProblem<T>& p) {
  const char* env = std::getenv(sizeof(T) == 4 ? "MD_ACCEL_MLP_MMA" : "MD_ACCEL_MLP_MMA64");
  return !(env && std::strcmp(env, "0") == 0) && mlp_mma::serves(p) && device_attr(cudaDevAttrComputeCapabilityMajor) >= 8;
}

template <typename T, bool BWD>
const char* launch_mma(const MLPHiddenProblem<T>& p, const T* grad_h, T* out, cudaStream_t stream) {
  using M = mlp_mma::MmaOf<T>;
  auto run = [&](auto kernel, size_t smem) -> const char* {
    int grid = 0;
    const int64_t tiles = (p.num_edges + M::kRows - 1) / M::kRows;
    const int64_t blocks = (tiles + mlp_mma::kWarps - 1) / mlp_mma::kWarps;
    if (const char* err = persistent_grid(kernel, mlp_mma::kThreads, smem, blocks, grid)) return err;
    kernel<<<grid, mlp_mma::kThreads, smem, stream>>>(p, grad_h, out);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
  };
  const int L = p.num_layers, k0s = mlp_mma::input_steps(p);
  const size_t smem = mlp_mma::smem_bytes<T>(L, k0s, BWD);
  if constexpr (sizeof(T) == 4) {
    if (L == 2) return k0s == 1 ? run(mlp_mma::mlp_hidden_mma_kernel<T, 2, 1, BWD>, smem)
                                : run(mlp_mma::mlp_hidden_mma_kernel<T, 2, 2, BWD>, smem);
    return k0s == 1 ? run(mlp_mma::mlp_hidden_mma_kernel<T, 3, 1, BWD>, smem)
                    : run(mlp_mma::mlp_hidden_mma_kernel<T, 3, 2, BWD>, smem);
  } else {  // the input always padded to 16 (4 k4 steps)
    constexpr int K0S = mlp_mma::input_steps_max<M>();
    return L == 2 ? run(mlp_mma::mlp_hidden_mma_kernel<T, 2, K0S, BWD>, smem)
                  : run(mlp_mma::mlp_hidden_mma_kernel<T, 3, K0S, BWD>, smem);
  }
}

// use_mma, and the tensor-core kernel's tables fit in shared memory (GPUs with less than the
// ~140 KB the 3-layer backward needs run the CUDA-core kernel)
template <typename T>
bool mma_fits(const MLPHiddenProblem<T>& p, bool backward) {
  return use_mma(p) &&
         mlp_mma::smem_bytes<T>(p.num_layers, mlp_mma::input_steps(p), backward) <= size_t(max_smem_per_block());
}

template <typename T, bool BWD>
const char* launch(const MLPHiddenProblem<T>& p, const T* grad_h, T* out, cudaStream_t stream) {
  const char* err = "md_accel mlp_hidden: no fused kernel for these widths";
  if (p.num_edges == 0) return nullptr;
  if (mma_fits(p, BWD)) return launch_mma<T, BWD>(p, grad_h, out, stream);
  dispatch(p, [&](auto wd) {
    constexpr int K0P = decltype(wd)::K0P, HP = decltype(wd)::HP, NT = kThreads<T>;
    auto kernel = mlp_hidden_kernel<T, K0P, HP, BWD>;
    const size_t smem = smem_bytes<T, K0P, HP>(p.num_layers, BWD);
    int grid = 0;
    if ((err = persistent_grid(kernel, NT, smem, (p.num_edges + NT - 1) / NT, grid))) return;
    kernel<<<grid, NT, smem, stream>>>(p, grad_h, out);
    const cudaError_t e = cudaGetLastError();
    err = e == cudaSuccess ? nullptr : cudaGetErrorString(e);
  });
  return err;
}

}  // namespace

template <typename T>
bool mlp_hidden_has_kernel(const MLPHiddenProblem<T>& p, bool backward) {
  if (mma_fits(p, backward)) return true;
  bool fits = false;
  const bool known = dispatch(p, [&](auto wd) {
    constexpr int K0P = decltype(wd)::K0P, HP = decltype(wd)::HP;
    fits = smem_bytes<T, K0P, HP>(p.num_layers, backward) <= size_t(max_smem_per_block());
  });
  return known && fits;
}

template <typename T>
const char* mlp_hidden_fwd_launch(const MLPHiddenProblem<T>& p, T* h, cudaStream_t stream) {
  return launch<T, false>(p, nullptr, h, stream);
}

template <typename T>
const char* mlp_hidden_bwd_launch(const MLPHiddenProblem<T>& p, const T* grad_h, T* grad_x, cudaStream_t stream) {
  return launch<T, true>(p, grad_h, grad_x, stream);
}

template bool mlp_hidden_has_kernel<float>(const MLPHiddenProblem<float>&, bool);
template bool mlp_hidden_has_kernel<double>(const MLPHiddenProblem<double>&, bool);
template const char* mlp_hidden_fwd_launch<float>(const MLPHiddenProblem<float>&, float*, cudaStream_t);
template const char* mlp_hidden_fwd_launch<double>(const MLPHiddenProblem<double>&, double*, cudaStream_t);
template const char* mlp_hidden_bwd_launch<float>(const MLPHiddenProblem<float>&, const float*, float*, cudaStream_t);
template const char* mlp_hidden_bwd_launch<double>(const MLPHiddenProblem<double>&, const double*, double*,
                                                   cudaStream_t);

}  // namespace md_accel
