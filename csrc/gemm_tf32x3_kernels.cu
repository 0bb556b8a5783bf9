// float32 GEMM on tensor cores with float32 accuracy: the "3xTF32" split (as CUTLASS's
// OpMultiplyAddFastF32). Interface: gemm_3xtf32_launch below, called by gemm_tf32x3.cpp.
//
//   C[M, N] = A[M, K] @ B[K, N]    (B given as [K, N] or, transposed, as [N, K]; float32, row-major)
//
// The 3xTF32 split and the mma fragment layouts: mma.cuh (C += A_lo*B_hi + A_hi*B_lo + A_hi*B_hi).
// Two accumulation schemes (kUnbiased, chosen at launch, see gemm_3xtf32_unbiased): by default the
// twelve mma of a 32-wide k tile into one partial; with MD_ACCEL_GEMM_UNBIASED=1 the three mma of
// each k8 step from zero, their truncation's mean added back (mma_3xtf32: no bias, 1.25-1.3x slower).
//
// Made for skinny shapes (radial MLP's last layer and its input gradient): K = 64 with
// N = 512..1760, and K = 512..1760 with N = 64; any M (64-bit row offsets), K and N multiples
// of 8 (16-byte cp.async chunks never straddle the matrix edge).
//
// B is small: a first kernel (split_b_kernel, BPairs) writes it once as (hi, lo) pairs, [K][N] float2,
// transposing it on the way where it comes as [N, K]; the GEMM kernel splits A in registers.
//
// Tiling: CTA tile 128 (M) x 64 (N), 128 threads = 4 warps, warp w owns rows [32w, 32w+32) x all
// 64 columns = 2 m16 tiles x 8 n8 tiles = 16 accumulator fragments (64 floats).
// K runs in 32-wide tiles through a 3-stage cp.async pipeline (A tile [128][32+4] float32, B tile
// [32][2*64+8] (hi, lo) pairs in shared memory; the paddings make the fragment loads
// bank-conflict free); A's hi/lo split is done in registers after the fragment loads.
// Out-of-range rows, columns and k are zero-filled by cp.async (src-size 0) and not stored.
// 1-D grid: block = (split * m_tiles + m_tile) * n_tiles + n_tile (consecutive blocks share their A
// rows in L2).
//
// Grouped layout (Grouped = {d, lda}, d > 0): A's rows are (group, m) pairs of a [G, K, d] tensor,
// row r = group * d + m holding A[r, k] = a[group * lda + k * d + m] (an equivariant linear's l > 0
// block: nodes x channels x components, the rows its components); C is written as [G, N, d] the
// same way. The tiles are the same; A is copied 4 bytes at a time and C stored element-wise. No
// split K in that layout.
//
// Split K (k_splits): a grid whose last wave would run nearly empty (a few thousand rows: the
// input gradient of a small system, a few hundred row tiles on 2 x 132 block slots) runs as up to
// kMaxSplits grids of K ranges (whole 32-wide k tiles) writing partial products, which
// sum_splits_kernel adds in split order: deterministic, one extra pass over S x M x N floats.
//
// The device primitives (cvt, mma, cp.async) are small functions so that tests can compile the
// kernel for the host with their own versions of them (tests/test_gemm_tf32x3.py, through
// tests/cuda_emu, which replaces mma.cuh's and defines MD_ACCEL_MMA_HOST_EMU).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "mma.cuh"

