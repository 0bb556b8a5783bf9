// Sum of per-edge rows over the edges of each weight row (the pair op's hidden gradient,
// tp_conv_chunked_cuda.cpp): out[p] = sum of in[e] over the edges e with w_row[e] == p.
//
// The two directions of a pair share a row, so a row has two edges. A gather instead of index_add's
// float atomics: one pass over the edges records each row's first two edges (slot order is a race,
// but a + b = b + a bitwise, so the sum does not depend on it), then one thread per output element
// reads them and writes the row. Rows of more than two edges (not made by md_accel's graphs) get
// their edges added with float atomics after that, in no fixed order (as index_add would).
// Edges whose row is outside [0, P) are ignored.
#include <cuda_runtime.h>

#include <cstdint>

namespace md_accel {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) row_slots_kernel(const int64_t* __restrict__ w_row, int64_t E, int64_t P,
                                                             int* __restrict__ count, int64_t* __restrict__ slot) {
  const int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= E) return;
  const int64_t p = w_row[e];
  if (p < 0 || p >= P) return;
  const int k = atomicAdd(count + p, 1);
  if (k < 2) slot[2 * p + k] = e;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_gather_kernel(const T* __restrict__ in, const int* __restrict__ count,
                                                              const int64_t* __restrict__ slot, int64_t P, int64_t H,
                                                              T* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= P * H) return;
  const int64_t p = i / H, c = i - p * H;
  const int n = count[p];
  T v = T(0);  // also where n > 2: row_many_kernel adds those edges
  if (n == 1) v = in[slot[2 * p] * H + c];
  if (n == 2) v = in[slot[2 * p] * H + c] + in[slot[2 * p + 1] * H + c];
  out[i] = v;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) row_many_kernel(const T* __restrict__ in, const int64_t* __restrict__ w_row,
                                                            const int* __restrict__ count, int64_t E, int64_t P,
                                                            int64_t H, T* __restrict__ out) {
  const int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= E) return;
  const int64_t p = w_row[e];
  if (p < 0 || p >= P || count[p] <= 2) return;
  for (int64_t c = 0; c < H; ++c) atomicAdd(out + p * H + c, in[e * H + c]);
}

const char* launch_status() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

int64_t blocks(int64_t n) { return (n + kThreads - 1) / kThreads; }

}  // namespace

// in: [E, H], out: [P, H] (every row written); count: [P] zeros, slot: [P, 2] scratch. nullptr on
// success, else a static error message.
template <typename T>
const char* rows_sum(const T* in, const int64_t* w_row, int64_t E, int64_t P, int64_t H, int* count, int64_t* slot,
                     T* out, cudaStream_t stream) {
  if (P <= 0 || H <= 0) return nullptr;
  if (blocks(E) > 0x7fffffffLL || blocks(P * H) > 0x7fffffffLL) return "rows_sum: too many rows";
  if (E > 0) {
    row_slots_kernel<<<unsigned(blocks(E)), kThreads, 0, stream>>>(w_row, E, P, count, slot);
    if (const char* err = launch_status()) return err;
  }
  row_gather_kernel<T><<<unsigned(blocks(P * H)), kThreads, 0, stream>>>(in, count, slot, P, H, out);
  if (const char* err = launch_status()) return err;
  if (E > 0) row_many_kernel<T><<<unsigned(blocks(E)), kThreads, 0, stream>>>(in, w_row, count, E, P, H, out);
  return launch_status();
}

template const char* rows_sum<float>(const float*, const int64_t*, int64_t, int64_t, int64_t, int*, int64_t*, float*,
                                     cudaStream_t);
template const char* rows_sum<double>(const double*, const int64_t*, int64_t, int64_t, int64_t, int*, int64_t*,
                                      double*, cudaStream_t);

}  // namespace md_accel
