// Tensor-core kernels of md_accel::mlp_hidden_{fwd,bwd} for float32 (included by
// mlp_hidden_kernels.cu, which chooses them): the radial MLPs of MACE, SevenNet and NequIP
// (input width <= 16, L = 2 or 3 hidden layers of width <= 64) as chains of 16-edge x 64 products
// with 3xTF32 mma (tf32_mma.cuh: float32 accuracy).
//
// A warp owns 16 edges at a time (one m16 tile). A layer's 64 outputs are 8 n8 tiles of the
// accumulator layout: lane (g, t) holds rows g, g + 8 and columns 8j + 2t, 8j + 2t + 1. That
// layout is the next layer's A operand without any data movement if the layer's k order is
// permuted: in k-step j, A slot t is column 8j + 2t and slot t + 4 is column 8j + 2t + 1, so
// (a0, a1, a2, a3) = (c0, c2, c1, c3) of tile j; the B operand (the weights) is read in the same
// permuted order. The activations thus stay in registers from the input row to the output row.
//
// The weights sit in shared memory as per-lane fragment tables, one float4 (b0 hi, b1 hi, b0 lo,
// b1 lo) per (layer, k-step, n-tile, lane), built by each block from W once (the split is done
// there, not per mma):
//   forward  (B = W_l):    layer 0 (natural k order)  b0 = W_0[8s+t][8j+g],   b1 = W_0[8s+t+4][8j+g]
//                          layers l >= 1 (permuted)    b0 = W_l[8s+2t][8j+g],  b1 = W_l[8s+2t+1][8j+g]
//   backward (B = W_l^T):  every layer (permuted)      b0 = W_l[8j+g][8s+2t],  b1 = W_l[8j+g][8s+2t+1]
// (s = k-step, j = n-tile; out-of-range rows and columns are zero, which is exact: silu(0) = 0).
//
// Backward: the forward is recomputed keeping cst * silu'(z_l) of layers 0..L-2 in registers
// (their accumulator layout is the one the backward's products come out in); grad_h is read in
// that layout and multiplied by the last layer's factor, then g <- (g @ W_l^T) * factor_{l-1}
// down to grad_x = g @ W_0^T.
//
// Fixed summation order everywhere: deterministic, independent of the grid.
#pragma once
#include <cstdint>

#include "mlp_hidden.h"
#include "tf32_mma.cuh"

