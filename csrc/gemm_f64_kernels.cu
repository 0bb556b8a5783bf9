// float64 GEMM on the DMMA tensor cores (mma.m8n8k4.f64: IEEE float64 products and sums, as an
// FMA chain in a fixed order). Interface: gemm_f64_launch below, called by gemm_tf32x3.cpp for
// CUDA float64 operands.
//
//   C[M, N] = A[M, K] @ B[K, N]    (float64, row-major, contiguous)
//
// Made for the radial MLP's last layer in float64, where cuBLAS's DGEMM reaches about half of the
// DMMA peak on these skinny shapes: the forward (K = 64, N = 512..2176, M = edges, millions) and
// its input gradient (K = N_forward, N = 64). K a multiple of 4 and N of 8 (16-byte cp.async
// chunks never straddle the matrix edge), any M (64-bit row offsets).
//
// Tiling: warp tile 32 x 32 = 4 (m8) x 4 (n8) DMMA tiles, 32 accumulators per thread; CTA tile
// (32 WM) x (32 WN) with WM x WN warps: 64 x 128 for wide outputs (the forward), 128 x 64 for
// N = 64 (the input gradient). K runs in 16-wide tiles through a 3-stage cp.async pipeline (A tile
// [BM][16+4], B tile [16][BN+4] float64 in shared memory; with these paddings the fragment loads
// of a half-warp hit 32 different banks). Out-of-range rows, columns and k are zero-filled by
// cp.async and not stored. 1-D grid: block = m_tile * n_tiles + n_tile (consecutive blocks share
// their A rows in L2). Each output element is summed in k order by one thread: deterministic.
//
// Device primitives (mma_f64, cp.async) come from mma.cuh, so tests compile this kernel for the
// host with tests/cuda_emu (tests/test_gemm_tf32x3.py).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "mma.cuh"

namespace md_accel {
namespace {

constexpr int kBK = 16;          // k per pipeline stage
constexpr int kStages = 3;
constexpr int kWarpTile = 32;    // rows and columns per warp
constexpr int kTiles = kWarpTile / 8;  // m8 (and n8) tiles per warp
constexpr int kLdA = kBK + 4;    // shared row strides (doubles)
constexpr int kMaxDevices = 64;

template <int WM, int WN>
struct Shape {
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kBM = kWarpTile * WM, kBN = kWarpTile * WN;
  static constexpr int kLdB = kBN + 4;
  static constexpr int kStageDoubles = kBM * kLdA + kBK * kLdB;
  static constexpr int kSmemBytes = int(sizeof(double)) * kStages * kStageDoubles;
  static_assert((kBM * kBK / 2) % kThreads == 0 && (kBK * kBN / 2) % kThreads == 0, "tile loads");
};
using Wide = Shape<2, 4>;    // 64 x 128, 256 threads
using Narrow = Shape<4, 2>;  // 128 x 64, 256 threads
constexpr int kMaxSmemBytes = Wide::kSmemBytes > Narrow::kSmemBytes ? Wide::kSmemBytes : Narrow::kSmemBytes;

template <int WM, int WN>
__global__ void __launch_bounds__(Shape<WM, WN>::kThreads, 2)
gemm_f64_kernel(const double* __restrict__ a, const double* __restrict__ b, double* __restrict__ c, int64_t M,
                int K, int N, unsigned n_tiles) {
  using S = Shape<WM, WN>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  double* const smem = reinterpret_cast<double*>(smem_raw);
  const int tid = int(threadIdx.x);
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wm = warp / WN, wn = warp % WN;
  const int n0 = int(blockIdx.x % n_tiles) * S::kBN;
  const int64_t m0 = int64_t(blockIdx.x / n_tiles) * S::kBM;
  const int num_kt = (K + kBK - 1) / kBK;
  const double* const a_blk = a + m0 * K;
  const int a_rows = M - m0 < S::kBM ? int(M - m0) : S::kBM;  // rows of A in this block

  // stage `stage` <- A[m0 : m0+BM, k0 : k0+16] and B[k0 : k0+16, n0 : n0+BN], 16-byte chunks
  // (2 doubles), zero-filled outside; K % 4 == 0 and N % 8 == 0: a chunk is wholly in or out
  auto load_tile = [&](int stage, int kt) {
    double* const As = smem + stage * S::kStageDoubles;
    double* const Bs = As + S::kBM * kLdA;
    const int k0 = kt * kBK;
#pragma unroll
    for (int i = 0; i < S::kBM * kBK / 2 / S::kThreads; ++i) {
      const int chunk = tid + i * S::kThreads;
      const int row = chunk / (kBK / 2), col = (chunk % (kBK / 2)) * 2;
      const bool ok = row < a_rows && k0 + col < K;
      cp_async16(As + row * kLdA + col, ok ? a_blk + (int64_t(row) * K + k0 + col) : a, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < kBK * S::kBN / 2 / S::kThreads; ++i) {
      const int chunk = tid + i * S::kThreads;
      const int row = chunk / (S::kBN / 2), col = (chunk % (S::kBN / 2)) * 2;
      const bool ok = k0 + row < K && n0 + col < N;
      cp_async16(Bs + row * S::kLdB + col, ok ? b + (int64_t(k0 + row) * N + n0 + col) : b, ok ? 16 : 0);
    }
  };

  double acc[kTiles][kTiles][2];
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int j = 0; j < kTiles; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;

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

    const double* const As = smem + (kt % kStages) * S::kStageDoubles + (wm * kWarpTile + g) * kLdA + t;
    const double* const Bs = smem + (kt % kStages) * S::kStageDoubles + S::kBM * kLdA + t * S::kLdB +
                             wn * kWarpTile + g;
#pragma unroll
    for (int ks = 0; ks < kBK / 4; ++ks) {
      double av[kTiles], bv[kTiles];
#pragma unroll
      for (int i = 0; i < kTiles; ++i) av[i] = As[i * 8 * kLdA + ks * 4];        // A (g, t) of m8 tile i
#pragma unroll
      for (int j = 0; j < kTiles; ++j) bv[j] = Bs[ks * 4 * S::kLdB + j * 8];     // B (t, g) of n8 tile j
#pragma unroll
      for (int i = 0; i < kTiles; ++i)
#pragma unroll
        for (int j = 0; j < kTiles; ++j) mma_f64(acc[i][j], av[i], bv[j]);
    }
  }

  // epilogue: c0, c1 at (g, 2t..2t+1) of each 8x8 tile, one 16-byte store
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int64_t row = m0 + wm * kWarpTile + i * 8 + g;
    if (row >= M) continue;
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int col = n0 + wn * kWarpTile + j * 8 + 2 * t;
      if (col < N) *reinterpret_cast<double2*>(c + row * N + col) = make_double2(acc[i][j][0], acc[i][j][1]);
    }
  }
}

