"""The plugin's CUDA-graph layout (lammps_plugin/graph_layout.h) is md_accel/step.py's Layout written
again in C++: compiled here with g++ (no torch, no CUDA), it must give the same capacities, edge range,
fits(), padding nodes and graph-size limit as the Python calculator, for graphs from a few atoms to a
million edges."""
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from md_accel.step import AUTO_MAX_EDGES, Layout, PaddedGraph

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = r"""
#include "graph_layout.h"
#include <cstdio>
using md_accel_lammps::GraphLayout;
int main() {
  std::printf("%lld\n", (long long) GraphLayout::AUTO_MAX_EDGES);
  long long n, e;
  while (std::scanf("%lld %lld", &n, &e) == 2) {
    const GraphLayout l = GraphLayout::for_graph(n, e);
    std::printf("%lld %lld %lld %lld %d %d %d", (long long) l.num_nodes, (long long) l.node_capacity,
                (long long) l.edge_capacity, (long long) l.min_edges, (int) l.fits(n, e),
                (int) l.fits(n, l.edge_capacity + 1), (int) l.fits(n, l.min_edges - 1));
    for (long long s = 0; s < l.edge_capacity; s++) std::printf(" %lld", (long long) l.padding_node(s));
    std::printf("\n");
  }
}
"""


@pytest.fixture(scope="module")
def layout_program(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not found")
    d = tmp_path_factory.mktemp("graph_layout")
    (d / "main.cpp").write_text(PROGRAM)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'lammps_plugin'}", str(d / "main.cpp"), "-o",
                    str(d / "layout")], check=True)
    return d / "layout"


def test_layouts_match_step_py(layout_program):
    rng = np.random.default_rng(0)
    graphs = [(1, 0), (1, 1), (2, 7), (32, 32), (33, 1000), (108, 4536), (864, 36288), (4000, 168000)]
    graphs += [(int(n), int(n * d)) for n, d in zip(rng.integers(1, 20000, 30), rng.uniform(0, 80, 30))]
    graphs.append((25000, 1_000_000))
    out = subprocess.run([str(layout_program)], input="".join(f"{n} {e}\n" for n, e in graphs), text=True,
                         capture_output=True, check=True).stdout.splitlines()
    assert int(out.pop(0)) == AUTO_MAX_EDGES   # cuda_graph auto's limit, the calculator's
    assert len(out) == len(graphs)
    for (n, e), line in zip(graphs, out):
        nodes, n_cap, e_cap, e_min, fits, above, below, *pad = map(int, line.split())
        want = Layout.for_graph(n, e)
        assert (nodes, n_cap, e_cap, e_min) == (want.num_nodes, want.node_capacity, want.edge_capacity,
                                                want.min_edges), (n, e)
        assert fits == 1 and above == 0 and below == int(want.fits(n, want.min_edges - 1))
        if e_cap <= 200_000:  # the padding nodes of every slot, as PaddedGraph assigns them
            padded = PaddedGraph(want, 5.0, torch.float64, torch.device("cpu"))
            assert pad == padded._pad_node.tolist(), (n, e)
