// Tensor-core kernels of md_accel::mlp_hidden_{fwd,bwd} (included by mlp_hidden_kernels.cu, which
// chooses them): the radial MLPs of MACE, SevenNet and NequIP (input width <= 16, L = 2 or 3
// hidden layers of width <= 64) as chains of (tile of edges) x 64 products on the tensor cores:
// float32 with 3xTF32 mma.m16n8k8 (float32 accuracy), float64 with mma.m8n8k4 (DMMA, IEEE
// float64); the primitives and fragment layouts are in mma.cuh.
//
// A warp owns one tile of edges at a time (16 for tf32, 8 for f64). A layer's 64 outputs are 8
// n8 tiles of the accumulator layout: lane (g, t) holds columns 8j + 2t, 8j + 2t + 1 of its rows.
// That layout is the next layer's A operand without any data movement if the layer's k order is
// permuted (Mma::perm_col below): tf32, in k-step s = j, A slot t is column 8j + 2t and slot t + 4
// is column 8j + 2t + 1, so (a0, a1, a2, a3) = (c0, c2, c1, c3) of tile j; f64, k-steps 2j and
// 2j + 1 take slot t from columns 8j + 2t and 8j + 2t + 1, i.e. a0 = c0 and c1 of tile j. The B
// operand (the weights) is read in the same permuted order, so the activations stay in registers
// from the input row to the output row.
//
// The weights sit in shared memory as per-lane fragment tables, one B fragment per (layer,
// k-step, n-tile, lane) (tf32: float4 (b0 hi, b1 hi, b0 lo, b1 lo), the split done once there;
// f64: one double), built by each block from W:
//   forward  (B = W_l):   layer 0 in natural k order (B(k, n) = W_0[K s + k][8j + n]); layers
//                         l >= 1 permuted (W_l[perm_col(s, k)][8j + n])
//   backward (B = W_l^T): every layer permuted, W_l[8j + n][perm_col(s, k)]
// (s = k-step, j = n-tile; out-of-range rows and columns are zero, which is exact: silu(0) = 0).
//
// Backward: the forward is recomputed keeping cst * silu'(z_l) of layers 0..L-2 in registers
// (their accumulator layout is the one the backward's products come out in); grad_h is read in
// that layout and multiplied by the last layer's factor, then g <- (g @ W_l^T) * factor_{l-1}
// down to grad_x = g @ W_0^T.
//
// Fixed summation order everywhere: deterministic, independent of the grid.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "mlp_hidden.h"
#include "mma.cuh"

