// Generic CUDA kernels of md_accel::tp_conv_{fwd,bwd,dbwd}: read the lowered plan (paths +
// Clebsch-Gordan non-zeros) from shared memory, so one binary serves every configuration.
//
// Mapping: one block per receiver (fwd) or sender (grad_x) node, threads over the channel u of
// the 'uvu' product; node sums run sequentially over the node's CSR segment (no atomics, so the
// result is bit-reproducible). Per-edge outputs (grad_y, grad_w) use one block per edge chunk.
//
// Aliasing rule the kernels rely on (true for any lowering from irreps): two paths that touch
// the same output / in1 / weight element use the same block offset, so the element is always
// owned by the same thread.
#include <cuda_runtime.h>

#include "tp_conv.h"

namespace md_accel {
namespace {

constexpr int kEdgesPerBlock = 32;  // per-edge kernel: contiguous edge chunk per block
constexpr int kBlocksPerSM = 16;    // node kernels: persistent grid of this many blocks per SM

struct PathInfo {
  int in1_off, mul, d1, in2_off, out_off, d3, w_off, w_stride;
};

__device__ __forceinline__ PathInfo get_path(const int* s_paths, int p) {
  const int* r = s_paths + kPathCols * p;
  return {r[0], r[1], 2 * r[2] + 1, r[3], r[5], 2 * r[6] + 1, r[7], r[8]};
}

__device__ __forceinline__ void unpack(int ijk, int& i, int& j, int& k) {
  i = ijk & 255;
  j = (ijk >> 8) & 255;
  k = ijk >> 16;
}

// Shared-memory carving: the T arrays first (cg values, then the kernel's buffers), the int
// tables after them. Host and device compute the same sizes from these helpers.
inline size_t table_int_count(const TPPlan& p) {
  return size_t(kPathCols) * p.num_paths + p.num_paths + 1 + p.nnz;
}

template <typename T>
__device__ __forceinline__ void load_plan(const TPPlan& p, T* s_val, int* s_paths, int* s_ptr,
                                          int* s_ijk) {
  const T* val = static_cast<const T*>(p.cg_val);
  for (int q = threadIdx.x; q < kPathCols * p.num_paths; q += blockDim.x) s_paths[q] = p.paths[q];
  for (int q = threadIdx.x; q <= p.num_paths; q += blockDim.x) s_ptr[q] = p.cg_ptr[q];
  for (int q = threadIdx.x; q < p.nnz; q += blockDim.x) {
    s_ijk[q] = p.cg_ijk[q];
    s_val[q] = val[q];
  }
  __syncthreads();
}

template <typename T>
__device__ __forceinline__ void copy_row(T* dst, const T* src, int n) {
  for (int q = threadIdx.x; q < n; q += blockDim.x) dst[q] = src[q];
}

// The sums every generic kernel forms over one path's non-zeros q0..q1, in their order: term(q, i, j, k)
// added up while the index Key (0: i, 1: j, 2: k) stays the same, each run's sum handed to flush(index, sum)
// when it changes and at the end.
template <int Key, typename T, typename Term, typename Flush>
__device__ __forceinline__ void sum_runs(const int* s_ijk, int q0, int q1, Term term, Flush flush) {
  T r = T(0);
  int prev = -1;
  for (int q = q0; q < q1; ++q) {
    int i, j, k;
    unpack(s_ijk[q], i, j, k);
    const int key = Key == 0 ? i : (Key == 1 ? j : k);
    if (key != prev) {
      if (prev >= 0) flush(prev, r);
      r = T(0);
      prev = key;
    }
    r += term(q, i, j, k);
  }
  if (prev >= 0) flush(prev, r);
}

// ---------------------------------------------------------------------------------------------
// Segmented sum over receivers.
//   DB = false: out[n] = sum_e fwd_e(x, y, w)
//   DB = true:  out[n] = sum_e fwd_e(ggx, y, w) + fwd_e(x, ggy, w) + fwd_e(x, y, ggw)
// Shared: s_val[nnz] acc[out] xs[in1] ys[in2] (DB: gxs[in1] gys[in2]) | ints
template <typename T, bool DB>
__global__ void fwd_kernel(TPTensors<T> a, TPGraph g, TPPlan p, TPDims d) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_val = reinterpret_cast<T*>(smem_raw);
  T* acc = s_val + p.nnz;
  T* xs = acc + d.out;
  T* ys = xs + d.in1;
  T* gxs = ys + d.in2;
  T* gys = gxs + (DB ? d.in1 : 0);
  int* s_paths = reinterpret_cast<int*>(gys + (DB ? d.in2 : 0));
  int* s_ptr = s_paths + kPathCols * p.num_paths;
  int* s_ijk = s_ptr + p.num_paths + 1;
  load_plan(p, s_val, s_paths, s_ptr, s_ijk);