template <int WM, int WN>
const char* launch(const double* a, const double* b, double* c, int64_t m, int k, int n, cudaStream_t stream) {
  using S = Shape<WM, WN>;
  const int64_t n_tiles = (n + S::kBN - 1) / S::kBN, m_tiles = (m + S::kBM - 1) / S::kBM;
  if (m_tiles * n_tiles > 0x7fffffffLL) return "problem too large for one launch";
  // once per device and shape (not again during CUDA graph capture, after a first eager call)
  static std::atomic<bool> smem_set[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return "cudaGetDevice failed";
  if (!smem_set[dev].load(std::memory_order_acquire)) {
    if (cudaFuncSetAttribute(gemm_f64_kernel<WM, WN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             S::kSmemBytes) != cudaSuccess) {
      cudaGetLastError();
      return "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
    }
    smem_set[dev].store(true, std::memory_order_release);
  }
  const unsigned grid = unsigned(m_tiles * n_tiles), nt = unsigned(n_tiles);
  gemm_f64_kernel<WM, WN><<<grid, S::kThreads, S::kSmemBytes, stream>>>(a, b, c, m, k, n, nt);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

// Whether the kernel runs on `device`: sm_80+ (DMMA, cp.async) and the tiles' shared memory per
// block. Cached per device.
bool gemm_f64_supported(int device) {
  static std::atomic<int> known[kMaxDevices];  // 0 unknown, 1 yes, 2 no
  if (device < 0 || device >= kMaxDevices) return false;
  int v = known[device].load(std::memory_order_acquire);
  if (v == 0) {
    int major = 0, smem = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess;
    if (!ok) cudaGetLastError();  // leave no sticky error for the next launch check
    v = ok && major >= 8 && smem >= kMaxSmemBytes ? 1 : 2;
    known[device].store(v, std::memory_order_release);
  }
  return v == 1;
}

// C[M, N] = A[M, K] @ B[K, N]; float64, row-major, contiguous, a, b and c 16-byte aligned.
// Returns nullptr on success, else a static error message.
const char* gemm_f64_launch(const double* a, const double* b, double* c, int64_t m, int64_t k, int64_t n,
                            cudaStream_t stream) {
  if (m < 0 || k < 0 || n < 0 || k % 4 != 0 || n % 8 != 0) return "K must be a multiple of 4 and N of 8";
  if (k >= (int64_t(1) << 24) || k * n > 0x7fffffffLL) return "K or K*N too large";
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c)) % 16 != 0)
    return "operands must be 16-byte aligned";
  if (m == 0 || n == 0) return nullptr;
  return n <= 64 ? launch<4, 2>(a, b, c, m, int(k), int(n), stream)
                 : launch<2, 4>(a, b, c, m, int(k), int(n), stream);
}

}  // namespace md_accel