namespace md_accel {
namespace mlp_mma {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kH = 64;         // hidden width (padded)
constexpr int kJ = kH / 8;     // n8 tiles of a hidden layer
constexpr int kK0Max = 16;     // input width (padded to whole k-steps)

// float32: mma.m16n8k8 tf32 with the 3xTF32 split
struct Tf32 {
  using T = float;
  using B = float4;           // (b0 hi, b1 hi, b0 lo, b1 lo)
  static constexpr int kRows = 16, kK = 8, kA = 4, kC = 4;
  // k of A element q / B element q (g = lane >> 2, t = lane & 3); rows of A and C elements
  __device__ static int a_k(int t, int q) { return t + 4 * (q >> 1); }
  __device__ static int a_row(int g, int q) { return g + 8 * (q & 1); }
  __device__ static int b_k(int t, int q) { return t + 4 * q; }
  __device__ static int c_row(int g, int v) { return g + 8 * (v >> 1); }
  // the previous layer's output column feeding k-slot k of k-step s
  __device__ static int perm_col(int s, int k) { return 8 * s + 2 * (k & 3) + (k >> 2); }
  template <int NJ>
  __device__ static void a_from_c(const float (&c)[NJ][4], int s, float (&a)[4]) {
    a[0] = c[s][0];
    a[1] = c[s][2];
    a[2] = c[s][1];
    a[3] = c[s][3];
  }
  __device__ static B fragment(const float (&b)[2]) {
    uint32_t h0, l0, h1, l1;
    split_tf32(b[0], h0, l0);
    split_tf32(b[1], h1, l1);
    return make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
  }
  struct A {  // an A fragment split once per k-step
    uint32_t hi[4], lo[4];
  };
  __device__ static A prepare(const float (&a)[4]) {
    A r;
#pragma unroll
    for (int q = 0; q < 4; ++q) split_tf32(a[q], r.hi[q], r.lo[q]);
    return r;
  }
  __device__ static void mma(float (&c)[4], const A& a, const B& b) {
    const uint32_t b_hi[2] = {__float_as_uint(b.x), __float_as_uint(b.y)};
    const uint32_t b_lo[2] = {__float_as_uint(b.z), __float_as_uint(b.w)};
    mma_3xtf32(c, a.hi, a.lo, b_hi, b_lo);
  }
  __device__ static float sigmoid(float z) { return 1.f / (1.f + expf(-z)); }
};

// float64: mma.m8n8k4 f64
struct F64 {
  using T = double;
  using B = double;
  static constexpr int kRows = 8, kK = 4, kA = 1, kC = 2;
  __device__ static int a_k(int t, int) { return t; }
  __device__ static int a_row(int g, int) { return g; }
  __device__ static int b_k(int t, int) { return t; }
  __device__ static int c_row(int g, int) { return g; }
  __device__ static int perm_col(int s, int k) { return 8 * (s >> 1) + 2 * k + (s & 1); }
  template <int NJ>
  __device__ static void a_from_c(const double (&c)[NJ][2], int s, double (&a)[1]) { a[0] = c[s >> 1][s & 1]; }
  __device__ static B fragment(const double (&b)[1]) { return b[0]; }
  using A = double;
  __device__ static A prepare(const double (&a)[1]) { return a[0]; }
  __device__ static void mma(double (&c)[2], const A& a, const B& b) { mma_f64(c, a, b); }
  __device__ static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }
};

template <typename T>
using MmaOf = std::conditional_t<sizeof(T) == 4, Tf32, F64>;

// k-steps: of a 64-wide hidden input, and of the problem's input (K0S; float64 pads it to 16)
template <typename M>
constexpr int kHiddenSteps = kH / M::kK;
template <typename M>
__host__ __device__ constexpr int input_steps_max() { return kK0Max / M::kK; }
template <typename T>
inline int input_steps(const MLPHiddenProblem<T>& p) {
  return sizeof(T) == 4 ? (p.width[0] > 8 ? 2 : 1) : input_steps_max<F64>();
}

// n8 tiles of the input (its gradient's columns): 1 or 2
template <typename M>
__host__ __device__ constexpr int input_tiles(int k0s) { return (k0s * M::kK + 7) / 8; }

// Fragment tables per direction: layer 0 holds K0S x kJ forward entries (k-steps x n-tiles) or
// kHiddenSteps x input_tiles backward ones, every other layer kHiddenSteps x kJ; an entry is 32
// lanes' B fragments.
template <typename M>
__host__ __device__ constexpr int layer0_entries(int k0s) {
  return k0s * kJ > kHiddenSteps<M> * input_tiles<M>(k0s) ? k0s * kJ : kHiddenSteps<M> * input_tiles<M>(k0s);
}
template <typename M>
__host__ __device__ constexpr int layer_entry(int l, int k0s) {
  return l == 0 ? 0 : layer0_entries<M>(k0s) + (l - 1) * kHiddenSteps<M> * kJ;
}

template <typename T>
__host__ inline size_t smem_bytes(int L, int k0s, bool backward) {
  using M = MmaOf<T>;
  return size_t(layer_entry<M>(L, k0s)) * 32 * sizeof(typename M::B) * (backward ? 2 : 1);
}

// Which problems these kernels serve (the caller also needs compute capability >= 8).
template <typename T>
inline bool serves(const MLPHiddenProblem<T>& p) {
  if (p.num_layers < 2 || p.num_layers > 3 || p.width[0] > kK0Max) return false;
  for (int l = 1; l <= p.num_layers; ++l)
    if (p.width[l] > kH) return false;
  return true;
}

template <typename T>
__device__ __forceinline__ T weight(const MLPHiddenProblem<T>& p, int l, int i, int j) {
  return i < p.width[l] && j < p.width[l + 1] ? p.w[l][i * p.width[l + 1] + j] : T(0);
}

// The forward tables (and, with bwd, the backward ones) of every layer, as in the header comment.
template <typename M, int L, int K0S>
__device__ void stage_tables(const MLPHiddenProblem<typename M::T>& p, typename M::B* fwd, typename M::B* bwd) {
  using T = typename M::T;
  constexpr int HS = kHiddenSteps<M>, K0N = input_tiles<M>(K0S);
  constexpr int NB = (M::kA + 1) / 2;  // B elements per lane: 2 (tf32), 1 (f64)
  for (int i = threadIdx.x; i < layer_entry<M>(L, K0S) * 32; i += kThreads) {
    const int lane = i & 31, entry = i >> 5, g = lane >> 2, t = lane & 3;
    const int l = entry < layer0_entries<M>(K0S) ? 0 : 1 + (entry - layer0_entries<M>(K0S)) / (HS * kJ);
    const int r = entry - layer_entry<M>(l, K0S);
    T fb[NB], bb[NB];
    if (l == 0) {
      const int fs = r / kJ, fj = r % kJ, bs = r / K0N, bj = r % K0N;  // forward / backward (k-step, n-tile)
#pragma unroll
      for (int q = 0; q < NB; ++q) {
        fb[q] = fs < K0S ? weight(p, 0, M::kK * fs + M::b_k(t, q), 8 * fj + g) : T(0);
        bb[q] = bs < HS ? weight(p, 0, 8 * bj + g, M::perm_col(bs, M::b_k(t, q))) : T(0);
      }
    } else {
      const int s = r / kJ, j = r % kJ;
#pragma unroll
      for (int q = 0; q < NB; ++q) {
        fb[q] = weight(p, l, M::perm_col(s, M::b_k(t, q)), 8 * j + g);
        bb[q] = weight(p, l, 8 * j + g, M::perm_col(s, M::b_k(t, q)));
      }
    }
    fwd[i] = M::fragment(fb);
    if (bwd) bwd[i] = M::fragment(bb);
  }
  __syncthreads();
}

// acc[j] = sum_s A_s @ B_(s, j) over S k-steps and NJ n-tiles; tab: this layer's table at this
// lane; a_of(s, a) gives the A fragment of k-step s.
template <typename M, int S, int NJ, typename AFrag>
__device__ __forceinline__ void product(typename M::T (&acc)[NJ][M::kC], const typename M::B* tab, AFrag a_of) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int v = 0; v < M::kC; ++v) acc[j][v] = 0;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    typename M::T a[M::kA];
    a_of(s, a);
    const typename M::A af = M::prepare(a);