  for (int64_t n = blockIdx.x; n < g.num_nodes; n += gridDim.x) {
    for (int q = threadIdx.x; q < d.out; q += blockDim.x) acc[q] = T(0);
    const int64_t e1 = g.dst_ptr[n + 1];
    for (int64_t e = g.dst_ptr[n]; e < e1; ++e) {
      __syncthreads();  // previous edge done with the staging buffers, acc zeroed
      const int64_t s = g.src[e];
      copy_row(xs, a.x + s * d.in1, d.in1);
      copy_row(ys, a.y + e * d.in2, d.in2);
      if (DB) {
        copy_row(gxs, a.ggx + s * d.in1, d.in1);
        copy_row(gys, a.ggy + e * d.in2, d.in2);
      }
      __syncthreads();
      const T* we = a.w + e * d.w;
      const T* gwe = DB ? a.ggw + e * d.w : nullptr;
      for (int u = threadIdx.x; u < p.max_mul; u += blockDim.x) {
        for (int pi = 0; pi < p.num_paths; ++pi) {
          const PathInfo pa = get_path(s_paths, pi);
          if (u >= pa.mul) continue;
          const T* xu = xs + pa.in1_off + u * pa.d1;
          const T* yv = ys + pa.in2_off;
          T* au = acc + pa.out_off + u * pa.d3;
          const T wu = we[pa.w_off + u * pa.w_stride];
          // runs of one output component k
          if (!DB) {
            sum_runs<2, T>(s_ijk, s_ptr[pi], s_ptr[pi + 1],
                           [&](int q, int i, int j, int) { return s_val[q] * xu[i] * yv[j]; },
                           [&](int k, T r) { au[k] += wu * r; });
          } else {
            const T* gxu = gxs + pa.in1_off + u * pa.d1;
            const T* gyv = gys + pa.in2_off;
            const T gwu = gwe[pa.w_off + u * pa.w_stride];
            sum_runs<2, T>(
                s_ijk, s_ptr[pi], s_ptr[pi + 1],
                [&](int q, int i, int j, int) {
                  return s_val[q] * (wu * (gxu[i] * yv[j] + xu[i] * gyv[j]) + gwu * xu[i] * yv[j]);
                },
                [&](int k, T r) { au[k] += r; });
          }
        }
      }
    }
    __syncthreads();
    T* orow = a.out + n * d.out;
    for (int q = threadIdx.x; q < d.out; q += blockDim.x) orow[q] = acc[q];
  }
}

// ---------------------------------------------------------------------------------------------
// Segmented sum over senders (transposed order).
//   DB = false: gx[n] = sum_{e: src=n} d/dx <g[dst], fwd_e(x, y, w)>
//   DB = true:  gx[n] = same with (y -> ggy) plus with (w -> ggw)
// Shared: s_val[nnz] acc[in1] ys[in2] gs[out] (DB: gys[in2]) | ints
template <typename T, bool DB>
__global__ void bwd_x_kernel(TPTensors<T> a, TPGraph g, TPPlan p, TPDims d) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_val = reinterpret_cast<T*>(smem_raw);
  T* acc = s_val + p.nnz;
  T* ys = acc + d.in1;
  T* gs = ys + d.in2;
  T* gys = gs + d.out;
  int* s_paths = reinterpret_cast<int*>(gys + (DB ? d.in2 : 0));
  int* s_ptr = s_paths + kPathCols * p.num_paths;
  int* s_ijk = s_ptr + p.num_paths + 1;
  load_plan(p, s_val, s_paths, s_ptr, s_ijk);

