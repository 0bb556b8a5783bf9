// CUDA kernels of md_accel::species_linear_* (interface: species_linear.h).
//
// Nodes are visited in species-sorted order (the caller's stable argsort). Two small schedule
// kernels turn the sorted species into segment offsets seg_ptr[s] and an exclusive prefix of
// the number of blocks each (group, species) pair needs, so the main kernels map blockIdx to
// (group, species, tile) by binary search; the grid is an upper bound computed on the host
// (ceil(N / tile) + S tiles per group), surplus blocks exit at once. No host synchronisation.
//
// gemm_kernel (forward and gradient with respect to x): block = (output block, species, tile of
// whole nodes, column tile); the tile's rows are (node, component i), so per output block it
// is a small GEMM [nodes*d, K] x [K, cols] with the species' weights (times the path weight)
// staged in shared memory, K concatenated over the instructions feeding the block. Register
// tiling TM x TN per thread, double-buffered shared memory, one barrier per K step.
//
// wgrad_kernel: gW[s] = sum over the species' nodes of x^T g per instruction, split into node
// chunks of fixed size (fixed by N), each chunk's partial written to scratch, then summed in
// chunk order by wgrad_reduce_kernel: deterministic, no atomics.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "mma.cuh"
#include "species_linear.h"
#include "vec16.cuh"

