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
    auto [k, perm] = torch::sort(keys, /*stable=*/true, /*dim=*/0, /*descending=*/false);
    ordered_keys = k;
    ordered = values.index_select(0, perm);
  }
  torch::Tensor offsets = torch::searchsorted(ordered_keys, torch::arange(nodes + 1, keys.options()));
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
  const int64_t terms_per_edge = virial ? 9 : 3;
  const int64_t nodes = edges.nodes;
  out.rows = torch::zeros({nodes, node_virial ? 9 : 3}, torch::TensorOptions().dtype(torch::kFloat64));
  if (!edges.grad.defined() || edges.grad.size(0) == 0 || nodes == 0) return out;

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
  // [nodes, 2 x terms]: the sums over each node's incoming edges, then over its outgoing ones
  torch::Tensor sums = torch::cat({sum_by_key(terms, edges.dst, edges.dst_sorted, nodes),
                                   sum_by_key(terms, edges.src, false, nodes)},
                                  1)
                           .cpu()
                           .contiguous();

  // on the host, in node order (a torch reduction's order may depend on its thread count)
  const double *s = sums.data_ptr<double>();
  double *rows = out.rows.data_ptr<double>();
  const int64_t width = out.rows.size(1);
  for (int64_t n = 0; n < nodes; n++) {
    const double *in = s + 2 * terms_per_edge * n, *from = in + terms_per_edge;
    double *row = rows + width * n;
    for (int k = 0; k < 3; k++) row[k] = in[k] - from[k];
    if (node_virial)
      for (int k = 0; k < 6; k++) row[3 + k] = 0.5 * (in[3 + k] + from[3 + k]);
    if (global_virial)
      for (int k = 0; k < 6; k++) out.virial[k] += in[3 + k];    // every edge has one receiver
  }
  return out;
}

}    // namespace md_accel_lammps