  for (int64_t n = blockIdx.x; n < g.num_nodes; n += gridDim.x) {
    for (int q = threadIdx.x; q < d.in1; q += blockDim.x) acc[q] = T(0);
    const int64_t t1 = g.src_ptr[n + 1];
    for (int64_t t = g.src_ptr[n]; t < t1; ++t) {
      __syncthreads();
      const int64_t e = g.src_perm[t];
      const int64_t r = g.dst[e];
      copy_row(ys, a.y + e * d.in2, d.in2);
      copy_row(gs, a.g + r * d.out, d.out);
      if (DB) copy_row(gys, a.ggy + e * d.in2, d.in2);
      __syncthreads();
      const T* we = a.w + e * d.w;
      const T* gwe = DB ? a.ggw + e * d.w : nullptr;
      for (int u = threadIdx.x; u < p.max_mul; u += blockDim.x) {
        for (int pi = 0; pi < p.num_paths; ++pi) {
          const PathInfo pa = get_path(s_paths, pi);
          if (u >= pa.mul) continue;
          T* au = acc + pa.in1_off + u * pa.d1;
          const T* yv = ys + pa.in2_off;
          const T* gu = gs + pa.out_off + u * pa.d3;
          const T wu = we[pa.w_off + u * pa.w_stride];
          // runs of one in1 component i
          if (!DB) {
            sum_runs<0, T>(s_ijk, s_ptr[pi], s_ptr[pi + 1],
                           [&](int q, int, int j, int k) { return s_val[q] * yv[j] * gu[k]; },
                           [&](int i, T r) { au[i] += wu * r; });
          } else {
            const T* gyv = gys + pa.in2_off;
            const T gwu = gwe[pa.w_off + u * pa.w_stride];
            sum_runs<0, T>(s_ijk, s_ptr[pi], s_ptr[pi + 1],
                           [&](int q, int, int j, int k) { return s_val[q] * (wu * gyv[j] + gwu * yv[j]) * gu[k]; },
                           [&](int i, T r) { au[i] += r; });
          }
        }
      }
    }
    __syncthreads();
    T* orow = a.gx + n * d.in1;
    for (int q = threadIdx.x; q < d.in1; q += blockDim.x) orow[q] = acc[q];
  }
}

