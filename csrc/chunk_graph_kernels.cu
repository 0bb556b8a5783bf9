// By-sender order of every chunk of edges, for the chunked backward (tp_conv_chunked_cuda.cpp).
//
// Edges are sorted by receiver; chunk c is the edge range [e0, e1) = [c * step, min(E, e0 + step)).
// The global by-sender order src_perm lists each sender's edges in ascending edge index
// (build_graph sorts stably; the contract of TPGraph, tp_conv.h), so a sender's edges inside a
// chunk are one contiguous run of its group: two binary searches per (chunk, sender) find it, and
// the chunk's order is those runs, shifted to chunk-local indices:
//   runs:  lo[c, s] = first group position with src_perm >= e0, count[c, s + 1] = positions < e1
//   from there, count[c, 0] = 0 (the caller's prefix sum of count along s gives the chunk's sender
//   offsets ptr_c[c, :]), and the chunk's receiver offsets dst_c[c, :] = clamp(dst_ptr - e0, 0, e1 - e0)
//   perm:  perm[e0 + ptr_c[c, s] + j] = src_perm[lo[c, s] + j] - e0
// Every chunk in one launch each (the chunks of a layer's backward share them):
// O(chunks * N log degree + E) per layer.
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
                                                              int64_t E, int64_t step, int64_t chunks,
                                                              int64_t* __restrict__ lo, int64_t* __restrict__ count,
                                                              int64_t* __restrict__ dst_c) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= chunks * (n + 1)) return;
  const int64_t c = i / (n + 1), s = i - c * (n + 1);
  const int64_t e0 = c * step, e1 = e0 + step < E ? e0 + step : E;
  const int64_t r = dst_ptr[s] - e0;
  dst_c[i] = r < 0 ? 0 : r > e1 - e0 ? e1 - e0 : r;
  if (s == 0) count[c * (n + 1)] = 0;
  if (s == n) return;
  const int64_t b = src_ptr[s], e = src_ptr[s + 1];
  const int64_t first = lower_bound(src_perm, b, e, e0);
  lo[c * n + s] = first;
  count[c * (n + 1) + s + 1] = lower_bound(src_perm, first, e, e1) - first;
}

__global__ void __launch_bounds__(kThreads) chunk_perm_kernel(const int64_t* __restrict__ src_perm,
                                                              const int64_t* __restrict__ lo,
                                                              const int64_t* __restrict__ ptr_c, int64_t n, int64_t E,
                                                              int64_t step, int64_t chunks,
                                                              int64_t* __restrict__ perm) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= chunks * n) return;
  const int64_t c = i / n, s = i - c * n;
  const int64_t e0 = c * step, num_c = (e0 + step < E ? e0 + step : E) - e0;
  const int64_t* p = ptr_c + c * (n + 1);
  const int64_t from = lo[i], to = p[s], len = p[s + 1] - to;
  // within bounds even for an src_perm that breaks the ordering contract (then the order is wrong)
  for (int64_t j = 0; j < len && to + j < num_c; ++j) perm[e0 + to + j] = src_perm[from + j] - e0;
}

const char* launch_status() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

unsigned blocks(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

// The chunks [c * step, min(E, (c + 1) * step)) for c < chunks. lo: [chunks, n]; count, dst_c:
// [chunks, n + 1]. nullptr on success, else a static error message.
const char* chunk_sender_runs(const int64_t* src_perm, const int64_t* src_ptr, const int64_t* dst_ptr, int64_t n,
                              int64_t E, int64_t step, int64_t chunks, int64_t* lo, int64_t* count, int64_t* dst_c,
                              cudaStream_t stream) {
  if (n < 0 || chunks <= 0) return nullptr;
  if ((chunks * (n + 1) + kThreads - 1) / kThreads > 0x7fffffffLL) return "chunk_sender_runs: too many nodes";
  chunk_runs_kernel<<<blocks(chunks * (n + 1)), kThreads, 0, stream>>>(src_perm, src_ptr, dst_ptr, n, E, step, chunks,
                                                                       lo, count, dst_c);
  return launch_status();
}

// ptr_c: [chunks, n + 1] (each row count's prefix sum); perm: [E], chunk c's order at [c * step, ..).
// nullptr on success, else a static error message.
const char* chunk_sender_perm(const int64_t* src_perm, const int64_t* lo, const int64_t* ptr_c, int64_t n, int64_t E,
                              int64_t step, int64_t chunks, int64_t* perm, cudaStream_t stream) {
  if (n <= 0 || chunks <= 0) return nullptr;
  if ((chunks * n + kThreads - 1) / kThreads > 0x7fffffffLL) return "chunk_sender_perm: too many nodes";
  chunk_perm_kernel<<<blocks(chunks * n), kThreads, 0, stream>>>(src_perm, lo, ptr_c, n, E, step, chunks, perm);
  return launch_status();
}

}  // namespace md_accel
