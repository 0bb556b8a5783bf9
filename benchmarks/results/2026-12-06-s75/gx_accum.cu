// Session 75: what the per-sender grad_x sums could cost other than as rows. A stand-alone microbenchmark (nvcc -O3
// -arch=sm_90 -std=c++17 gx_accum.cu -o gx_accum; ./gx_accum), not part of md_accel. Run on the H100: call 3 (none,
// rows, f64at, fx3), call 4 (+ fx1); fx2c and fx3c were written after call 4 and have not run on a GPU.
// On mace_mp0_medium's graph shape (random symmetric, 4,000 nodes, 312,000 edges sorted by receiver, each edge's
// sender random) each edge contributes a row of C = 512 float64 values to its sender's grad_x, and the timed variants
// sum them:
//   rows   each edge's row written (E x C, as md_accel's per-edge kernels do), then summed per sender in a fixed
//          order through the sender CSR (md_accel's gx_sum_kernel): deterministic;
//   f64at  atomicAdd of each value into N x C float64 (cuEquivariance's way): not deterministic;
//   fx3    the value as a 128-bit fixed-point number (64 fractional bits) in three signed 42-bit limbs, each added by
//          red.add.s64 into N x C x 3 int64 accumulators (integer sums: the same bits in any order), then one pass
//          that carries the limbs and rounds each sum to float64: deterministic (here the values stay under 2^20, so
//          the top limb is never added: two reds per value);
//   fx1    one red.add.s64 per value at a scale known beforehand (2^-44 resolution, enough for these values' bound,
//          not for float64 in general): what a deterministic integer sum costs at best;
//   fx2c, fx3c  two / three 42-bit limbs below 2^41 (resolution 2^-64 / 2^-106) split by floors and exact
//          subtractions, each value's limbs adjacent: deterministic at a fixed scale.
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

__global__ void k_none(int E, const int* src, double* sink) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  double s = 0;
  for (int k = 0; k < PER_LANE; ++k) s += contribution(e, lane + 32 * k);
  if (s == 12345.678) sink[src[e]] = s;  // never true: keeps the arithmetic
}

__global__ void k_rows(int E, double* rows) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  for (int k = 0; k < PER_LANE; ++k) __stcs(&rows[size_t(e) * C + lane + 32 * k], contribution(e, lane + 32 * k));
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

__global__ void k_f64_atomic(int E, const int* src, double* gx) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  double* g = gx + size_t(src[e]) * C;
  for (int k = 0; k < PER_LANE; ++k) atomicAdd(&g[lane + 32 * k], contribution(e, lane + 32 * k));
}

__device__ inline void red_s64(long long* p, long long v) {
  asm volatile("red.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// limb-major accumulators: limb j of (n, c) at acc[(j * N + n) * C + c], so that a warp's 32 reds of one limb are
// one contiguous 256-byte line
__global__ void k_fixed3(int E, int N, const int* src, long long* acc) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  const size_t row = size_t(src[e]) * C, plane = size_t(N) * C;
  for (int k = 0; k < PER_LANE; ++k) {
    long long l[3];
    to_limbs(contribution(e, lane + 32 * k), l);
    const size_t i = row + lane + 32 * k;
    if (l[0]) red_s64(&acc[i], l[0]);
    if (l[1]) red_s64(&acc[plane + i], l[1]);
    if (l[2]) red_s64(&acc[2 * plane + i], l[2]);
  }
}

// fx1: one limb, a scale known beforehand (2^FRAC1: here from the contributions' known bound, |sum| < 2^18)
constexpr int FRAC1 = 44;
__global__ void k_fixed1(int E, const int* src, long long* acc) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  long long* a = acc + size_t(src[e]) * C;
  for (int k = 0; k < PER_LANE; ++k)
    red_s64(&a[lane + 32 * k], __double2ll_rn(ldexp(contribution(e, lane + 32 * k), FRAC1)));
}

__global__ void k_fixed1_final(int N, const long long* acc, double* gx) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < size_t(N) * C) gx[i] = ldexp((double)acc[i], -FRAC1);
}

// fxLc: L limbs of 42 bits below 2^41 (L = 2: resolution 2^-64; L = 3: 2^-106), split by floors and exact
// subtractions (no frexp, no 128-bit shifts), the limbs of one value adjacent (acc[i * L + j])
template <int L>
__global__ void k_fixed_cheap(int E, const int* src, long long* acc) {
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  if (e >= E) return;
  long long* a = acc + size_t(src[e]) * C * L;
  for (int k = 0; k < PER_LANE; ++k) {
    const double v = contribution(e, lane + 32 * k);
    const double top = floor(v * 0x1.0p22);                   // |v| < 2^41
    const double r1 = fma(-top, 0x1.0p-22, v);                // exact, in [0, 2^-22)
    long long* p = a + size_t(lane + 32 * k) * L;
    red_s64(p, (long long)top);
    if (L == 2) {
      red_s64(p + 1, __double2ll_rn(r1 * 0x1.0p64));
    } else {
      const double mid = floor(r1 * 0x1.0p64);
      red_s64(p + 1, (long long)mid);
      red_s64(p + 2, __double2ll_rn(fma(-mid, 0x1.0p-64, r1) * 0x1.0p106));
    }
  }
}

