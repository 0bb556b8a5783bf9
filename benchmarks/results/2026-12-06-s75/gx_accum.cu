// Session 75: what the per-sender grad_x sums could cost other than as rows. A stand-alone microbenchmark (nvcc -O3
// -arch=sm_90 -std=c++17 gx_accum.cu -o gx_accum; ./gx_accum), not part of md_accel. Run on the H100: call 3 (none,
// rows, f64at, fx3), call 4 (+ fx1); fx2c, fx3c, fx1x3 and the streamed runs were written after call 4, not yet run.
// On mace_mp0_medium's graph shape (random symmetric, 4,000 nodes, 312,000 edges sorted by receiver, each edge's
// sender random) each edge contributes a row of C = 512 float64 values to its sender's grad_x, and the timed variants
// sum them:
//   rows   each edge's row written (E x C, as md_accel's per-edge kernels do), then summed per sender in a fixed
//          order through the sender CSR (md_accel's gx_sum_kernel): deterministic;
//   f64at  atomicAdd of each value into N x C float64 (cuEquivariance's way): not deterministic;
//   fx3    the value as a 128-bit fixed-point number (64 fractional bits) in three signed 42-bit limbs, each added
//          by red.global.add.u64 into N x C x 3 int64 accumulators (integer sums: the same bits in any order), then
//          one pass that carries the limbs and rounds each sum to float64: deterministic (here the values stay
//          under 2^20, so the top limb is never added: two reds per value);
//   fx1    one red.global.add.u64 per value at a scale known beforehand (2^-44 resolution, enough for these values'
//          bound, not for float64 in general): what a deterministic integer sum costs at best;
//   fx2c, fx3c  two / three 42-bit limbs below 2^41 (resolution 2^-64 / 2^-106) split by truncations and exact
//          subtractions, each value's limbs adjacent: deterministic at a fixed scale;
//   fx1x3  fx1's int64 reduced three times, into three 16 MB planes: the reductions' cost at fx3c's footprint
//          without its conversion.
// "+ stream": each edge's warp also reads a weight row of 1,280 float64 and writes one (3.2 GB each way over the
// graph, as md_accel's backward part 1 does), so that the accumulators compete for L2 with streaming traffic.
// The contributions are a function of (edge, column) computed in registers, so every variant does the same
// arithmetic before its sum; a kernel doing only that arithmetic (none) is the baseline. Each variant's sums are
// compared with a float64 sum on the host in sender order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t err_ = (x);                                                             \
    if (err_ != cudaSuccess) {                                                          \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(err_), __FILE__, __LINE__); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr int C = 512;                  // grad_x row width (128x0e + 128x1o)
constexpr int PER_LANE = C / 32;        // a warp per edge, 16 values per lane
constexpr int LIMB = 42;                // bits per fixed-point limb: 2^21 adds of |limb| < 2^42 fit an int64
constexpr int FRAC = 64;                // fractional bits of the fixed-point value

// The contribution of edge e to column c: a cheap hash of (e, c) mapped to a float64 spread over ~12 decades.
__host__ __device__ inline double contribution(int e, int c) {
  uint64_t h = (uint64_t(e) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(c) * 0xC2B2AE3D27D4EB4Full);
  h ^= h >> 29; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 32;
  const double u = double(h >> 11) * 0x1.0p-53;               // [0, 1)
  const double mag = exp2(double(int(h & 31)) - 20.0);   // 2^-20 .. 2^11
  return (u - 0.5) * mag;
}

// v as round(v * 2^FRAC) (half away from zero; |v| < 2^62) in three limbs l0 + l1 2^42 + l2 2^84, each limb in
// (-2^42, 2^42): the sum of up to 2^21 of them fits an int64 accumulator.
__host__ __device__ inline void to_limbs(double v, long long* l) {
  int ex;
  const double m = frexp(fabs(v), &ex);                       // |v| = m 2^ex, m in [0.5, 1) (0 for v = 0)
  const long long mant = (long long)ldexp(m, 53);             // exact: a 53-bit integer
  const int shift = ex - 53 + FRAC;                           // |v| 2^FRAC = mant 2^shift
  __int128 a = 0;
  if (shift >= 0) a = (__int128)mant << shift;
  else if (shift > -54) a = (mant >> -shift) + ((mant >> (-shift - 1)) & 1);
  const __int128 mask = (((__int128)1) << LIMB) - 1;
  long long l0 = (long long)(a & mask), l1 = (long long)((a >> LIMB) & mask), l2 = (long long)(a >> (2 * LIMB));
  if (v < 0) { l0 = -l0; l1 = -l1; l2 = -l2; }
  l[0] = l0; l[1] = l1; l[2] = l2;
}

