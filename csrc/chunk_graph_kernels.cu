// By-sender order of one chunk of edges, for the chunked backward (tp_conv_chunked_cuda.cpp).
//
// Edges are sorted by receiver; a chunk is the edge range [e0, e1). The global by-sender order
// src_perm lists each sender's edges in ascending edge index (build_graph sorts stably; the
// contract of TPGraph, tp_conv.h), so a
// sender's edges inside the chunk are one contiguous run of its group: two binary searches per
// sender find it, and the chunk's order is those runs, shifted to chunk-local indices:
//   runs:  lo[s] = first group position with src_perm >= e0, count[s] = positions < e1 from there
//   (the caller turns count into chunk offsets ptr_c, [N+1], by an exclusive prefix sum: the same
//   kernel writes ptr_c[0] = 0), and the chunk's receiver offsets dst_c = clamp(dst_ptr - e0, 0, e1 - e0)
//   perm:  perm_c[ptr_c[s] + j] = src_perm[lo[s] + j] - e0
// O(N log degree + edges of the chunk) instead of passes over every edge of the graph per chunk.
#include <cuda_runtime.h>

#include <cstdint>

namespace md_accel {
namespace {

constexpr int kThreads = 256;

// first position p in [begin, end) with perm[p] >= value (perm ascending there)
__device__ __forceinline__ int64_t lower_bound(const int64_t* __restrict__ perm, int64_t begin, int64_t end,
                                               int64_t value) {
  while (begin < end) {
    const int64_t mid = begin + (end - begin) / 2;
    if (perm[mid] < value) begin = mid + 1;
    else end = mid;
  }
  return begin;
}

__global__ void __launch_bounds__(kThreads) chunk_runs_kernel(const int64_t* __restrict__ src_perm,
                                                              const int64_t* __restrict__ src_ptr,
                                                              const int64_t* __restrict__ dst_ptr, int64_t n,
                                                              int64_t e0, int64_t e1, int64_t* __restrict__ lo,
                                                              int64_t* __restrict__ count,
                                                              int64_t* __restrict__ dst_c,
                                                              int64_t* __restrict__ ptr_c) {
  const int64_t s = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (s > n) return;
  const int64_t r = dst_ptr[s] - e0;
  dst_c[s] = r < 0 ? 0 : r > e1 - e0 ? e1 - e0 : r;
  if (s == 0) ptr_c[0] = 0;
  if (s == n) return;
  const int64_t b = src_ptr[s], e = src_ptr[s + 1];
  const int64_t first = lower_bound(src_perm, b, e, e0);
  lo[s] = first;
  count[s] = lower_bound(src_perm, first, e, e1) - first;
}

__global__ void __launch_bounds__(kThreads) chunk_perm_kernel(const int64_t* __restrict__ src_perm,
                                                              const int64_t* __restrict__ lo,
                                                              const int64_t* __restrict__ ptr_c, int64_t n,
                                                              int64_t e0, int64_t num_c, int64_t* __restrict__ perm_c) {
  const int64_t s = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (s >= n) return;
  const int64_t from = lo[s], to = ptr_c[s], len = ptr_c[s + 1] - to;
  // within bounds even for an src_perm that breaks the ordering contract (then the order is wrong)
  for (int64_t j = 0; j < len && to + j < num_c; ++j) perm_c[to + j] = src_perm[from + j] - e0;
}

const char* launch_status() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

unsigned blocks(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

// lo, count: [n] each; dst_c: [n + 1]; ptr_c: [n + 1], of which only ptr_c[0] is written. nullptr on
// success, else a static error message.
const char* chunk_sender_runs(const int64_t* src_perm, const int64_t* src_ptr, const int64_t* dst_ptr, int64_t n,
                              int64_t e0, int64_t e1, int64_t* lo, int64_t* count, int64_t* dst_c, int64_t* ptr_c,
                              cudaStream_t stream) {
  if (n < 0) return nullptr;
  if ((n + kThreads) / kThreads > 0x7fffffffLL) return "chunk_sender_runs: too many nodes";
  chunk_runs_kernel<<<blocks(n + 1), kThreads, 0, stream>>>(src_perm, src_ptr, dst_ptr, n, e0, e1, lo, count, dst_c,
                                                            ptr_c);
  return launch_status();
}

// perm_c: [num_c] (the chunk's edges, = ptr_c[n]). nullptr on success, else a static error message.
const char* chunk_sender_perm(const int64_t* src_perm, const int64_t* lo, const int64_t* ptr_c, int64_t n,
                              int64_t e0, int64_t num_c, int64_t* perm_c, cudaStream_t stream) {
  if (n <= 0) return nullptr;
  if ((n + kThreads - 1) / kThreads > 0x7fffffffLL) return "chunk_sender_perm: too many nodes";
  chunk_perm_kernel<<<blocks(n), kThreads, 0, stream>>>(src_perm, lo, ptr_c, n, e0, num_c, perm_c);
  return launch_status();
}

}  // namespace md_accel