template <int L>
__global__ void k_fixed_cheap_final(int N, const long long* acc, double* gx) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(N) * C) return;
  const long long* p = acc + i * L;
  long long t = p[0], m = p[1], c;
  double low = 0;
  if (L == 3) {
    long long l = p[2];
    c = l >> LIMB; l -= c << LIMB; m += c;
    low = double(l) * 0x1.0p-106;
  }
  c = m >> LIMB; m -= c << LIMB; t += c;
  gx[i] = double(t) * 0x1.0p-22 + (double(m) * 0x1.0p-64 + low);
}

__global__ void k_fixed3_final(int N, const long long* acc, double* gx) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x, plane = size_t(N) * C;
  if (i >= plane) return;
  gx[i] = from_limbs(acc[i], acc[plane + i], acc[2 * plane + i]);
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
    return got;
  };

  timed("none (the contributions alone)", [&] { k_none<<<eblocks, threads>>>(E, d_src, d_sink); });
  timed("rows: write E x C", [&] { k_rows<<<eblocks, threads>>>(E, d_rows); });
  timed("rows: per-sender sum", [&] { k_row_sum<<<nblocks, threads>>>(N, d_ptr, d_perm, d_rows, d_gx); });
  timed("rows: both", [&] {
    k_rows<<<eblocks, threads>>>(E, d_rows);
    k_row_sum<<<nblocks, threads>>>(N, d_ptr, d_perm, d_rows, d_gx);
  });
  const std::vector<double> rows_out = check("rows");
  timed("f64at: zero + atomicAdd", [&] {
    CHECK(cudaMemsetAsync(d_gx, 0, size_t(N) * C * sizeof(double)));
    k_f64_atomic<<<eblocks, threads>>>(E, d_src, d_gx);
  });
  check("f64at");
  timed("fx3: zero + 3-limb red + final", [&] {
    CHECK(cudaMemsetAsync(d_acc, 0, 3 * size_t(N) * C * sizeof(long long)));
    k_fixed3<<<eblocks, threads>>>(E, N, d_src, d_acc);
    k_fixed3_final<<<fblocks, threads>>>(N, d_acc, d_gx);
  });
  const std::vector<double> fx_a = check("fx3");
  timed("fx1: zero + 1-limb red + final", [&] {
    CHECK(cudaMemsetAsync(d_acc, 0, size_t(N) * C * sizeof(long long)));
    k_fixed1<<<eblocks, threads>>>(E, d_src, d_acc);
    k_fixed1_final<<<fblocks, threads>>>(N, d_acc, d_gx);
  });
  check("fx1 (resolution 2^-44)");
  timed("fx2c: zero + 2 reds + final", [&] {
    CHECK(cudaMemsetAsync(d_acc, 0, 2 * size_t(N) * C * sizeof(long long)));
    k_fixed_cheap<2><<<eblocks, threads>>>(E, d_src, d_acc);
    k_fixed_cheap_final<2><<<fblocks, threads>>>(N, d_acc, d_gx);
  });
  check("fx2c (resolution 2^-64)");
  timed("fx3c: zero + 3 reds + final", [&] {
    CHECK(cudaMemsetAsync(d_acc, 0, 3 * size_t(N) * C * sizeof(long long)));
    k_fixed_cheap<3><<<eblocks, threads>>>(E, d_src, d_acc);
    k_fixed_cheap_final<3><<<fblocks, threads>>>(N, d_acc, d_gx);
  });
  check("fx3c (resolution 2^-106)");
  CHECK(cudaMemset(d_acc, 0, 3 * size_t(N) * C * sizeof(long long)));
  k_fixed3<<<eblocks, threads>>>(E, N, d_src, d_acc);
  k_fixed3_final<<<fblocks, threads>>>(N, d_acc, d_gx);
  std::vector<double> fx_b(size_t(N) * C);
  CHECK(cudaMemcpy(fx_b.data(), d_gx, fx_b.size() * sizeof(double), cudaMemcpyDeviceToHost));
  std::printf("fx3 bit-identical over two runs: %s\n",
              std::equal(fx_a.begin(), fx_a.end(), fx_b.begin(),
                         [](double a, double b) { return std::memcmp(&a, &b, 8) == 0; }) ? "yes" : "NO");
  return 0;
}