#pragma unroll
    for (int j = 0; j < NJ; ++j) M::mma(acc[j], af, tab[(s * NJ + j) * 32]);
  }
}

// f(j, v, row, col) for every element of this lane in the tile at row e0 in the accumulator
// layout of NJ n8 tiles
template <typename M, int NJ, typename F>
__device__ __forceinline__ void for_each_element(int64_t e0, F f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int v = 0; v < M::kC; ++v) f(j, v, e0 + M::c_row(g, v), 8 * j + 2 * t + (v & 1));
}

// The forward of the tile at rows e0..: act = h_L in the accumulator layout; with FAC,
// fac[l] = cst * silu'(z_l) for l < L - 1 and last = that of layer L - 1.
template <typename M, int L, int K0S, bool FAC>
__device__ __forceinline__ void forward_tile(const MLPHiddenProblem<typename M::T>& p, const typename M::B* tab,
                                             int64_t e0, typename M::T (&act)[kJ][M::kC],
                                             typename M::T (&fac)[L - 1][kJ][M::kC],
                                             typename M::T (&last)[kJ][M::kC]) {
  using T = typename M::T;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int k0 = p.width[0];
  const T cst = p.cst;
  product<M, K0S, kJ>(act, tab, [&](int s, T (&a)[M::kA]) {
#pragma unroll
    for (int q = 0; q < M::kA; ++q) {
      const int64_t row = e0 + M::a_row(g, q);
      const int col = M::kK * s + M::a_k(t, q);
      a[q] = row < p.num_edges && col < k0 ? p.x[row * k0 + col] : T(0);
    }
  });
#pragma unroll
  for (int l = 0; l < L; ++l) {
    if (l > 0) {
      T z[kJ][M::kC];
      product<M, kHiddenSteps<M>, kJ>(z, tab + layer_entry<M>(l, K0S) * 32,
                                      [&](int s, T (&a)[M::kA]) { M::a_from_c(act, s, a); });
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int v = 0; v < M::kC; ++v) act[j][v] = z[j][v];
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int v = 0; v < M::kC; ++v) {
        const T z = act[j][v], s = M::sigmoid(z);
        if constexpr (FAC) {
          const T f = cst * s * (T(1) + z * (T(1) - s));
          if (l < L - 1)
            fac[l < L - 1 ? l : 0][j][v] = f;
          else
            last[j][v] = f;
        }
        act[j][v] = z * s * cst;
      }
  }
}

