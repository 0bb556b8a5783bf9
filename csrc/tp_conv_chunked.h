// The fused-radial convolution (md_accel::tp_conv_fused_*, w = hidden @ W) run materialised one
// chunk of edges at a time, so the [E, weights] tensor w and its gradient never exist whole:
// per chunk w_c = hidden_c @ W (3xTF32 tensor cores in float32), then the specialised tp_conv
// kernels on the chunk, the forward adding into the receivers' rows and the backward into the
// senders' grad_x rows (TPDims::accumulate). Chunks run in a fixed order: deterministic.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "tp_conv.h"
#include "tp_spec_abi.h"

namespace md_accel {

// tp_conv_chunked_cuda.cpp: the device's memory in bytes (0 where the query fails) and its
// streaming multiprocessors (1 where it fails), queried once per device.
int64_t device_memory(int device);
int64_t sm_count(int device);

// tp_conv_cuda.cpp: the specialised kernels serving x's plan and CG values with a forward and a
// backward in x's dtype, or null (the chunked driver then runs the op unchunked).
const TPSpec* tp_conv_spec_for(const at::Tensor& x, const at::Tensor& paths, const at::Tensor& cg_ptr,
                               const at::Tensor& cg_idx, const at::Tensor& cg_val);
// One launch of spec's forward (backward = false: into out_or_gx = out) or backward (out_or_gx =
// grad_x, gy_c, gw_c, work_c) on one chunk's graph of a graph with graph_edges edges; y_c, w_c, gy_c,
// gw_c, work_c are its rows. atomic_gx (tp_conv_atomic_gx()): the backward's kernels add each edge's grad_x
// contribution atomically into grad_x (TPDims::atomic_gx; grad_x zeroed by the launch unless accumulate;
// work_c unused, may be undefined), else they write it to work_c, or with work_c undefined to free columns of
// gw_c (TPDims::rows_in_gw: only where tp_conv_chunk_rows_in_gw, decided once per op call; a plan without it
// fails the launch), summed per sender into grad_x by the launch.
void tp_conv_chunk_launch(const TPSpec* spec, bool backward, const at::Tensor& x, const at::Tensor& y_c,
                          const at::Tensor& w_c, const at::Tensor& g, const TPGraph& chunk, int64_t graph_edges,
                          int64_t dim_out, bool accumulate, const at::Tensor& out_or_gx, const at::Tensor& gy_c,
                          const at::Tensor& gw_c, const at::Tensor& work_c, bool atomic_gx = false);
// Whether tp_conv_chunk_launch's backward may keep each edge's grad_x row in gw_c (TPDims::rows_in_gw:
// deterministic, md_accel::set_rows_in_grad_w's mode on, and offered by spec in x's dtype): the caller then passes
// no work_c. Under the mode auto it is false for the fused-radial and pair ops that call this (they are never marked
// final, final_backward.h); the plain op's final backward keeps its rows in grad_w without edge chunks.
bool tp_conv_chunk_rows_in_gw(const TPSpec* spec, const at::Tensor& x, bool atomic_gx);

// tp_conv_cuda.cpp: whether the specialised backward kernels add grad_x atomically (md_accel::set_deterministic
// off and torch's deterministic algorithms off): read once per op call, so that one call's chunks agree.
bool tp_conv_atomic_gx();

// The plain op's backward (md_accel::tp_conv_bwd) through spec's kernels writes each edge's grad_x row
// (num_edges x in1, summed per sender afterwards: deterministic, no atomics). With MD_ACCEL_BWD_WORK_MIB
// set (MiB, read per call; unset or 0: off) a graph whose rows exceed it runs in edge chunks whose rows
// fit (one buffer reused chunk after chunk, grad_x accumulated): less memory, more time. Off by default:
// session 25 (H200, kernels.py, 312k edges) 128 MiB took the fwd+bwd peak of MACE-MP-0-medium float32
// from 4.18 to 3.71 GiB but its time from 2.43 to 2.80 ms (SevenNet-l3i5 float64: 10.9 -> 9.4 GiB,
// 9.78 -> 12.9 ms); each chunk adds a launch tail. It bounds only this op through generated kernels
// (the double backward and the generic kernels hold the whole rows), and the chunks' graphs cost
// 3 (N + 1) int64 each: a budget of a few rows per node costs more than it saves.
// Returns the edges per chunk to use, max(E, 1) (one launch) when the rows fit or chunks are off.
int64_t tp_conv_bwd_chunk_edges(int64_t num_edges, int64_t in1, int64_t elem);
// Runs that backward over chunks of `step` edges into gx, gy, gw (allocated, contiguous).
void tp_conv_bwd_edge_chunks(const TPSpec* spec, const at::Tensor& g, const at::Tensor& x, const at::Tensor& y,
                             const at::Tensor& w, const at::Tensor& src, const at::Tensor& dst,
                             const at::Tensor& dst_ptr, const at::Tensor& src_perm, const at::Tensor& src_ptr,
                             int64_t step, const at::Tensor& gx, const at::Tensor& gy, const at::Tensor& gw);

// tp_conv_chunked_cuda.cpp. Operands as prepared by tp_conv_fused_cuda.cpp (contiguous, on the
// device, cg_val in the features' dtype); chunks of MD_ACCEL_WEIGHT_CHUNK_MIB MiB of weights.
// kept (forward, may be null): receives the first chunks' w_c as far as the keep budget allows
// (MD_ACCEL_KEEP_WEIGHTS_MIB, see tp_conv_chunked_cuda.cpp); the backward takes them instead of
// recomputing those chunks.
at::Tensor tp_conv_chunked_fwd(const at::Tensor& x, const at::Tensor& y, const at::Tensor& h, const at::Tensor& W,
                               const at::Tensor& src, const at::Tensor& dst, const at::Tensor& dst_ptr,
                               const at::Tensor& src_perm, const at::Tensor& src_ptr, const at::Tensor& paths,
                               const at::Tensor& cg_ptr, const at::Tensor& cg_idx, const at::Tensor& cg_val,
                               int64_t dim_out, std::vector<at::Tensor>* kept = nullptr);
// (grad_x, grad_y, grad_hidden, grad_W or an empty [0, weights])
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> tp_conv_chunked_bwd(
    const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, const at::Tensor& h, const at::Tensor& W,
    const at::Tensor& src, const at::Tensor& dst, const at::Tensor& dst_ptr, const at::Tensor& src_perm,
    const at::Tensor& src_ptr, const at::Tensor& paths, const at::Tensor& cg_ptr, const at::Tensor& cg_idx,
    const at::Tensor& cg_val, bool need_W, const std::vector<at::Tensor>& kept = {});

// Edges that share their weights (the two directions of a pair: the radial MLP sees only the
// length): h has one row per weight row (P rows), w_row [E] gives each edge its row. Same results
// as the functions above on h.index_select(0, w_row), for half the GEMM work when P = E / 2: the
// forward computes the P weight rows whole (h @ W) and the generated kernels read row w_row[e] for
// edge e (TPGraph::w_row); the backward writes grad_w per edge chunk, hidden's gradient per edge
// (grad_w @ W^T; [E, H] for the whole backward), then sums it over the edges of each row with one
// gather (row_sum_kernels.cu). Where no generated kernels serve the plan, or the P weight rows exceed
// MD_ACCEL_PAIR_WEIGHTS_MIB (read once per process), they run the functions above on h's rows
// expanded per edge instead. Small graphs (MD_ACCEL_LEAN_WEIGHTS_MIB,
// tp_conv_chunked_cuda.cpp) keep no rows and run the backward in a few edge chunks. grad_hidden is
// bit-reproducible when at most two edges share a row (a + b = b + a; more are added with atomics).
at::Tensor tp_conv_pair_fwd(const at::Tensor& x, const at::Tensor& y, const at::Tensor& h, const at::Tensor& W,
                            const at::Tensor& w_row, const at::Tensor& src, const at::Tensor& dst,
                            const at::Tensor& dst_ptr, const at::Tensor& src_perm, const at::Tensor& src_ptr,
                            const at::Tensor& paths, const at::Tensor& cg_ptr, const at::Tensor& cg_idx,
                            const at::Tensor& cg_val, int64_t dim_out, std::vector<at::Tensor>* kept = nullptr);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> tp_conv_pair_bwd(
    const at::Tensor& g, const at::Tensor& x, const at::Tensor& y, const at::Tensor& h, const at::Tensor& W,
    const at::Tensor& w_row, const at::Tensor& src, const at::Tensor& dst, const at::Tensor& dst_ptr,
    const at::Tensor& src_perm, const at::Tensor& src_ptr, const at::Tensor& paths, const at::Tensor& cg_ptr,
    const at::Tensor& cg_idx, const at::Tensor& cg_val, bool need_W, const std::vector<at::Tensor>& kept = {});

}  // namespace md_accel
