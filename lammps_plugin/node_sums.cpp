/* ----------------------------------------------------------------------
   md_accel LAMMPS plugin: forces and virial per graph node (node_sums.h)
------------------------------------------------------------------------- */

#include "node_sums.h"

namespace md_accel_lammps {

namespace {

// Per node, the sum of the rows of `values` whose key is that node, in row order:
// segment sums over the rows ordered by key (a stable sort unless they are already).
torch::Tensor sum_by_key(const torch::Tensor &values, const torch::Tensor &keys, bool sorted, int64_t nodes)
{
  torch::Tensor ordered_keys = keys, ordered = values;
  if (!sorted) {
    // 32-bit keys: half the radix passes of int64 on CUDA (node indices fit)
    auto [k, perm] = torch::sort(keys.to(torch::kInt32), /*stable=*/true, /*dim=*/0, /*descending=*/false);
    ordered_keys = k;
    ordered = values.index_select(0, perm);
  }
  torch::Tensor offsets =
      torch::searchsorted(ordered_keys, torch::arange(nodes + 1, ordered_keys.options()), /*out_int32=*/false);
  return at::segment_reduce(ordered, "sum", /*lengths=*/{}, /*indices=*/{}, offsets, /*axis=*/0,
                            /*unsafe=*/true, /*initial=*/0.0);
}

}    // namespace

NodeSums sum_per_node(const EdgeGradients &edges, const torch::Tensor &vec64, bool global_virial,
                      bool node_virial)
{
  at::NoGradGuard no_grad;
  NodeSums out;
  const bool virial = global_virial || node_virial;
  const int64_t nodes = edges.nodes;
  const int64_t width = node_virial ? 9 : 3;
  if (!edges.grad.defined() || edges.grad.size(0) == 0 || nodes == 0) {
    out.rows = torch::zeros({nodes, width}, torch::TensorOptions().dtype(torch::kFloat64));
    return out;
  }
  // No torch operation on the host below this line other than the copy: a parallel one (a fill of
  // the rows, say) would leave torch's OpenMP threads spinning into the next step's edge loop (session
  // 36: the edge loop 1.5x slower).

  // per edge: g_e, then -edge_vec (x) g_e in Voigt order xx yy zz xy xz yz
  torch::Tensor g = edges.grad.detach().to(torch::kFloat64);
  torch::Tensor terms = g;
  if (virial) {
    torch::Tensor r = vec64.detach();
    auto col = [](const torch::Tensor &t, int k) { return t.select(1, k); };
    terms = torch::cat({g, -torch::stack({col(r, 0) * col(g, 0), col(r, 1) * col(g, 1), col(r, 2) * col(g, 2),
                                          col(r, 0) * col(g, 1), col(r, 0) * col(g, 2), col(r, 1) * col(g, 2)},
                                         1)},
                       1);
  }
  torch::Tensor in = sum_by_key(terms, edges.dst, edges.dst_sorted, nodes);
  torch::Tensor from = sum_by_key(terms, edges.src, false, nodes);
  // [nodes, width (+ 6)]: the force (+ at the receiver, - at the sender), the per-node virial (half
  // of each edge's to each end), then the virial over each node's incoming edges, for the total
  std::vector<torch::Tensor> columns{in.narrow(1, 0, 3) - from.narrow(1, 0, 3)};
  if (node_virial) columns.push_back(0.5 * (in.narrow(1, 3, 6) + from.narrow(1, 3, 6)));
  if (global_virial) columns.push_back(in.narrow(1, 3, 6));
  torch::Tensor device_rows = torch::cat(columns, 1);
  torch::Tensor host_rows = torch::empty(device_rows.sizes(), torch::TensorOptions()
                                                                  .dtype(torch::kFloat64)
                                                                  .pinned_memory(device_rows.is_cuda()));
  host_rows.copy_(device_rows);
  out.rows = host_rows.narrow(1, 0, width);

  // the total on the host, in node order (a torch reduction's order may depend on its thread count)
  if (global_virial) {
    const double *s = host_rows.data_ptr<double>() + width;
    const int64_t stride = host_rows.size(1);
    for (int64_t n = 0; n < nodes; n++)
      for (int k = 0; k < 6; k++) out.virial[k] += s[stride * n + k];
  }
  return out;
}

}    // namespace md_accel_lammps