namespace md_accel {
namespace mlp_mma {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kH = 64;         // hidden width (padded)
constexpr int kJ = kH / 8;     // n8 tiles (and k8 steps) of a hidden layer
constexpr int kK0Max = 16;     // input width (padded to K0S = 1 or 2 k8 steps)

// Fragment tables per direction: layer 0 has K0S * kJ entries (forward: K0S k-steps x kJ n-tiles;
// backward: kJ k-steps x K0S n-tiles), every other layer kJ * kJ; an entry is 32 lanes' float4.
__host__ __device__ constexpr int layer_entry(int l, int k0s) { return l == 0 ? 0 : k0s * kJ + (l - 1) * kJ * kJ; }
__host__ __device__ constexpr int table_entries(int L, int k0s) { return layer_entry(L, k0s); }

__host__ inline size_t smem_bytes(int L, int k0s, bool backward) {
  return size_t(table_entries(L, k0s)) * 32 * sizeof(float4) * (backward ? 2 : 1);
}

// k8 steps of the input (1 or 2)
inline int input_steps(const MLPHiddenProblem<float>& p) { return p.width[0] > 8 ? 2 : 1; }

// Which problems these kernels serve (the caller also needs compute capability >= 8).
inline bool serves(const MLPHiddenProblem<float>& p) {
  if (p.num_layers < 2 || p.num_layers > 3 || p.width[0] > kK0Max) return false;
  for (int l = 1; l <= p.num_layers; ++l)
    if (p.width[l] > kH) return false;
  return true;
}

__device__ __forceinline__ float weight(const MLPHiddenProblem<float>& p, int l, int i, int j) {
  return i < p.width[l] && j < p.width[l + 1] ? p.w[l][i * p.width[l + 1] + j] : 0.f;
}

__device__ __forceinline__ float4 fragment(float b0, float b1) {
  uint32_t h0, l0, h1, l1;
  split_tf32(b0, h0, l0);
  split_tf32(b1, h1, l1);
  return make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
}

// The forward tables (and, with bwd, the backward ones) of every layer, as in the header comment.
template <int L, int K0S>
__device__ void stage_tables(const MLPHiddenProblem<float>& p, float4* fwd, float4* bwd) {
  for (int i = threadIdx.x; i < table_entries(L, K0S) * 32; i += kThreads) {
    const int lane = i & 31, entry = i >> 5, g = lane >> 2, t = lane & 3;
    const int l = entry < K0S * kJ ? 0 : 1 + (entry - K0S * kJ) / (kJ * kJ);
    const int r = entry - layer_entry(l, K0S);
    if (l == 0) {
      const int fs = r / kJ, fj = r % kJ, bs = r / K0S, bj = r % K0S;  // forward / backward (k-step, n-tile)
      fwd[i] = fragment(weight(p, 0, 8 * fs + t, 8 * fj + g), weight(p, 0, 8 * fs + t + 4, 8 * fj + g));
      if (bwd) bwd[i] = fragment(weight(p, 0, 8 * bj + g, 8 * bs + 2 * t), weight(p, 0, 8 * bj + g, 8 * bs + 2 * t + 1));
    } else {
      const int s = r / kJ, j = r % kJ;
      fwd[i] = fragment(weight(p, l, 8 * s + 2 * t, 8 * j + g), weight(p, l, 8 * s + 2 * t + 1, 8 * j + g));
      if (bwd) bwd[i] = fragment(weight(p, l, 8 * j + g, 8 * s + 2 * t), weight(p, l, 8 * j + g, 8 * s + 2 * t + 1));
    }
  }
  __syncthreads();
}

__device__ __forceinline__ void split4(const float (&a)[4], uint32_t (&hi)[4], uint32_t (&lo)[4]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) split_tf32(a[q], hi[q], lo[q]);
}

// acc[j] (+)= A_s @ B_(s, j) over S k-steps and NJ n-tiles; tab: this layer's table at this lane;
// a_of(s, a) gives the A fragment of k-step s.
template <int S, int NJ, typename AFrag>
__device__ __forceinline__ void product(float (&acc)[NJ][4], const float4* tab, AFrag a_of) {
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) acc[j][v] = 0.f;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    float a[4];
    a_of(s, a);
    uint32_t a_hi[4], a_lo[4];
    split4(a, a_hi, a_lo);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const float4 b = tab[(s * NJ + j) * 32];
      const uint32_t b_hi[2] = {__float_as_uint(b.x), __float_as_uint(b.y)};
      const uint32_t b_lo[2] = {__float_as_uint(b.z), __float_as_uint(b.w)};
      mma_3xtf32(acc[j], a_hi, a_lo, b_hi, b_lo);
    }
  }
}

// the A fragment of k-step s from a 64-wide accumulator-layout tile (permuted k order)
template <int NJ>
__device__ __forceinline__ void permuted(const float (&c)[NJ][4], int s, float (&a)[4]) {
  a[0] = c[s][0];
  a[1] = c[s][2];
  a[2] = c[s][1];
  a[3] = c[s][3];
}

// f(j, v, row, col) for every element of this lane in a 16-row tile at row e0 in the accumulator
// layout of NJ n8 tiles
template <int NJ, typename F>
__device__ __forceinline__ void for_each_element(int64_t e0, F f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int v = 0; v < 4; ++v) f(j, v, e0 + g + 8 * (v >> 1), 8 * j + 2 * t + (v & 1));
}

__device__ __forceinline__ float sigmoid_f(float z) { return 1.f / (1.f + expf(-z)); }