// The limbs' sum as float64: exact in 128 bits, then rounded once (|sum| < 2^63).
__host__ __device__ inline double from_limbs(long long a0, long long a1, long long a2) {
  const __int128 s = ((__int128)a2 << (2 * LIMB)) + ((__int128)a1 << LIMB) + (__int128)a0;
  return ldexp((double)s, -FRAC);
}

__device__ inline void red_s64(long long* p, long long v) {
  asm volatile("red.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

enum Mode { NONE, ROWS, F64AT, FX3, FX1, FX1X3, FX2C, FX3C };
constexpr int W_COLS = 1280;  // a weight row (mace_mp0_medium: 10 paths x 128 channels)
constexpr int FRAC1 = 44;     // fx1's scale: the contributions' known bound keeps |sum| < 2^18

// One warp per edge: the edge's C values summed into its sender's row by mode M (the accumulator layouts: fx3 and
// fx1x3 limb-major planes acc[(j * N + n) * C + c], fx2c / fx3c each value's limbs adjacent acc[(n * C + c) * L + j]);
// STREAM: the edge's weight row read and a gradient row written as well.
template <int M, bool STREAM>
__global__ void k_edge(int E, int N, const int* src, double* rows, double* gx, long long* acc, const double* w,
                       double* gw, double* sink) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  if (STREAM) {
    const double* wr = w + size_t(e) * W_COLS;
    double* gr = gw + size_t(e) * W_COLS;
    for (int k = lane; k < W_COLS; k += 32) __stcs(&gr[k], 2.0 * __ldcs(&wr[k]));
  }
  const int n = src[e];
  const size_t plane = size_t(N) * C;
  double s = 0;
  for (int k = 0; k < PER_LANE; ++k) {
    const int col = lane + 32 * k;
    const double v = contribution(e, col);
    const size_t i = size_t(n) * C + col;
    if (M == NONE) s += v;
    if (M == ROWS) __stcs(&rows[size_t(e) * C + col], v);
    if (M == F64AT) atomicAdd(&gx[i], v);
    if (M == FX3) {
      long long l[3];
      to_limbs(v, l);
      if (l[0]) red_s64(&acc[i], l[0]);
      if (l[1]) red_s64(&acc[plane + i], l[1]);
      if (l[2]) red_s64(&acc[2 * plane + i], l[2]);
    }
    if (M == FX1 || M == FX1X3) {
      const long long q = __double2ll_rn(ldexp(v, FRAC1));
      red_s64(&acc[i], q);
      if (M == FX1X3) { red_s64(&acc[plane + i], q); red_s64(&acc[2 * plane + i], q); }
    }
    if (M == FX2C || M == FX3C) {
      constexpr int L = M == FX2C ? 2 : 3;
      const double top = trunc(v * 0x1.0p22);                   // |v| < 2^41
      const double r1 = fma(-top, 0x1.0p-22, v);                // v's bits below 2^-22: exact, v's sign
      long long* p = acc + i * L;
      red_s64(p, (long long)top);
      if (L == 2) {
        red_s64(p + 1, __double2ll_rn(r1 * 0x1.0p64));
      } else {
        const double mid = trunc(r1 * 0x1.0p64);
        red_s64(p + 1, (long long)mid);
        red_s64(p + 2, __double2ll_rn(fma(-mid, 0x1.0p-64, r1) * 0x1.0p106));
      }
    }
  }
  if (M == NONE && s == 12345.678) sink[n] = s;  // never true: keeps the arithmetic
}

__global__ void k_row_sum(int N, const int* src_ptr, const int* src_perm, const double* rows, double* gx) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (n >= N) return;
  double acc[PER_LANE] = {};
  for (int q = src_ptr[n]; q < src_ptr[n + 1]; ++q) {
    const double* r = rows + size_t(src_perm[q]) * C;
    for (int k = 0; k < PER_LANE; ++k) acc[k] += __ldcs(&r[lane + 32 * k]);
  }
  for (int k = 0; k < PER_LANE; ++k) gx[size_t(n) * C + lane + 32 * k] = acc[k];
}