// ---------------------------------------------------------------------------------------------
// Per-edge gradients (no cross-edge reduction), a chunk of consecutive edges per block; the
// grad_out row of the receiver is restaged only when the receiver changes.
//   DB = false: gy[e] = d/dy <g, fwd_e(x, y, w)>, gw[e] = d/dw <g, fwd_e(x, y, w)>
//   DB = true:  gy[e] = d/dy of the (x -> ggx) and (w -> ggw) terms,
//               gw[e] = d/dw of the (x -> ggx) and (y -> ggy) terms
// grad_y sums over channels: per-thread partials part[j * blockDim + tid], then a fixed-order
// warp reduction. Shared: s_val[nnz] gs[out] xs[in1] ys[in2] (DB: gxs[in1] gys[in2]) accw[w]
// part[blockDim * in2] | ints
template <typename T, bool DB>
__global__ void bwd_edge_kernel(TPTensors<T> a, TPGraph g, TPPlan p, TPDims d) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int nt = blockDim.x;
  T* s_val = reinterpret_cast<T*>(smem_raw);
  T* gs = s_val + p.nnz;
  T* xs = gs + d.out;
  T* ys = xs + d.in1;
  T* gxs = ys + d.in2;
  T* gys = gxs + (DB ? d.in1 : 0);
  T* accw = gys + (DB ? d.in2 : 0);
  T* part = accw + d.w;
  int* s_paths = reinterpret_cast<int*>(part + size_t(nt) * d.in2);
  int* s_ptr = s_paths + kPathCols * p.num_paths;
  int* s_ijk = s_ptr + p.num_paths + 1;
  load_plan(p, s_val, s_paths, s_ptr, s_ijk);

  const int64_t e_begin = int64_t(blockIdx.x) * kEdgesPerBlock;
  const int64_t e_end = min(g.num_edges, e_begin + kEdgesPerBlock);
  int64_t cur_dst = -1;
  for (int64_t e = e_begin; e < e_end; ++e) {
    __syncthreads();
    const int64_t s = g.src[e];
    const int64_t r = g.dst[e];
    if (r != cur_dst) {
      copy_row(gs, a.g + r * d.out, d.out);
      cur_dst = r;
    }
    copy_row(xs, a.x + s * d.in1, d.in1);
    copy_row(ys, a.y + e * d.in2, d.in2);
    if (DB) {
      copy_row(gxs, a.ggx + s * d.in1, d.in1);
      copy_row(gys, a.ggy + e * d.in2, d.in2);
    }
    for (int q = threadIdx.x; q < d.w; q += nt) accw[q] = T(0);
    for (int j = 0; j < d.in2; ++j) part[j * nt + threadIdx.x] = T(0);
    __syncthreads();

    const T* we = a.w + e * d.w;
    const T* gwe = DB ? a.ggw + e * d.w : nullptr;
    for (int u = threadIdx.x; u < p.max_mul; u += nt) {
      for (int pi = 0; pi < p.num_paths; ++pi) {
        const PathInfo pa = get_path(s_paths, pi);
        if (u >= pa.mul) continue;
        const T* xu = xs + pa.in1_off + u * pa.d1;
        const T* yv = ys + pa.in2_off;
        const T* gu = gs + pa.out_off + u * pa.d3;
        T* pv = part + size_t(pa.in2_off) * nt + threadIdx.x;
        const T wu = we[pa.w_off + u * pa.w_stride];
        T sw = T(0);  // grad of w[u] of this path, beside the runs of one grad_y component j
        if (!DB) {
          sum_runs<1, T>(
              s_ijk, s_ptr[pi], s_ptr[pi + 1],
              [&](int q, int i, int j, int k) {
                const T cxg = s_val[q] * xu[i] * gu[k];
                sw += cxg * yv[j];
                return cxg;
              },
              [&](int j, T r) { pv[j * nt] += wu * r; });
        } else {
          const T* gxu = gxs + pa.in1_off + u * pa.d1;
          const T* gyv = gys + pa.in2_off;
          const T gwu = gwe[pa.w_off + u * pa.w_stride];
          sum_runs<1, T>(
              s_ijk, s_ptr[pi], s_ptr[pi + 1],
              [&](int q, int i, int j, int k) {
                const T cg = s_val[q] * gu[k];
                sw += cg * (gxu[i] * yv[j] + xu[i] * gyv[j]);
                return cg * (wu * gxu[i] + gwu * xu[i]);
              },
              [&](int j, T r) { pv[j * nt] += r; });
        }
        accw[pa.w_off + u * pa.w_stride] += sw;
      }
    }
    __syncthreads();
    T* gwrow = a.gw + e * d.w;
    for (int q = threadIdx.x; q < d.w; q += nt) gwrow[q] = accw[q];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = nt >> 5;
    T* gyrow = a.gy + e * d.in2;
    for (int j = warp; j < d.in2; j += nwarps) {
      T v = T(0);
      for (int q = lane; q < nt; q += 32) v += part[j * nt + q];
      for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (lane == 0) gyrow[j] = v;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

int threads_for(const TPPlan& p) {
  int t = ((p.max_mul + 31) / 32) * 32;
  return t < 32 ? 32 : (t > 256 ? 256 : t);
}

int device_attr(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&v, attr, dev);
  return v;
}

int node_grid(int64_t num_nodes) {
  const int64_t cap = int64_t(device_attr(cudaDevAttrMultiProcessorCount)) * kBlocksPerSM;
  return int(num_nodes < cap ? num_nodes : cap);
}

template <typename Kernel>
const char* prepare(Kernel kernel, size_t smem) {
  const size_t limit = size_t(device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin));
  if (smem > limit)
    return "md_accel tp_conv: the problem needs more shared memory per block than this GPU has "
           "(feature rows too wide for the generic kernel)";
  if (smem > 48 * 1024) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) !=
        cudaSuccess)
      return "md_accel tp_conv: cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed";
  }
  return nullptr;
}