template <typename T, int L, int K0S, bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    mlp_hidden_mma_kernel(const MLPHiddenProblem<T> p, const T* __restrict__ grad_h, T* __restrict__ out) {
  using M = MmaOf<T>;
  using B = typename M::B;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  B* const fwd_tab = reinterpret_cast<B*>(smem_raw);
  B* const bwd_tab = BWD ? fwd_tab + layer_entry<M>(L, K0S) * 32 : nullptr;
  stage_tables<M, L, K0S>(p, fwd_tab, bwd_tab);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t E = p.num_edges;
  const int k0 = p.width[0], hl = p.width[L];
  const int64_t tiles = (E + M::kRows - 1) / M::kRows;
  for (int64_t tile = int64_t(blockIdx.x) * kWarps + warp; tile < tiles; tile += int64_t(gridDim.x) * kWarps) {
    const int64_t e0 = tile * M::kRows;
    T act[kJ][M::kC], fac[L - 1][kJ][M::kC], last[kJ][M::kC];
    forward_tile<M, L, K0S, BWD>(p, fwd_tab + lane, e0, act, fac, last);
    if constexpr (!BWD) {
      for_each_element<M, kJ>(e0, [&](int j, int v, int64_t row, int col) {
        if (row < E && col < hl) out[row * hl + col] = act[j][v];
      });
    } else {
      T gr[kJ][M::kC];  // gradient at the current layer's output (z side)
      for_each_element<M, kJ>(e0, [&](int j, int v, int64_t row, int col) {
        gr[j][v] = row < E && col < hl ? grad_h[row * hl + col] * last[j][v] : T(0);
      });
#pragma unroll
      for (int l = L - 1; l >= 1; --l) {
        T z[kJ][M::kC];
        product<M, kHiddenSteps<M>, kJ>(z, bwd_tab + layer_entry<M>(l, K0S) * 32 + lane,
                                        [&](int s, T (&a)[M::kA]) { M::a_from_c(gr, s, a); });
#pragma unroll
        for (int j = 0; j < kJ; ++j)
#pragma unroll
          for (int v = 0; v < M::kC; ++v) gr[j][v] = z[j][v] * fac[l - 1][j][v];
      }
      constexpr int K0N = input_tiles<M>(K0S);
      T gx[K0N][M::kC];
      product<M, kHiddenSteps<M>, K0N>(gx, bwd_tab + lane, [&](int s, T (&a)[M::kA]) { M::a_from_c(gr, s, a); });
      for_each_element<M, K0N>(e0, [&](int j, int v, int64_t row, int col) {
        if (row < E && col < k0) out[row * k0 + col] = gx[j][v];
      });
    }
  }
}

}  // namespace mlp_mma
}  // namespace md_accel