namespace md_accel {
namespace {

constexpr int kThreads = 256;       // gemm / wgrad blocks
constexpr int kSchedThreads = 1024;  // the schedule kernel's single block
constexpr int kWK = 16;             // K rows (node, i) per step of wgrad_kernel
constexpr int kMaxSchedGroups = 64;
constexpr int kMaxGroupsPerLaunch = 16;
constexpr int kMaxTermsPerLaunch = 32;
constexpr int kMaxWInstrPerLaunch = 32;

template <typename I>
__host__ __device__ __forceinline__ I imin(I a, I b) { return a < b ? a : b; }
template <typename I>
__host__ __device__ __forceinline__ I imax(I a, I b) { return a < b ? b : a; }

// ---------------------------------------------------------------------------------------------
// Schedule, two small kernels. segment_kernel (grid over N): seg_ptr[s] = first sorted position
// with species >= s (s = 0..S; with a sorted order every entry is written exactly once) and
// rows of nodes whose species is outside [0, S) set to NaN. prefix_kernel (one block):
// task_ptr[g*S + s] = exclusive prefix over (g, s) of ceil(count_s / nodes_per_tile[g]) * mult[g]
// (G*S + 1 entries). Readers clamp the segments to [0, N] (segment()), so an order that does
// not sort species gives meaningless results but no out-of-bounds access.
struct SchedParams {
  int num_groups;
  int nodes_per_tile[kMaxSchedGroups];
  int mult[kMaxSchedGroups];
};

// The node at species-sorted position q, and a node's species: without species and order (a plain
// Linear) every node is species 0, in its own order.
__device__ __forceinline__ int64_t node_at(const SLProblem& p, int64_t q) { return p.order ? p.order[q] : q; }
__device__ __forceinline__ int64_t species_of(const SLProblem& p, int64_t node) {
  return p.species ? p.species[node] : 0;
}

__device__ __forceinline__ void segment(const int64_t* seg_ptr, int64_t s, int64_t n, int64_t& lo, int64_t& hi) {
  lo = imin<int64_t>(imax<int64_t>(seg_ptr[s], 0), n);
  hi = imin<int64_t>(imax<int64_t>(seg_ptr[s + 1], lo), n);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    segment_kernel(SLProblem p, int64_t* seg_ptr, T* nan_rows, int64_t nan_ld, int nan_cols) {
  const int64_t q = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t N = p.num_nodes, S = p.num_species;
  if (q >= N) return;
  const int64_t node = node_at(p, q);
  const int64_t b = species_of(p, node);
  const int64_t a = q == 0 ? -1 : species_of(p, node_at(p, q - 1));
  for (int64_t s = imax<int64_t>(a + 1, 0); s <= imin<int64_t>(b, S); ++s) seg_ptr[s] = q;
  if (q == N - 1)
    for (int64_t s = imax<int64_t>(b + 1, 0); s <= S; ++s) seg_ptr[s] = N;
  if ((b < 0 || b >= S) && nan_rows != nullptr)
    for (int c = 0; c < nan_cols; ++c) nan_rows[node * nan_ld + c] = T(NAN);
}

__global__ void __launch_bounds__(kSchedThreads)
    prefix_kernel(SLProblem p, SchedParams sp, const int64_t* seg_ptr, int* task_ptr) {
  __shared__ int s_scan[kSchedThreads];
  const int tid = threadIdx.x;
  const int64_t S = p.num_species;
  const int64_t M = int64_t(sp.num_groups) * S;
  int carry = 0;
  for (int64_t base = 0; base < M; base += kSchedThreads) {
    const int64_t idx = base + tid;
    int v = 0;
    if (idx < M) {
      const int g = int(idx / S);
      int64_t lo, hi;
      segment(seg_ptr, idx % S, p.num_nodes, lo, hi);
      const int npt = sp.nodes_per_tile[g];
      v = int((hi - lo + npt - 1) / npt) * sp.mult[g];
    }
    s_scan[tid] = v;
    __syncthreads();
    for (int off = 1; off < kSchedThreads; off <<= 1) {
      const int add = tid >= off ? s_scan[tid - off] : 0;
      __syncthreads();
      s_scan[tid] += add;
      __syncthreads();
    }
    if (idx < M) task_ptr[idx] = carry + s_scan[tid] - v;
    carry += s_scan[kSchedThreads - 1];
    __syncthreads();
  }
  if (tid == 0) task_ptr[M] = carry;
}

// The (group, species) entry e in [lo, hi) of block task t: task_ptr[e] <= t < task_ptr[e + 1].
__device__ __forceinline__ int64_t find_entry(const int* task_ptr, int64_t lo, int64_t hi, int t) {
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (task_ptr[mid] <= t)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// ---------------------------------------------------------------------------------------------
// Forward (TRANS = false) and gradient with respect to x (TRANS = true).
struct GemmParams {
  int num_groups;
  int group_base;  // index of groups[0] in the schedule
  SLGroup groups[kMaxGroupsPerLaunch];  // first_term indexes terms[] below
  SLTerm terms[kMaxTermsPerLaunch];
};

// MMA (float64 only): the tile's products on the tensor cores (DMMA, mma.m8n8k4: IEEE float64
// products and sums, mma.cuh), each warp a WM x WN part of the BM x BN tile; else CUDA-core FMAs,
// each thread a TM x TN part. One DMMA does the work of 8 warp-wide FMA instructions: the FMA form
// of the float64 tiles issued at ~30 % of the FMA peak (session 23, benchmarks/linear.py).
template <typename T, int BM, int BN, int TM, int TN, bool TRANS, bool MMA, int KB>
__global__ void __launch_bounds__(kThreads, 2)
    gemm_kernel(SLProblem p, GemmParams gp, const T* __restrict__ src, int64_t ld_src, const T* __restrict__ weight,
                T* __restrict__ dst, int64_t ld_dst, const int64_t* __restrict__ seg_ptr,
                const int* __restrict__ task_ptr) {
  constexpr int LANES = 16 / sizeof(T);
  constexpr int TX = BN / TN;
  constexpr int NG = TN / LANES;  // column groups of LANES contiguous columns per thread
  constexpr int GS = BN / NG;     // stride between a thread's column groups
  // padded shared-memory rows, 16-byte aligned; for the DMMA fragments (lane (g, t) reads row t,
  // column g) a row stride of 4 mod 16 doubles puts a half-warp's 16 loads in distinct banks
  constexpr int PAD = MMA ? 4 : LANES;
  constexpr int AS = BM + PAD;
  constexpr int BS = BN + PAD;
  constexpr int WN = BN >= 64 ? 32 : 16;  // MMA warp tile WM x WN
  constexpr int WARPS_N = BN / WN, WARPS_M = (kThreads / 32) / WARPS_N, WM = BM / WARPS_M;
  constexpr int MT = WM / 8, NT = WN / 8;  // m8n8 tiles per warp
  constexpr int A_SLOTS = BM * KB / kThreads;
  constexpr int B_SLOTS = BN * KB / kThreads;
  static_assert(!MMA || (sizeof(T) == 8 && WARPS_M * WARPS_N * 32 == kThreads && WM % 8 == 0 && KB % 4 == 0),
                "mma tile");
  static_assert(TX * (BM / TM) == kThreads, "thread tile");
  static_assert(TM % LANES == 0 && TN % LANES == 0 && GS == TX * LANES, "vector loads");
  static_assert(A_SLOTS * kThreads == BM * KB && B_SLOTS * kThreads == BN * KB, "load slots");
  static_assert(KB <= 16 && KB * kSLMaxDim < 256 && (KB - 1) * AS + BM < 0xFFF, "load slot packing");
  __shared__ __align__(16) T As[2][KB][AS];
  __shared__ __align__(16) T Bs[2][KB][BS];
  __shared__ int64_t s_node[BM];

  const int tid = threadIdx.x;
  const int64_t S = p.num_species;
  const int64_t e_lo = int64_t(gp.group_base) * S, e_hi = int64_t(gp.group_base + gp.num_groups) * S;
  const int t = task_ptr[e_lo] + int(blockIdx.x);
  if (t >= task_ptr[e_hi]) return;
  const int64_t e = find_entry(task_ptr, e_lo, e_hi, t);
  const SLGroup grp = gp.groups[int(e / S) - gp.group_base];
  const int64_t s = e % S;
  const int D = grp.d;
  const int tnodes = BM / D;
  const int ctiles = (grp.ncols + BN - 1) / BN;
  const int local = t - task_ptr[e];
  const int c0 = (local % ctiles) * BN;
  int64_t seg_lo, seg_hi;
  segment(seg_ptr, s, p.num_nodes, seg_lo, seg_hi);
  const int64_t p0 = seg_lo + int64_t(local / ctiles) * tnodes;
  const int nodes = int(imin<int64_t>(tnodes, seg_hi - p0));
  if (tid < nodes) s_node[tid] = node_at(p, p0 + tid);
  __syncthreads();

  // Per-thread load slots, fixed for the whole K loop (only the K offset moves). A slot j holds
  // element (kk, r) of node nl's strip, packed: kk | r << 4 | nl << 12 | shared index << 20
  // (0xFFF: outside the tile's rows, not stored).
  unsigned a_pk[A_SLOTS];
#pragma unroll
  for (int j = 0; j < A_SLOTS; ++j) {
    const int q = tid + j * kThreads;
    const int nl = q / (KB * D), r = q % (KB * D), kk = r / D;
    const int sm = nl < tnodes ? kk * AS + nl * D + r % D : 0xFFF;
    a_pk[j] = unsigned(kk) | unsigned(r) << 4 | unsigned(imin(nl, 255)) << 12 | unsigned(sm) << 20;
  }
  const T* w_s = weight + s * p.weight_numel;

  T ra[A_SLOTS], rb[B_SLOTS];
  auto load = [&](int term, int u0) {
    const SLTerm tm = gp.terms[grp.first_term + term];
    const int64_t off = tm.src_off + int64_t(u0) * D;
#pragma unroll
    for (int j = 0; j < A_SLOTS; ++j) {
      const int kk = a_pk[j] & 0xF, r = (a_pk[j] >> 4) & 0xFF, nl = (a_pk[j] >> 12) & 0xFF;
      ra[j] = (nl < nodes && u0 + kk < tm.k) ? src[s_node[nl] * ld_src + off + r] : T(0);
    }
    const T pw = T(tm.pw);
#pragma unroll
    for (int j = 0; j < B_SLOTS; ++j) {
      const int q = tid + j * kThreads;  // coalesced along the weight's contiguous index
      const int k = u0 + (TRANS ? q % KB : q / BN), c = c0 + (TRANS ? q / KB : q % BN);
      const int64_t w_idx = TRANS ? int64_t(c) * tm.w_ld + k : int64_t(k) * tm.w_ld + c;
      rb[j] = (k < tm.k && c < grp.ncols) ? pw * w_s[tm.w_off + w_idx] : T(0);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int j = 0; j < A_SLOTS; ++j) {
      const int sm = int(a_pk[j] >> 20);
      if (sm != 0xFFF) (&As[buf][0][0])[sm] = ra[j];
    }
#pragma unroll
    for (int j = 0; j < B_SLOTS; ++j) {
      const int q = tid + j * kThreads;
      Bs[buf][TRANS ? q % KB : q / BN][TRANS ? q / KB : q % BN] = rb[j];
    }
  };

  int nchunks = 0;
  for (int q = 0; q < grp.num_terms; ++q) nchunks += (gp.terms[grp.first_term + q].k + KB - 1) / KB;

  const int tx = tid % TX, ty = tid / TX;
  // MMA: lane (g, t) of warp (wm, wn) holds acc[mt][nt][v] = C(row wm*WM + mt*8 + g, col wn*WN + nt*8 + 2t + v)
  const int lane = tid % 32, g8 = lane >> 2, t4 = lane & 3;
  const int wm0 = (tid / 32) / WARPS_N * WM, wn0 = (tid / 32) % WARPS_N * WN;
  constexpr int AM = MMA ? MT : TM, AN = MMA ? NT * 2 : TN;
  T acc[AM][AN];
#pragma unroll
  for (int m = 0; m < AM; ++m)
#pragma unroll
    for (int n = 0; n < AN; ++n) acc[m][n] = T(0);

  int term = 0, u0 = 0;
  load(term, u0);
  store(0);
  __syncthreads();
  for (int ch = 0; ch < nchunks; ++ch) {
    const int buf = ch & 1;
    const bool more = ch + 1 < nchunks;
    if (more) {
      u0 += KB;
      if (u0 >= gp.terms[grp.first_term + term].k) {
        ++term;
        u0 = 0;
      }
      load(term, u0);
    }
    if constexpr (MMA) {
#pragma unroll
      for (int k4 = 0; k4 < KB; k4 += 4) {
        T a[MT], b[NT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) a[mt] = As[buf][k4 + t4][wm0 + mt * 8 + g8];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) b[nt] = Bs[buf][k4 + t4][wn0 + nt * 8 + g8];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            double(&c)[2] = *reinterpret_cast<double(*)[2]>(&acc[mt][2 * nt]);
            mma_f64(c, a[mt], b[nt]);
          }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        T a[TM], b[TN];
#pragma unroll
        for (int v = 0; v < TM / LANES; ++v) ld16(a + v * LANES, &As[buf][kk][ty * TM + v * LANES]);
#pragma unroll
        for (int g = 0; g < NG; ++g) ld16(b + g * LANES, &Bs[buf][kk][g * GS + tx * LANES]);
#pragma unroll
        for (int m = 0; m < TM; ++m)
#pragma unroll
          for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
      }
    }
    if (more) store(buf ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int m = 0; m < AM; ++m) {
    const int r = MMA ? wm0 + m * 8 + g8 : ty * TM + m;
    const int nl = r / D;
    if (nl >= nodes) continue;
    T* row = dst + s_node[nl] * ld_dst + grp.dst_off + r % D;
#pragma unroll
    for (int n = 0; n < AN; ++n) {
      const int c = c0 + (MMA ? wn0 + (n >> 1) * 8 + 2 * t4 + (n & 1) : (n / LANES) * GS + tx * LANES + n % LANES);
      if (c < grp.ncols) row[int64_t(c) * D] = acc[m][n];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Weight gradient. Schedule group 0 counts chunks (its task_ptr row is the chunk offset of each
// species); group 1 + k is instruction k: ceil(count / chunk) chunks x (row tiles x col tiles).
struct WgradParams {
  int num_instr;
  int group_base;  // schedule index of instr[0]
  int chunk_nodes;
  SLWInstr instr[kMaxWInstrPerLaunch];
};

template <typename T>
__global__ void __launch_bounds__(kThreads)
    wgrad_kernel(SLProblem p, WgradParams wp, const T* __restrict__ x, int64_t ld_x, const T* __restrict__ g,
                 int64_t ld_g, T* __restrict__ partial, const int64_t* __restrict__ seg_ptr,
                 const int* __restrict__ task_ptr) {
  constexpr int BM = 64, BN = 64, TM = 4, TN = 4;
  constexpr int LANES = 16 / sizeof(T);
  constexpr int AS = BM + LANES, BS = BN + LANES;
  constexpr int SLOTS = kWK * BM / kThreads;
  static_assert((BM / TM) * (BN / TN) == kThreads && BM == BN, "thread tile");
  __shared__ __align__(16) T As[2][kWK][AS];
  __shared__ __align__(16) T Bs[2][kWK][BS];

  const int tid = threadIdx.x;
  const int64_t S = p.num_species;
  const int64_t e_lo = int64_t(wp.group_base) * S, e_hi = int64_t(wp.group_base + wp.num_instr) * S;
  const int t = task_ptr[e_lo] + int(blockIdx.x);
  if (t >= task_ptr[e_hi]) return;
  const int64_t e = find_entry(task_ptr, e_lo, e_hi, t);
  const SLWInstr in = wp.instr[int(e / S) - wp.group_base];
  const int64_t s = e % S;
  const int D = in.d;
  const int rtiles = (in.mul_in + BM - 1) / BM, ctiles = (in.mul_out + BN - 1) / BN;
  const int local = t - task_ptr[e];
  const int chunk = local / (rtiles * ctiles), tile = local % (rtiles * ctiles);
  const int u0 = (tile / ctiles) * BM, w0 = (tile % ctiles) * BN;
  int64_t seg_lo, seg_hi;
  segment(seg_ptr, s, p.num_nodes, seg_lo, seg_hi);
  const int64_t p0 = seg_lo + int64_t(chunk) * wp.chunk_nodes;
  const int nodes = int(imin<int64_t>(wp.chunk_nodes, seg_hi - p0));
  const int nb = imax(1, kWK / D);  // nodes per K step: rows (node, i) = nb * D <= kWK
  const int rows = nb * D;

  // slot q of a step: node nl of the step, element r = (u - u0) * D + i of the node's strip
  int sl_nl[SLOTS], sl_r[SLOTS], sl_sm[SLOTS];
  bool sl_a[SLOTS], sl_b[SLOTS];
#pragma unroll
  for (int j = 0; j < SLOTS; ++j) {
    const int q = tid + j * kThreads;
    const int nl = q / (BM * D), r = q % (BM * D);
    const int col = r / D, i = r % D;
    sl_nl[j] = nl < nb ? nl : -1;
    sl_r[j] = r;
    sl_sm[j] = (nl * D + i) * AS + col;  // AS == BS
    sl_a[j] = u0 + col < in.mul_in;
    sl_b[j] = w0 + col < in.mul_out;
  }
  T ra[SLOTS], rb[SLOTS];
  auto load = [&](int step) {
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
      const int nl = step * nb + sl_nl[j];
      const bool ok = sl_nl[j] >= 0 && nl < nodes;
      const int64_t node = ok ? node_at(p, p0 + nl) : 0;
      ra[j] = ok && sl_a[j] ? x[node * ld_x + in.x_off + int64_t(u0) * D + sl_r[j]] : T(0);
      rb[j] = ok && sl_b[j] ? g[node * ld_g + in.g_off + int64_t(w0) * D + sl_r[j]] : T(0);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int j = 0; j < SLOTS; ++j)
      if (sl_nl[j] >= 0) {
        (&As[buf][0][0])[sl_sm[j]] = ra[j];
        (&Bs[buf][0][0])[sl_sm[j]] = rb[j];
      }
  };

  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  T acc[TM][TN];
#pragma unroll
  for (int m = 0; m < TM; ++m)
#pragma unroll
    for (int n = 0; n < TN; ++n) acc[m][n] = T(0);

  const int nsteps = (nodes + nb - 1) / nb;
  if (nsteps > 0) {
    load(0);
    store(0);
  }
  __syncthreads();
  for (int st = 0; st < nsteps; ++st) {
    const int buf = st & 1;
    const bool more = st + 1 < nsteps;
    if (more) load(st + 1);
    for (int kr = 0; kr < rows; ++kr) {
      T a[TM], b[TN];
#pragma unroll
      for (int v = 0; v < TM / LANES; ++v) ld16(a + v * LANES, &As[buf][kr][ty * TM + v * LANES]);
#pragma unroll
      for (int v = 0; v < TN / LANES; ++v) ld16(b + v * LANES, &Bs[buf][kr][tx * TN + v * LANES]);
#pragma unroll
      for (int m = 0; m < TM; ++m)
#pragma unroll
        for (int n = 0; n < TN; ++n) acc[m][n] += a[m] * b[n];
    }
    if (more) store(buf ^ 1);
    __syncthreads();
  }

  const int64_t slot = task_ptr[s] + chunk;  // schedule group 0: chunk offsets per species
  T* out = partial + slot * p.weight_numel + in.w_off;
  const T pw = T(in.pw);
#pragma unroll
  for (int m = 0; m < TM; ++m) {
    const int u = u0 + ty * TM + m;
    if (u >= in.mul_in) continue;
#pragma unroll
    for (int n = 0; n < TN; ++n) {
      const int w = w0 + tx * TN + n;
      if (w < in.mul_out) out[int64_t(u) * in.mul_out + w] = pw * acc[m][n];
    }
  }
}

// gw[s, j] = sum over the species' chunks c (in order) of partial[c, j].
template <typename T>
__global__ void __launch_bounds__(kThreads)
    wgrad_reduce_kernel(const T* __restrict__ partial, T* __restrict__ gw, const int* __restrict__ chunk_ptr,
                        int64_t num_species, int64_t numel) {
  const int64_t total = num_species * numel;
  for (int64_t q = int64_t(blockIdx.x) * kThreads + threadIdx.x; q < total; q += int64_t(gridDim.x) * kThreads) {
    const int64_t s = q / numel, j = q % numel;
    T sum = T(0);
    for (int64_t c = chunk_ptr[s]; c < chunk_ptr[s + 1]; ++c) sum += partial[c * numel + j];
    gw[q] = sum;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Column-tile classes of gemm_kernel: 0: ncols <= 32, 1: <= 64, 2: wider (tiles of 128).
inline int col_class(int ncols) { return ncols <= 32 ? 0 : ncols <= 64 ? 1 : 2; }
constexpr int kClassBN[3] = {32, 64, 128};
template <typename T>
constexpr int class_bm(int cls) {
  return (sizeof(T) == 8 && cls == 2) ? 64 : 128;
}

template <typename T, bool TRANS, bool MMA>
void launch_class(int cls, int blocks, cudaStream_t stream, const SLProblem& p, const GemmParams& gp, const T* src,
                  int64_t ld_src, const T* weight, T* dst, int64_t ld_dst, const int64_t* seg_ptr,
                  const int* task_ptr) {
  // K step 8; 16 for the float64 DMMA tiles of narrow blocks (the wide l > 0 inputs' share of
  // the bytes): twice the loads in flight per thread, where the 8-step tiles waited on memory
  constexpr int kNarrowK = MMA ? 16 : 8;
  if (cls == 0)
    gemm_kernel<T, 128, 32, 4, 4, TRANS, MMA, kNarrowK><<<blocks, kThreads, 0, stream>>>(p, gp, src, ld_src, weight,
                                                                                      dst, ld_dst, seg_ptr, task_ptr);
  else if (cls == 1)
    gemm_kernel<T, 128, 64, 8, 4, TRANS, MMA, 8><<<blocks, kThreads, 0, stream>>>(p, gp, src, ld_src, weight, dst,
                                                                               ld_dst, seg_ptr, task_ptr);
  else if constexpr (sizeof(T) == 8)
    gemm_kernel<T, 64, 128, 4, 8, TRANS, MMA, 8><<<blocks, kThreads, 0, stream>>>(p, gp, src, ld_src, weight, dst,
                                                                               ld_dst, seg_ptr, task_ptr);
  else
    gemm_kernel<T, 128, 128, 8, 8, TRANS, MMA, 8><<<blocks, kThreads, 0, stream>>>(p, gp, src, ld_src, weight, dst,
                                                                                ld_dst, seg_ptr, task_ptr);
}

// float64 on the tensor cores where the device has DMMA (compute capability >= 8.0) and
// MD_ACCEL_SL_DMMA is not 0 (comparisons); float32 on the CUDA cores (round-to-nearest FMAs).
template <typename T>
bool use_dmma() {
  if constexpr (sizeof(T) != 8) {
    return false;
  } else {
    static const bool on = [] {
      const char* v = std::getenv("MD_ACCEL_SL_DMMA");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    int dev = 0, major = 0;
    if (!on || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return false;
    return major >= 8;
  }
}

inline int64_t align16(int64_t b) { return (b + 15) / 16 * 16; }

int64_t chunk_nodes(int64_t num_nodes) { return imax<int64_t>(64, (num_nodes + 127) / 128); }
int64_t max_chunks(const SLProblem& p) {
  return (p.num_nodes + chunk_nodes(p.num_nodes) - 1) / chunk_nodes(p.num_nodes) + p.num_species;
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// seg_ptr and task_ptr (launch: N > 0).
template <typename T>
const char* schedule(const SLProblem& p, const SchedParams& sp, int64_t* seg_ptr, int* task_ptr, T* nan_rows,
                     int64_t nan_ld, cudaStream_t stream) {
  const int64_t blocks = (p.num_nodes + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) return "too many nodes";
  segment_kernel<T><<<int(blocks), kThreads, 0, stream>>>(p, seg_ptr, nan_rows, nan_ld, int(nan_ld));
  if (const char* err = last_error()) return err;
  prefix_kernel<<<1, kSchedThreads, 0, stream>>>(p, sp, seg_ptr, task_ptr);
  return last_error();
}

}  // namespace

int64_t species_linear_gemm_scratch_bytes(const SLProblem& p, int num_groups) {
  return align16(8 * (p.num_species + 1)) + align16(4 * (int64_t(num_groups) * p.num_species + 1));
}

int64_t species_linear_wgrad_scratch_bytes(const SLProblem& p, int num_instr, int elem_size) {
  return species_linear_gemm_scratch_bytes(p, num_instr + 1) + max_chunks(p) * p.weight_numel * elem_size;
}

template <typename T>
const char* species_linear_gemm_launch(const SLProblem& p, const T* src, int64_t ld_src, const T* weight, T* dst,
                                       int64_t ld_dst, const SLGroup* groups, int num_groups, const SLTerm* terms,
                                       int num_terms, bool trans, void* scratch, cudaStream_t stream) {
  if (num_groups > kMaxSchedGroups) return "too many output blocks (more than 64)";
  for (int q = 0; q < num_groups; ++q) {
    const SLGroup& gr = groups[q];
    if (gr.d < 1 || gr.d > kSLMaxDim || gr.ncols < 1 || gr.num_terms < 1 || gr.num_terms > kMaxTermsPerLaunch ||
        gr.first_term < 0 || gr.first_term + gr.num_terms > num_terms)
      return "invalid group";
  }
  // schedule order: groups sorted by column class, so each launch covers a contiguous range
  int sorted[kMaxSchedGroups];
  int n_sorted = 0;
  for (int cls = 0; cls < 3; ++cls)
    for (int q = 0; q < num_groups; ++q)
      if (col_class(groups[q].ncols) == cls) sorted[n_sorted++] = q;
  SchedParams sp{};
  sp.num_groups = num_groups;
  for (int q = 0; q < num_groups; ++q) {
    const SLGroup& gr = groups[sorted[q]];
    const int cls = col_class(gr.ncols);
    sp.nodes_per_tile[q] = class_bm<T>(cls) / gr.d;
    sp.mult[q] = (gr.ncols + kClassBN[cls] - 1) / kClassBN[cls];
  }
  int64_t* seg_ptr = static_cast<int64_t*>(scratch);
  int* task_ptr = reinterpret_cast<int*>(static_cast<char*>(scratch) + align16(8 * (p.num_species + 1)));
  if (const char* err = schedule<T>(p, sp, seg_ptr, task_ptr, dst, ld_dst, stream)) return err;

  constexpr bool kDmma = sizeof(T) == 8;  // the DMMA instantiations exist for float64 only
  const bool mma = use_dmma<T>();          // once per call, not per launch
  int q = 0;
  while (q < num_groups) {
    const int cls = col_class(groups[sorted[q]].ncols);
    GemmParams gp{};
    gp.group_base = q;
    int n_terms = 0;
    int64_t blocks = 0;
    while (q < num_groups && gp.num_groups < kMaxGroupsPerLaunch) {
      const SLGroup& gr = groups[sorted[q]];
      if (col_class(gr.ncols) != cls || n_terms + gr.num_terms > kMaxTermsPerLaunch) break;
      SLGroup local = gr;
      local.first_term = n_terms;
      for (int k = 0; k < gr.num_terms; ++k) gp.terms[n_terms++] = terms[gr.first_term + k];
      gp.groups[gp.num_groups++] = local;
      blocks += ((p.num_nodes + sp.nodes_per_tile[q] - 1) / sp.nodes_per_tile[q] + p.num_species) * sp.mult[q];
      ++q;
    }
    if (blocks > 0x7fffffff) return "problem too large for one launch";
    if (trans && mma)
      launch_class<T, true, kDmma>(cls, int(blocks), stream, p, gp, src, ld_src, weight, dst, ld_dst, seg_ptr,
                                   task_ptr);
    else if (trans)
      launch_class<T, true, false>(cls, int(blocks), stream, p, gp, src, ld_src, weight, dst, ld_dst, seg_ptr,
                                   task_ptr);
    else if (mma)
      launch_class<T, false, kDmma>(cls, int(blocks), stream, p, gp, src, ld_src, weight, dst, ld_dst, seg_ptr,
                                    task_ptr);
    else
      launch_class<T, false, false>(cls, int(blocks), stream, p, gp, src, ld_src, weight, dst, ld_dst, seg_ptr,
                                    task_ptr);
    if (const char* err = last_error()) return err;
  }
  return nullptr;
}

template <typename T>
const char* species_linear_wgrad_launch(const SLProblem& p, const T* x, int64_t ld_x, const T* g, int64_t ld_g, T* gw,
                                        const SLWInstr* instr, int num_instr, void* scratch, cudaStream_t stream) {
  if (num_instr + 1 > kMaxSchedGroups) return "too many instructions (more than 63)";
  const int64_t chunk = chunk_nodes(p.num_nodes);
  SchedParams sp{};
  sp.num_groups = num_instr + 1;
  sp.nodes_per_tile[0] = int(chunk);
  sp.mult[0] = 1;
  for (int k = 0; k < num_instr; ++k) {
    const SLWInstr& in = instr[k];
    if (in.d < 1 || in.d > kSLMaxDim || in.mul_in < 1 || in.mul_out < 1) return "invalid instruction";
    sp.nodes_per_tile[k + 1] = int(chunk);
    sp.mult[k + 1] = ((in.mul_in + 63) / 64) * ((in.mul_out + 63) / 64);
  }
  char* base = static_cast<char*>(scratch);
  int64_t* seg_ptr = reinterpret_cast<int64_t*>(base);
  int* task_ptr = reinterpret_cast<int*>(base + align16(8 * (p.num_species + 1)));
  T* partial = reinterpret_cast<T*>(base + species_linear_gemm_scratch_bytes(p, num_instr + 1));
  if (const char* err = schedule<T>(p, sp, seg_ptr, task_ptr, nullptr, 0, stream)) return err;

  for (int k0 = 0; k0 < num_instr; k0 += kMaxWInstrPerLaunch) {
    WgradParams wp{};
    wp.num_instr = imin(kMaxWInstrPerLaunch, num_instr - k0);
    wp.group_base = 1 + k0;
    wp.chunk_nodes = int(chunk);
    int64_t blocks = 0;
    for (int k = 0; k < wp.num_instr; ++k) {
      wp.instr[k] = instr[k0 + k];
      blocks += max_chunks(p) * sp.mult[1 + k0 + k];
    }
    if (blocks > 0x7fffffff) return "problem too large for one launch";
    wgrad_kernel<T><<<int(blocks), kThreads, 0, stream>>>(p, wp, x, ld_x, g, ld_g, partial, seg_ptr, task_ptr);
    if (const char* err = last_error()) return err;
  }
  const int64_t total = p.num_species * p.weight_numel;
  const int blocks = int(imin<int64_t>(imax<int64_t>((total + kThreads - 1) / kThreads, 1), 65536));
  wgrad_reduce_kernel<T><<<blocks, kThreads, 0, stream>>>(partial, gw, task_ptr, p.num_species, p.weight_numel);
  return last_error();
}

#define MD_ACCEL_SL_INSTANTIATE(T)                                                                              \
  template const char* species_linear_gemm_launch<T>(const SLProblem&, const T*, int64_t, const T*, T*, int64_t, \
                                                     const SLGroup*, int, const SLTerm*, int, bool, void*,       \
                                                     cudaStream_t);                                              \
  template const char* species_linear_wgrad_launch<T>(const SLProblem&, const T*, int64_t, const T*, int64_t, T*, \
                                                      const SLWInstr*, int, void*, cudaStream_t);
MD_ACCEL_SL_INSTANTIATE(float)
MD_ACCEL_SL_INSTANTIATE(double)
#undef MD_ACCEL_SL_INSTANTIATE

}  // namespace md_accel