// The forward of the tile at rows e0.. (16 edges): act = h_L in the accumulator layout; with
// FAC, fac[l] = cst * silu'(z_l) for l < L - 1 and last = that of layer L - 1.
template <int L, int K0S, bool FAC>
__device__ __forceinline__ void forward_tile(const MLPHiddenProblem<float>& p, const float4* tab, int64_t e0,
                                             float (&act)[kJ][4], float (&fac)[L - 1][kJ][4],
                                             float (&last)[kJ][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int k0 = p.width[0];
  const float cst = p.cst;
  auto x_at = [&](int64_t row, int col) -> float {
    return row < p.num_edges && col < k0 ? p.x[row * k0 + col] : 0.f;
  };
  product<K0S, kJ>(act, tab, [&](int s, float (&a)[4]) {
    a[0] = x_at(e0 + g, 8 * s + t);
    a[1] = x_at(e0 + g + 8, 8 * s + t);
    a[2] = x_at(e0 + g, 8 * s + t + 4);
    a[3] = x_at(e0 + g + 8, 8 * s + t + 4);
  });
#pragma unroll
  for (int l = 0; l < L; ++l) {
    if (l > 0) {
      float z[kJ][4];
      product<kJ, kJ>(z, tab + layer_entry(l, K0S) * 32, [&](int s, float (&a)[4]) { permuted(act, s, a); });
#pragma unroll
      for (int j = 0; j < kJ; ++j)
#pragma unroll
        for (int v = 0; v < 4; ++v) act[j][v] = z[j][v];
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const float z = act[j][v], s = sigmoid_f(z);
        if constexpr (FAC) {
          const float f = cst * s * (1.f + z * (1.f - s));
          if (l < L - 1)
            fac[l < L - 1 ? l : 0][j][v] = f;
          else
            last[j][v] = f;
        }
        act[j][v] = z * s * cst;
      }
  }
}

template <int L, int K0S, bool BWD>
__global__ void __launch_bounds__(kThreads, 1)
    mlp_hidden_mma_kernel(const MLPHiddenProblem<float> p, const float* __restrict__ grad_h, float* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float4* const fwd_tab = reinterpret_cast<float4*>(smem_raw);
  float4* const bwd_tab = BWD ? fwd_tab + table_entries(L, K0S) * 32 : nullptr;
  stage_tables<L, K0S>(p, fwd_tab, bwd_tab);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t E = p.num_edges;
  const int k0 = p.width[0], hl = p.width[L];
  const int64_t tiles = (E + 15) / 16;
  for (int64_t tile = int64_t(blockIdx.x) * kWarps + warp; tile < tiles; tile += int64_t(gridDim.x) * kWarps) {
    const int64_t e0 = tile * 16;
    float act[kJ][4], fac[L - 1][kJ][4], last[kJ][4];
    forward_tile<L, K0S, BWD>(p, fwd_tab + lane, e0, act, fac, last);
    if constexpr (!BWD) {
      for_each_element<kJ>(e0, [&](int j, int v, int64_t row, int col) {
        if (row < E && col < hl) out[row * hl + col] = act[j][v];
      });
    } else {
      float gr[kJ][4];  // gradient at the current layer's output (z side)
      for_each_element<kJ>(e0, [&](int j, int v, int64_t row, int col) {
        gr[j][v] = row < E && col < hl ? grad_h[row * hl + col] * last[j][v] : 0.f;
      });
#pragma unroll
      for (int l = L - 1; l >= 1; --l) {
        float z[kJ][4];
        product<kJ, kJ>(z, bwd_tab + layer_entry(l, K0S) * 32 + lane,
                        [&](int s, float (&a)[4]) { permuted(gr, s, a); });
#pragma unroll
        for (int j = 0; j < kJ; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) gr[j][v] = z[j][v] * fac[l - 1][j][v];
      }
      float gx[K0S][4];
      product<kJ, K0S>(gx, bwd_tab + lane, [&](int s, float (&a)[4]) { permuted(gr, s, a); });
      for_each_element<K0S>(e0, [&](int j, int v, int64_t row, int col) {
        if (row < E && col < k0) out[row * k0 + col] = gx[j][v];
      });
    }
  }
}

}  // namespace mlp_mma
}  // namespace md_accel