// The sums from the accumulators, one thread per (node, column).
template <int M>
__global__ void k_final(int N, const long long* acc, double* gx) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x, plane = size_t(N) * C;
  if (i >= plane) return;
  if (M == FX3) gx[i] = from_limbs(acc[i], acc[plane + i], acc[2 * plane + i]);
  if (M == FX1 || M == FX1X3) gx[i] = ldexp((double)acc[i], -FRAC1);
  if (M == FX2C || M == FX3C) {
    // carried so that the lower limbs lie in [0, 2^42), then as sign and magnitude: no cancellation in the rounding
    constexpr int L = M == FX2C ? 2 : 3;
    constexpr long long B = 1ll << LIMB;
    const long long* p = acc + i * L;
    long long t = p[0], m = p[1], l = L == 3 ? p[2] : 0, c;
    c = l >> LIMB; l -= c << LIMB; m += c;
    c = m >> LIMB; m -= c << LIMB; t += c;
    const bool neg = t < 0;
    if (neg) {  // -(t B^2 + m B + l) = (-t - 1) B^2 + (B - 1 - m) B + (B - l), carried
      t = -t - 1; m = B - 1 - m; l = B - l;
      if (l == B) { l = 0; m += 1; }
      if (m == B) { m = 0; t += 1; }
    }
    const double r = double(t) * 0x1.0p-22 + (double(m) * 0x1.0p-64 + double(l) * 0x1.0p-106);
    gx[i] = neg ? -r : r;
  }
}