const char* last_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <typename T, bool DB>
const char* launch_fwd(const TPTensors<T>& a, const TPGraph& g, const TPPlan& p, const TPDims& d,
                       cudaStream_t stream) {
  if (g.num_nodes == 0) return nullptr;
  const size_t smem = sizeof(T) * (size_t(p.nnz) + d.out + (DB ? 2 : 1) * size_t(d.in1 + d.in2)) +
                      sizeof(int) * table_int_count(p);
  auto kernel = fwd_kernel<T, DB>;
  if (const char* err = prepare(kernel, smem)) return err;
  kernel<<<node_grid(g.num_nodes), threads_for(p), smem, stream>>>(a, g, p, d);
  return last_error();
}

template <typename T, bool DB>
const char* launch_bwd(const TPTensors<T>& a, const TPGraph& g, const TPPlan& p, const TPDims& d,
                       cudaStream_t stream) {
  const int threads = threads_for(p);
  if (g.num_nodes > 0) {
    const size_t smem = sizeof(T) * (size_t(p.nnz) + d.in1 + d.out + (DB ? 2 : 1) * size_t(d.in2)) +
                        sizeof(int) * table_int_count(p);
    auto kernel = bwd_x_kernel<T, DB>;
    if (const char* err = prepare(kernel, smem)) return err;
    kernel<<<node_grid(g.num_nodes), threads, smem, stream>>>(a, g, p, d);
    if (const char* err = last_error()) return err;
  }
  if (g.num_edges > 0) {
    const size_t smem =
        sizeof(T) * (size_t(p.nnz) + d.out + (DB ? 2 : 1) * size_t(d.in1 + d.in2) + d.w +
                     size_t(threads) * d.in2) +
        sizeof(int) * table_int_count(p);
    auto kernel = bwd_edge_kernel<T, DB>;
    if (const char* err = prepare(kernel, smem)) return err;
    const int64_t blocks = (g.num_edges + kEdgesPerBlock - 1) / kEdgesPerBlock;
    if (blocks > 0x7fffffffLL) return "md_accel tp_conv: too many edges";
    kernel<<<unsigned(blocks), threads, smem, stream>>>(a, g, p, d);
    if (const char* err = last_error()) return err;
  }
  return nullptr;
}

}  // namespace

constexpr const char* kNoWeightRows = "the generic kernels read one weight row per edge (w_row unsupported)";

template <typename T>
const char* tp_conv_fwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPPlan& p,
                               const TPDims& d, cudaStream_t stream) {
  if (g.w_row != nullptr) return kNoWeightRows;
  return launch_fwd<T, false>(t, g, p, d, stream);
}

template <typename T>
const char* tp_conv_bwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPPlan& p,
                               const TPDims& d, cudaStream_t stream) {
  if (g.w_row != nullptr) return kNoWeightRows;
  return launch_bwd<T, false>(t, g, p, d, stream);
}

template <typename T>
const char* tp_conv_dbwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPPlan& p,
                                const TPDims& d, cudaStream_t stream) {
  if (g.w_row != nullptr) return kNoWeightRows;
  if (t.out != nullptr) {  // g_grad_out asked for
    if (const char* err = launch_fwd<T, true>(t, g, p, d, stream)) return err;
  }
  return launch_bwd<T, true>(t, g, p, d, stream);
}

#define MD_ACCEL_INSTANTIATE(T)                                                                  \
  template const char* tp_conv_fwd_launch<T>(const TPTensors<T>&, const TPGraph&, const TPPlan&, \
                                             const TPDims&, cudaStream_t);                       \
  template const char* tp_conv_bwd_launch<T>(const TPTensors<T>&, const TPGraph&, const TPPlan&, \
                                             const TPDims&, cudaStream_t);                       \
  template const char* tp_conv_dbwd_launch<T>(const TPTensors<T>&, const TPGraph&,               \
                                              const TPPlan&, const TPDims&, cudaStream_t);
MD_ACCEL_INSTANTIATE(float)
MD_ACCEL_INSTANTIATE(double)
#undef MD_ACCEL_INSTANTIATE

}  // namespace md_accel
