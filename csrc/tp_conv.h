// Plain C++ interface between the torch glue (ops.cpp, g++) and the CUDA kernels (nvcc).
// No torch headers here: the kernels compile with nvcc alone.
#pragma once
#include <cstdint>
#include <cuda_runtime_api.h>

namespace md_accel {

// CSR graph, edges sorted by receiver (see docs/architecture.md).
struct TPGraph {
  const int64_t* src;       // [E] sender of edge e
  const int64_t* dst;       // [E] receiver of edge e (non-decreasing)
  const int64_t* dst_ptr;   // [N+1] edges of receiver n: dst_ptr[n] .. dst_ptr[n+1]
  const int64_t* src_perm;  // [E] edge ids sorted by sender, ascending within each sender (build_graph's stable sort)
  const int64_t* src_ptr;   // [N+1] src_perm[src_ptr[n] .. src_ptr[n+1]] are the edges sent by n
  int64_t num_nodes;
  int64_t num_edges;
  // [E] or null: the weight row of edge e is w_row[e] instead of e (edges that share their
  // weights, e.g. the two directions of a pair, read one row; tp_conv_chunked.h). Generated
  // kernels only: the generic ones refuse it.
  const int64_t* w_row = nullptr;
};

// Columns of the paths table: (in1_off, mul, l1, in2_off, l2, out_off, l3, w_off, w_stride);
// the weight of channel u of path p is w[e, w_off + u * w_stride].
constexpr int kPathCols = 9;

// Lowered problem on the device. cg_ijk packs (i | j << 8 | k << 16) of each non-zero.
struct TPPlan {
  const int32_t* paths;   // [P, kPathCols]
  const int32_t* cg_ptr;  // [P+1]
  const int32_t* cg_ijk;  // [nnz]
  const void* cg_val;     // [nnz], same dtype as the features
  int num_paths;
  int nnz;
  int max_mul;
};

// Row widths of the operands.
struct TPDims {
  int in1;  // x.size(1)
  int in2;  // y.size(1)
  int w;    // w.size(1)
  int out;  // dim_out
  // Specialised forward and per-sender sum only (md_accel/ops/_codegen.py): 1 = add into out / gx
  // on the nodes that have edges in this launch and leave the other rows untouched (edge chunks,
  // tp_conv_chunked_*); 0 = write every row.
  int accumulate;
  // Specialised backward and double backward only: blocks per receiver of their per-edge kernel
  // (part 1), each taking a contiguous 1/split of the receiver's edges. That kernel writes per-edge
  // rows only, so the results do not depend on it; small graphs and edge chunks need it to fill the
  // GPU (tp_conv_cuda.cpp: receiver_split).
  int split = 1;
  // Specialised backward and double backward only: 1 = each edge adds its grad_x contribution into the
  // sender's row with atomicAdd (the launcher's work pointer is then grad_x itself, zeroed by the host; no
  // per-edge rows, no per-sender sum): E x in1 less memory, results not bit-reproducible (sum order). 0 =
  // deterministic (the default, tp_conv_cuda.cpp: md_accel::set_deterministic).
  int atomic_gx = 0;
  // Specialised backward and double backward only, deterministic (atomic_gx 0): 1 = each edge's grad_x row is
  // kept in grad_w columns that are written later (md_accel/ops/_rows_plan.py): the per-edge kernel runs in runs
  // of passes, each run's rows summed per sender (added with accumulate) before the next; no scratch (work is
  // unused). Only where the library offers it (TPSpec::rows_in_gw).
  int rows_in_gw = 0;
};

// Operands of one launch. Unused pointers are null. Feature arrays are row-major, contiguous.
template <typename T>
struct TPTensors {
  const T* x;     // [N, in1]
  const T* y;     // [E, in2]
  const T* w;     // [E, w]
  const T* g;     // [N, out]  grad_out
  const T* ggx;   // [N, in1]  double backward: incoming gradients of (grad_x, grad_y, grad_w)
  const T* ggy;   // [E, in2]
  const T* ggw;   // [E, w]
  T* out;         // fwd: [N, out]; dbwd: g_grad_out (null: not computed)
  T* gx;          // [N, in1]
  T* gy;          // [E, in2]
  T* gw;          // [E, w]
};

// Each returns nullptr on success, else a static error message. Outputs are fully written.
// fwd:  out = fwd(x, y, w)
// bwd:  gx, gy, gw = d<g, fwd(x, y, w)> / d(x, y, w)
// dbwd: out = g_grad_out, gx = g_x, gy = g_y, gw = g_w (see tp_reference.py)
template <typename T>
const char* tp_conv_fwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPPlan& p,
                               const TPDims& d, cudaStream_t stream);
template <typename T>
const char* tp_conv_bwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPPlan& p,
                               const TPDims& d, cudaStream_t stream);
template <typename T>
const char* tp_conv_dbwd_launch(const TPTensors<T>& t, const TPGraph& g, const TPPlan& p,
                                const TPDims& d, cudaStream_t stream);

}  // namespace md_accel