namespace md_accel {
namespace {

constexpr int kBM = 128;  // rows per block
constexpr int kBN = 64;   // columns per block
constexpr int kBK = 32;   // k per pipeline stage
constexpr int kStages = 3;
constexpr int kThreads = 128;
constexpr int kMaxDevices = 64;
constexpr int kBlocksPerSM = 2;        // __launch_bounds__(kThreads, 2) with kSmemBytes each
constexpr int kMaxSplits = 4;
constexpr int kMinTilesPerSplit = 4;   // k tiles per split, at least
constexpr int64_t kMaxPartialBytes = int64_t(256) << 20;
constexpr int kWarpRows = 32;             // rows per warp
constexpr int kMTiles = kWarpRows / 16;   // m16 tiles per warp
constexpr int kNTiles = kBN / 8;          // n8 tiles per warp
constexpr int kLdA = kBK + 4;             // shared row strides (floats)
constexpr int kLdB = 2 * kBN + 8;         // (hi, lo) pairs
constexpr int kStageFloats = kBM * kLdA + kBK * kLdB;
constexpr int kSmemBytes = int(sizeof(float)) * kStages * kStageFloats;  // 107520: 2 blocks per SM

static_assert(kThreads / 32 * kWarpRows == kBM, "warps must cover the block rows");
static_assert((kBM * kBK / 4) % kThreads == 0 && (kBK * 2 * kBN / 4) % kThreads == 0, "tile loads");
static_assert(kLdA % 4 == 0 && kLdB % 4 == 0, "16-byte aligned shared rows");

#ifndef MD_ACCEL_MMA_HOST_EMU
// 16 bytes global -> shared; src_bytes < 16 zero-fills the rest (0: no global read at all)
__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  MD_ACCEL_SM80_ASM_VOLATILE("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

// 4 bytes global -> shared (cp.async.ca: the grouped layout's neighbouring elements come from L1)
__device__ __forceinline__ void cp_async4(float* smem, const float* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  MD_ACCEL_SM80_ASM_VOLATILE("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { MD_ACCEL_SM80_ASM_VOLATILE("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  MD_ACCEL_SM80_ASM_VOLATILE("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
#endif


// x = hi + lo with both exact in tf32 (lo's low 13 bits cleared too, so any later tf32
// conversion of them, truncating or rounding, changes nothing)
__device__ __forceinline__ void split_tf32_exact(float x, float& hi, float& lo) {
  uint32_t h, l;
  split_tf32(x, h, l);
  hi = __uint_as_float(h);
  lo = __uint_as_float(l & 0xffffe000u);
}

// Where split_b_kernel puts B[k, n]'s (hi, lo), idx = k * N + n:
//   BPairs:    out[idx] = (hi, lo)                      (gemm_3xtf32_kernel's B tiles, [K][N] float2)
//   BStacked3: out = [b_hi ; b_lo ; b_hi], [3K, N]      (the cuBLAS route, see split3_a_kernel)
struct BPairs {
  float2* out;
  __device__ __forceinline__ void operator()(int64_t idx, float hi, float lo) const { out[idx] = make_float2(hi, lo); }
};
struct BStacked3 {
  float* out;
  int64_t block;  // K * N
  __device__ __forceinline__ void operator()(int64_t idx, float hi, float lo) const {
    out[idx] = hi;
    out[block + idx] = lo;
    out[2 * block + idx] = hi;
  }
};

// B = b [K, N], or b^T for b [N, K] (trans), split element by element; one thread per element
template <typename Store>
__global__ void __launch_bounds__(256) split_b_kernel(const float* __restrict__ b, int K, int N, bool trans,
                                                      Store store) {
  const int64_t idx = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (idx >= int64_t(K) * N) return;
  const int64_t k = idx / N, n = idx % N;
  float hi, lo;
  split_tf32_exact(b[trans ? n * K + k : idx], hi, lo);
  store(idx, hi, lo);
}

// The same product as one plain TF32 GEMM with K tripled, for cuBLAS (gemm_tf32x3.cpp):
//   a3 = [a_lo | a_hi | a_hi]  [M, 3K]        b3 = [b_hi ; b_lo ; b_hi]  [3K, N]  (BStacked3)
// a3 @ b3 = a_lo b_hi + a_hi b_lo + a_hi b_hi, every element exact in tf32. The hi x hi block
// comes last, in case cuBLAS walks K in order (not guaranteed; the accuracy, measured, does not
// depend on it): tensor cores truncate when they add into the accumulator, and while the small
// terms run the accumulator is small too.

// a [M, K] -> a3 [M, 3K]; one thread per element of a
__global__ void __launch_bounds__(256) split3_a_kernel(const float* __restrict__ a, float* __restrict__ a3,
                                                       int64_t total, int K) {
  const int64_t idx = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (idx >= total) return;
  const int64_t row = idx / K;
  const int col = int(idx - row * K);
  float hi, lo;
  split_tf32_exact(a[idx], hi, lo);
  float* const out = a3 + row * 3 * K + col;
  out[0] = lo;
  out[K] = hi;
  out[2 * K] = hi;
}

// a warp's accumulator fragments <- 0
__device__ __forceinline__ void zero_fragments(float (&x)[kMTiles][kNTiles][4]) {
#pragma unroll
  for (int i = 0; i < kMTiles; ++i)
#pragma unroll
    for (int j = 0; j < kNTiles; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) x[i][j][v] = 0.f;
}

// The grouped layout of A and C (see the header); d = 0: plain row-major.
struct Grouped {
  int d;
  int64_t lda;  // floats between consecutive groups of A
};

// c: C, or with several splits the partial products [splits][M][N].
// !kUnbiased (default): the twelve mma of a 32-wide k tile (4 k8 steps x 3) go into one partial
// started from zero, added to the result with one round-to-nearest add; each mma's truncation, at
// the partial's growing size, shifts the output toward zero: -2.3e-7 of its size on average under
// tests/cuda_emu's truncating mma, -2e-7 measured on an H200 (benchmarks/gemm_tf32x3.py).
// kUnbiased (MD_ACCEL_GEMM_UNBIASED=1): each k8 step goes through mma_3xtf32 (mma.cuh): its
// partial, started from zero, and the mean of its truncation are added to the result with
// round-to-nearest adds; bias +5e-9, 1.25-1.31x the time (H200, 312k rows, K or N = 64).
template <bool kGrouped, bool kUnbiased>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM)
gemm_3xtf32_kernel(const float* __restrict__ a, const float2* __restrict__ b, float* __restrict__ c, int64_t M,
                   int K, int N, unsigned n_tiles, unsigned tiles, int kt_per_split, Grouped grp) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* const smem = reinterpret_cast<float*>(smem_raw);
  const int tid = int(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const unsigned split = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  const int n0 = int(tile % n_tiles) * kBN;
  const int64_t m0 = int64_t(tile / n_tiles) * kBM;
  const int kt0 = int(split) * kt_per_split;  // this block's k tiles: kt0 + [0, num_kt)
  const int kt_left = (K + kBK - 1) / kBK - kt0;
  const int num_kt = kt_left < kt_per_split ? kt_left : kt_per_split;
  c += int64_t(split) * M * N;

  // Tile loads, 16-byte chunks: thread tid copies A rows a_r + 16 i at k a_c..a_c+3 and B rows
  // b_r + 4 i at columns b_c, b_c+1 (4 floats: two (hi, lo) pairs). Offsets within the block's
  // rows fit 32 bits (K < 2^24, K*N < 2^31: checked by the launcher).
  constexpr int kAChunksPerRow = kBK / 4, kBChunksPerRow = 2 * kBN / 4;
  const int a_r = tid / kAChunksPerRow, a_c = (tid % kAChunksPerRow) * 4;
  const int b_r = tid / kBChunksPerRow, b_c = (tid % kBChunksPerRow) * 2;
  const float* const a_blk = a + m0 * K;
  const int a_rows = M - m0 < kBM ? int(M - m0) : kBM;  // rows of A in this block
  const bool b_col_ok = n0 + b_c < N;                 // N % 8 == 0: both columns or none
  // grouped: where this thread's A rows start (group * lda + m); element k at + k * d
  constexpr int kARowsPerThread = kBM * kBK / 4 / kThreads;
  int64_t a_row_off[kGrouped ? kARowsPerThread : 1];
  if constexpr (kGrouped) {
#pragma unroll
    for (int i = 0; i < kARowsPerThread; ++i) {
      const int64_t r = m0 + a_r + i * (kThreads / kAChunksPerRow);
      a_row_off[i] = (r / grp.d) * grp.lda + r % grp.d;
    }
  }

  // stage `stage` <- A[m0 : m0+kBM, k0 : k0+kBK] and B[k0 : k0+kBK, n0 : n0+kBN] (hi, lo), zero-filled outside
  auto load_tile = [&](int stage, int kt) {
    float* const As = smem + stage * kStageFloats;
    float* const Bs = As + kBM * kLdA;
    const int k0 = (kt0 + kt) * kBK;
    const bool a_k_ok = k0 + a_c < K;  // K % 8 == 0: the whole chunk or none
#pragma unroll
    for (int i = 0; i < kARowsPerThread; ++i) {
      const int row = a_r + i * (kThreads / kAChunksPerRow);
      const bool ok = a_k_ok && row < a_rows;
      if constexpr (kGrouped) {
#pragma unroll
        for (int q = 0; q < 4; ++q)
          cp_async4(As + row * kLdA + a_c + q, ok ? a + (a_row_off[i] + int64_t(k0 + a_c + q) * grp.d) : a, ok ? 4 : 0);
      } else {
        cp_async16(As + row * kLdA + a_c, ok ? a_blk + (row * K + k0 + a_c) : a, ok ? 16 : 0);
      }
    }
#pragma unroll
    for (int i = 0; i < kBK * 2 * kBN / 4 / kThreads; ++i) {
      const int row = b_r + i * (kThreads / kBChunksPerRow);
      const bool ok = b_col_ok && k0 + row < K;
      const float2* const src = ok ? b + ((k0 + row) * N + n0 + b_c) : b;
      cp_async16(Bs + row * kLdB + 2 * b_c, reinterpret_cast<const float*>(src), ok ? 16 : 0);
    }
  };

  float acc[kMTiles][kNTiles][4];
  zero_fragments(acc);

  // prologue: the first kStages-1 tiles, one commit group each (empty groups past the end)
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_kt) load_tile(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < num_kt; ++kt) {
    // groups committed so far: kStages-1 + kt; tile kt is group kt -> at most kStages-2 pending
    cp_async_wait<kStages - 2>();
    // tile kt visible to all; every warp is done with tile kt-1, whose stage is refilled next
    __syncthreads();
    const int pf = kt + kStages - 1;
    if (pf < num_kt) load_tile(pf % kStages, pf);
    cp_async_commit();

    const float* const As = smem + (kt % kStages) * kStageFloats + warp * kWarpRows * kLdA;
    const float* const Bs = smem + (kt % kStages) * kStageFloats + kBM * kLdA;
    float part[kUnbiased ? 1 : kMTiles][kUnbiased ? 1 : kNTiles][4];
    if constexpr (!kUnbiased) zero_fragments(part);
#pragma unroll
    for (int ks = 0; ks < kBK / 8; ++ks) {
      uint32_t a_hi[kMTiles][4], a_lo[kMTiles][4];
#pragma unroll
      for (int i = 0; i < kMTiles; ++i) {
        const float* const p = As + (i * 16 + g) * kLdA + ks * 8 + t;
        split_tf32(p[0], a_hi[i][0], a_lo[i][0]);                 // (g,   t)
        split_tf32(p[8 * kLdA], a_hi[i][1], a_lo[i][1]);          // (g+8, t)
        split_tf32(p[4], a_hi[i][2], a_lo[i][2]);                 // (g,   t+4)
        split_tf32(p[8 * kLdA + 4], a_hi[i][3], a_lo[i][3]);      // (g+8, t+4)
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        const float* const q = Bs + (ks * 8 + t) * kLdB + 2 * (j * 8 + g);
        const float2 b0 = *reinterpret_cast<const float2*>(q);              // (t,   g)
        const float2 b1 = *reinterpret_cast<const float2*>(q + 4 * kLdB);   // (t+4, g)
        const uint32_t b_hi[2] = {__float_as_uint(b0.x), __float_as_uint(b1.x)};
        const uint32_t b_lo[2] = {__float_as_uint(b0.y), __float_as_uint(b1.y)};
#pragma unroll
        for (int i = 0; i < kMTiles; ++i) {
          if constexpr (kUnbiased)
            mma_3xtf32(acc[i][j], a_hi[i], a_lo[i], b_hi, b_lo);
          else
            mma_3xtf32_into(part[i][j], a_hi[i], a_lo[i], b_hi, b_lo);
        }
      }
    }
    if constexpr (!kUnbiased) {
#pragma unroll
      for (int i = 0; i < kMTiles; ++i)
#pragma unroll
        for (int j = 0; j < kNTiles; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) acc[i][j][v] += part[i][j][v];
    }
  }

  // epilogue: c0,c1 at (g, 2t..2t+1), c2,c3 at (g+8, 2t..2t+1) of each 16x8 tile
#pragma unroll
  for (int i = 0; i < kMTiles; ++i) {
    const int64_t r0 = m0 + warp * kWarpRows + i * 16 + g;
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const int col = n0 + j * 8 + 2 * t;
      if (col >= N) continue;  // N % 8 == 0: a whole n8 tile is in or out
      if constexpr (kGrouped) {  // C[r, col] at (r / d) * N * d + col * d + r % d
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t r = r0 + 8 * h;
          if (r >= M) continue;
          float* const cr = c + (r / grp.d) * N * grp.d + int64_t(col) * grp.d + r % grp.d;
          cr[0] = acc[i][j][2 * h];
          cr[grp.d] = acc[i][j][2 * h + 1];
        }
      } else {
        if (r0 < M) *reinterpret_cast<float2*>(c + r0 * N + col) = make_float2(acc[i][j][0], acc[i][j][1]);
        if (r0 + 8 < M) *reinterpret_cast<float2*>(c + (r0 + 8) * N + col) = make_float2(acc[i][j][2], acc[i][j][3]);
      }
    }
  }
}

// c = the sum of the splits' partial products, in split order; 4 floats per thread (M * N % 4 == 0)
__global__ void __launch_bounds__(256) sum_splits_kernel(const float4* __restrict__ part, float4* __restrict__ c,
                                                         int64_t total4, int splits) {
  const int64_t idx = int64_t(blockIdx.x) * 256 + threadIdx.x;
  if (idx >= total4) return;
  float4 s = part[idx];
  for (int i = 1; i < splits; ++i) {
    const float4 v = part[i * total4 + idx];
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
  }
  c[idx] = s;
}

// Streaming multiprocessors of the current device (cached per device; 0 if unknown).
int num_sms() {
  static std::atomic<int> known[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return 0;
  }
  int v = known[dev].load(std::memory_order_acquire);
  if (v == 0) {
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    known[dev].store(v, std::memory_order_release);
  }
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

}  // namespace

// Whether float32 products avoid the tensor cores' truncation bias: MD_ACCEL_GEMM_UNBIASED=1 (read
// per call, like MD_ACCEL_GEMM_CUBLAS, so that benchmarks compare both in one process). Then the
// kernel runs its unbiased scheme and gemm_tf32x3.cpp does not route to cuBLAS.
bool gemm_3xtf32_unbiased() {
  const char* v = std::getenv("MD_ACCEL_GEMM_UNBIASED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

namespace {

// One launch of gemm_3xtf32_kernel<kGrouped, kUnbiased> (its shared-memory size opted in once per
// device and instance: not again during CUDA graph capture, after a first eager call).
struct GemmLaunch {
  const float* a;
  const float2* b;
  float* c;
  int64_t m;
  int k, n;
  unsigned n_tiles, tiles;
  int kt_per_split;
  Grouped grp;
  unsigned blocks;
  cudaStream_t stream;

  template <bool kGrouped, bool kUnbiased>
  const char* run() const {
    static std::atomic<bool> smem_set[kMaxDevices];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return "cudaGetDevice failed";
    if (!smem_set[dev].load(std::memory_order_acquire)) {
      if (cudaFuncSetAttribute(reinterpret_cast<const void*>(gemm_3xtf32_kernel<kGrouped, kUnbiased>),
                               cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) {
        cudaGetLastError();
        return "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
      }
      smem_set[dev].store(true, std::memory_order_release);
    }
    gemm_3xtf32_kernel<kGrouped, kUnbiased><<<blocks, kThreads, kSmemBytes, stream>>>(a, b, c, m, k, n, n_tiles, tiles,
                                                                                      kt_per_split, grp);
    return nullptr;
  }
};
}  // namespace

// How many K ranges to run: the S that minimises the time in units of one full-K wave of blocks,
// ceil(blocks * S / slots) / S, plus 0.1 for sum_splits_kernel's pass when S > 1.
// MD_ACCEL_GEMM_SPLIT_K=0: never split (for comparisons).
int gemm_3xtf32_splits(int64_t m, int64_t k, int64_t n) {
  const char* env = std::getenv("MD_ACCEL_GEMM_SPLIT_K");
  if (env != nullptr && env[0] == '0') return 1;
  const int64_t slots = int64_t(kBlocksPerSM) * num_sms(), num_kt = ceil_div(k, kBK);
  const int64_t blocks = ceil_div(m, kBM) * ceil_div(n, kBN);
  if (slots <= 0 || blocks <= 0) return 1;
  int best = 1;
  double best_cost = double(ceil_div(blocks, slots));
  for (int s = 2; s <= kMaxSplits; ++s) {
    if (num_kt < int64_t(s) * kMinTilesPerSplit || s * m * n * int64_t(sizeof(float)) > kMaxPartialBytes) break;
    const double cost = double(ceil_div(blocks * s, slots)) / s + 0.1;
    if (cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return best;
}

int64_t gemm_3xtf32_scratch_bytes(int64_t m, int64_t k, int64_t n, int splits) {
  return align16(k * n * int64_t(sizeof(float2))) + (splits > 1 ? splits * m * n * int64_t(sizeof(float)) : 0);
}

// Whether the kernel runs on `device`: sm_80+ (tf32 mma, cp.async) and kSmemBytes of opt-in
// shared memory per block (sm_86/89 parts have less). Cached per device.
bool gemm_3xtf32_supported(int device) {
  static std::atomic<int> known[kMaxDevices];  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= kMaxDevices) return false;
  int v = known[device].load(std::memory_order_acquire);
  if (v == 0) {
    int major = 0, smem = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess;
    if (!ok) cudaGetLastError();  // leave no sticky error for the next launch check
    v = ok && major >= 8 && smem >= kSmemBytes ? 1 : 2;
    known[device].store(v, std::memory_order_release);
  }
  return v == 1;
}

// C[M, N] = A[M, K] @ B, B = b [K, N] or (trans_b) b^T with b [N, K]; float32, row-major,
// contiguous, a 16-byte aligned; splits: gemm_3xtf32_splits(M, K, N) (or 1); scratch:
// gemm_3xtf32_scratch_bytes(M, K, N, splits) bytes, 16-byte aligned. group_d > 0: A and C in the
// grouped layout (header; M = G * group_d, A's groups group_lda floats apart, C a new [G, N, d]),
// splits 1, a and c 4-byte aligned.
// Returns nullptr on success, else a static error message.
const char* gemm_3xtf32_launch(const float* a, const float* b, bool trans_b, float* c, int64_t m, int64_t k,
                               int64_t n, int splits, void* scratch, cudaStream_t stream, int group_d,
                               int64_t group_lda) {
  if (m < 0 || k < 0 || n < 0 || k % 8 != 0 || n % 8 != 0) return "K and N must be multiples of 8";
  if (splits < 1 || splits > kMaxSplits) return "splits out of range";
  if (k >= (int64_t(1) << 24) || k * n > 0x7fffffffLL) return "K or K*N too large";
  const bool grouped = group_d > 0;
  if (grouped && (splits != 1 || m % group_d != 0 || group_lda < k * group_d)) return "bad grouped layout";
  if ((reinterpret_cast<uintptr_t>(scratch) | (grouped ? 0 : reinterpret_cast<uintptr_t>(a) |
                                                              reinterpret_cast<uintptr_t>(c))) % 16 != 0)
    return "operands must be 16-byte aligned";
  if (m == 0 || n == 0) return nullptr;
  float2* const b_split = static_cast<float2*>(scratch);
  const int ki = int(k), ni = int(n);
  if (k > 0) {
    const unsigned split_grid = unsigned((k * n + 255) / 256);
    split_b_kernel<<<split_grid, 256, 0, stream>>>(b, ki, ni, trans_b, BPairs{b_split});
  }
  const int64_t n_tiles = ceil_div(n, kBN), tiles = ceil_div(m, kBM) * n_tiles;
  const int kt_per_split = int(ceil_div(ceil_div(k, kBK), splits));
  const int64_t blocks = tiles * splits;
  if (blocks > 0x7fffffffLL) return "problem too large for one launch";
  float* const part = splits > 1 ? reinterpret_cast<float*>(static_cast<char*>(scratch) + align16(k * n * 8)) : c;
  const GemmLaunch launch{a, b_split, part, m, ki, ni, unsigned(n_tiles), unsigned(tiles), kt_per_split,
                          Grouped{group_d, group_lda}, unsigned(blocks), stream};
  const bool unbiased = gemm_3xtf32_unbiased();
  const char* launch_err = grouped ? (unbiased ? launch.run<true, true>() : launch.run<true, false>())
                                   : (unbiased ? launch.run<false, true>() : launch.run<false, false>());
  if (launch_err != nullptr) return launch_err;
  if (splits > 1) {
    const int64_t total4 = m * n / 4;
    const unsigned sum_grid = unsigned(ceil_div(total4, 256));
    sum_splits_kernel<<<sum_grid, 256, 0, stream>>>(reinterpret_cast<const float4*>(part),
                                                   reinterpret_cast<float4*>(c), total4, splits);
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// a3 = [a_lo | a_hi | a_hi] [M, 3K] and b3 = [b_hi ; b_lo ; b_hi] [3K, N] (see split3_a_kernel),
// B = b [K, N] or (trans_b) b^T with b [N, K]; contiguous float32. nullptr on success.
const char* gemm_3xtf32_split3(const float* a, const float* b, bool trans_b, float* a3, float* b3, int64_t m,
                               int64_t k, int64_t n, cudaStream_t stream) {
  if (m < 0 || k <= 0 || n <= 0 || k * n > 0x7fffffffLL) return "split3: sizes out of range";
  const int64_t a_blocks = (m * k + 255) / 256, b_blocks = (k * n + 255) / 256;
  if (a_blocks > 0x7fffffffLL) return "split3: too many rows for one launch";
  if (a_blocks > 0) split3_a_kernel<<<unsigned(a_blocks), 256, 0, stream>>>(a, a3, m * k, int(k));
  split_b_kernel<<<unsigned(b_blocks), 256, 0, stream>>>(b, int(k), int(n), trans_b, BStacked3{b3, k * n});
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace md_accel
