/* -*- c++ -*- ----------------------------------------------------------
   md_accel: the sizes of one captured step (pair_style md_accel's CUDA
   graph), md_accel/step.py's Layout written again in C++: the same ladder
   (multiples of 32, each rung >= 1.25x the last), the same edge range with
   its hysteresis and the same padding nodes, so that the plugin pads a
   graph exactly as the Python calculator does. tests/lammps/
   test_graph_layout.py compiles this header and checks it against step.py.
   Header-only, no torch: the CPU tests compile it without CUDA.
------------------------------------------------------------------------- */

#ifndef LMP_MD_ACCEL_GRAPH_LAYOUT_H
#define LMP_MD_ACCEL_GRAPH_LAYOUT_H

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace md_accel_lammps {

struct GraphLayout {
  static constexpr double GROWTH = 1.25;
  static constexpr int64_t ALIGN = 32;
  static constexpr int64_t PAD_DEGREE = 4;    // a padding node receives <= ~4x the mean degree
  // cuda_graph auto: larger graphs run uncaptured (bound by the GPU, not by launches)
  static constexpr int64_t AUTO_MAX_EDGES = 300000;

  int64_t num_nodes = 0, node_capacity = 0, edge_capacity = 0, min_edges = 0;

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

  // smallest rung >= n of the ladder 32, 64, ..., c_{k+1} = roundup32(ceil(GROWTH c_k))
  static int64_t capacity(int64_t n)
  {
    int64_t c = ALIGN;
    while (c < n) {
      auto grown = static_cast<int64_t>(std::ceil(static_cast<double>(c) * GROWTH));
      c = std::max(c + ALIGN, ceil_div(grown, ALIGN) * ALIGN);
    }
    return c;
  }

  static GraphLayout for_graph(int64_t num_nodes, int64_t num_edges)
  {
    GraphLayout l;
    l.num_nodes = num_nodes;
    l.edge_capacity = capacity(num_edges);
    l.min_edges = std::min(
        static_cast<int64_t>(static_cast<double>(l.edge_capacity) / (GROWTH * GROWTH)), num_edges);
    const int64_t degree =
        PAD_DEGREE * std::max<int64_t>(1, ceil_div(num_edges, std::max<int64_t>(num_nodes, 1)));
    const int64_t pad_nodes = std::max<int64_t>(1, ceil_div(l.edge_capacity - l.min_edges, degree));
    l.node_capacity = capacity(num_nodes + pad_nodes);
    return l;
  }

  // serves exactly num_nodes nodes and min_edges..edge_capacity edges
  bool fits(int64_t n, int64_t e) const { return n == num_nodes && min_edges <= e && e <= edge_capacity; }

  // the padding node of edge slot `slot` (>= the real edge count): non-decreasing in the slot,
  // spread evenly over the padding nodes
  int64_t padding_node(int64_t slot) const
  {
    return num_nodes + std::max<int64_t>(slot - min_edges, 0) * (node_capacity - num_nodes) /
        std::max<int64_t>(edge_capacity - min_edges, 1);
  }
};

}    // namespace md_accel_lammps

#endif