int main() {
  const int N = 4000, E = 312000;
  // a random symmetric graph: E / 2 node pairs, both directions, sorted by receiver
  std::mt19937_64 rng(7);
  std::vector<std::pair<int, int>> edges;
  while ((int)edges.size() < E) {
    const int a = int(rng() % N), b = int(rng() % N);
    if (a == b) continue;
    edges.push_back({b, a});  // (receiver, sender)
    edges.push_back({a, b});
  }
  std::sort(edges.begin(), edges.end());
  std::vector<int> src(E), src_ptr(N + 1, 0), src_perm(E);
  for (int e = 0; e < E; ++e) { src[e] = edges[e].second; ++src_ptr[src[e] + 1]; }
  std::partial_sum(src_ptr.begin(), src_ptr.end(), src_ptr.begin());
  {
    std::vector<int> fill(src_ptr.begin(), src_ptr.end() - 1);
    for (int e = 0; e < E; ++e) src_perm[fill[src[e]]++] = e;  // each sender's edges in edge order
  }
  // reference: float64 sums in sender order, and a float64 sum of |terms| (the scale of each sum's rounding)
  std::vector<double> ref(size_t(N) * C, 0.0), mag(size_t(N) * C, 0.0);
  for (int n = 0; n < N; ++n)
    for (int q = src_ptr[n]; q < src_ptr[n + 1]; ++q)
      for (int c = 0; c < C; ++c) {
        const double v = contribution(src_perm[q], c);
        ref[size_t(n) * C + c] += v;
        mag[size_t(n) * C + c] += fabs(v);
      }

  int *d_src, *d_ptr, *d_perm;
  double *d_rows, *d_gx, *d_sink;
  long long* d_acc;
  CHECK(cudaMalloc(&d_src, E * sizeof(int)));
  CHECK(cudaMalloc(&d_ptr, (N + 1) * sizeof(int)));
  CHECK(cudaMalloc(&d_perm, E * sizeof(int)));
  CHECK(cudaMalloc(&d_rows, size_t(E) * C * sizeof(double)));
  CHECK(cudaMalloc(&d_gx, size_t(N) * C * sizeof(double)));
  CHECK(cudaMalloc(&d_sink, N * sizeof(double)));
  CHECK(cudaMalloc(&d_acc, 3 * size_t(N) * C * sizeof(long long)));
  CHECK(cudaMemcpy(d_src, src.data(), E * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_ptr, src_ptr.data(), (N + 1) * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_perm, src_perm.data(), E * sizeof(int), cudaMemcpyHostToDevice));

  const int threads = 256, wpb = threads / 32;
  const int eblocks = (E + wpb - 1) / wpb, nblocks = (N + wpb - 1) / wpb;
  const int fblocks = int((size_t(N) * C + threads - 1) / threads);
  cudaEvent_t t0, t1;
  CHECK(cudaEventCreate(&t0));
  CHECK(cudaEventCreate(&t1));
  auto timed = [&](const char* name, auto&& run) {
    for (int i = 0; i < 3; ++i) run();
    CHECK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int i = 0; i < 30; ++i) {
      CHECK(cudaEventRecord(t0));
      run();
      CHECK(cudaEventRecord(t1));
      CHECK(cudaEventSynchronize(t1));
      float m;
      CHECK(cudaEventElapsedTime(&m, t0, t1));
      ms.push_back(m);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("%-34s median %.3f ms  min %.3f ms\n", name, ms[ms.size() / 2], ms[0]);
  };
  auto check = [&](const char* name) {
    std::vector<double> got(size_t(N) * C);
    CHECK(cudaMemcpy(got.data(), d_gx, got.size() * sizeof(double), cudaMemcpyDeviceToHost));
    double worst = 0, worst_mag = 0, max_ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - ref[i]));
      worst_mag = std::max(worst_mag, std::fabs(got[i] - ref[i]) / mag[i]);
      max_ref = std::max(max_ref, std::fabs(ref[i]));
    }
    std::printf("%-34s max |err| / max |ref| %.2e, max |err| / sum|terms| %.2e\n", name, worst / max_ref, worst_mag);
  };

  double *d_w, *d_gw;
  CHECK(cudaMalloc(&d_w, size_t(E) * W_COLS * sizeof(double)));
  CHECK(cudaMalloc(&d_gw, size_t(E) * W_COLS * sizeof(double)));
  CHECK(cudaMemset(d_w, 0, size_t(E) * W_COLS * sizeof(double)));
  const size_t acc_bytes = 3 * size_t(N) * C * sizeof(long long);

  // one variant: its accumulator zeroed (where it has one), the per-edge kernel, then the per-sender sum or final pass
  auto variant = [&](auto mode, auto stream) {
    constexpr int M = decltype(mode)::value;
    constexpr bool S = decltype(stream)::value;
    return [&, M, S] {
      if (M == F64AT) CHECK(cudaMemsetAsync(d_gx, 0, size_t(N) * C * sizeof(double)));
      if (M >= FX3) CHECK(cudaMemsetAsync(d_acc, 0, acc_bytes));
      k_edge<M, S><<<eblocks, threads>>>(E, N, d_src, d_rows, d_gx, d_acc, d_w, d_gw, d_sink);
      if (M == ROWS) k_row_sum<<<nblocks, threads>>>(N, d_ptr, d_perm, d_rows, d_gx);
      if (M >= FX3) k_final<M><<<fblocks, threads>>>(N, d_acc, d_gx);
    };
  };
  using std::integral_constant;
  const char* names[] = {"none (the values alone)", "rows: written, then summed per sender", "f64at: atomicAdd",
                         "fx3: frexp limbs in planes", "fx1: one limb (2^-44)", "fx1x3: one limb, three planes",
                         "fx2c: two limbs (2^-64)", "fx3c: three limbs (2^-106)"};
  auto both = [&](auto mode) {
    constexpr int M = decltype(mode)::value;
    timed(names[M], variant(mode, integral_constant<bool, false>{}));
    if (M != NONE) check(names[M]);
    timed((std::string(names[M]) + " + stream").c_str(), variant(mode, integral_constant<bool, true>{}));
  };
  both(integral_constant<int, NONE>{});
  timed("rows: written only", [&] {
    k_edge<ROWS, false><<<eblocks, threads>>>(E, N, d_src, d_rows, d_gx, d_acc, d_w, d_gw, d_sink);
  });
  timed("rows: summed only", [&] { k_row_sum<<<nblocks, threads>>>(N, d_ptr, d_perm, d_rows, d_gx); });
  both(integral_constant<int, ROWS>{});
  both(integral_constant<int, F64AT>{});
  both(integral_constant<int, FX3>{});
  both(integral_constant<int, FX1>{});
  both(integral_constant<int, FX1X3>{});
  both(integral_constant<int, FX2C>{});
  both(integral_constant<int, FX3C>{});
  // determinism: fx3c twice, bit for bit
  std::vector<double> first(size_t(N) * C), second(size_t(N) * C);
  auto fx3c = variant(integral_constant<int, FX3C>{}, integral_constant<bool, false>{});
  fx3c();
  CHECK(cudaMemcpy(first.data(), d_gx, first.size() * sizeof(double), cudaMemcpyDeviceToHost));
  fx3c();
  CHECK(cudaMemcpy(second.data(), d_gx, second.size() * sizeof(double), cudaMemcpyDeviceToHost));
  std::printf("fx3c bit-identical over two runs: %s\n",
              std::memcmp(first.data(), second.data(), first.size() * sizeof(double)) == 0 ? "yes" : "NO");
  return 0;
}
