/* -*- c++ -*- ----------------------------------------------------------
   md_accel: LAMMPS pair style for md_accel message-passing potentials.

   pair_style md_accel [device auto|cpu|cuda] [comm auto|none|layer|shell]
                       [recompute yes|no] [cuda_graph auto|yes|no]
                       [exchange auto|host|device]
   pair_coeff * * model.mdx El1 [El2 ...]

   The model file is a TorchScript archive whose extra file md_accel.json
   names the elements, the cutoff and the number of message-passing layers.
   comm none (default on one MPI rank, needs one rank): every ghost atom is
   a periodic image of an owned atom; the graph joins owned atoms directly
   (an edge from a ghost starts at its owner, with the ghost's vector), so
   nothing is exchanged and no ghost is a graph node.
   comm layer (default on several ranks when the model exports the layered
   interface): a one-cutoff ghost shell, ghost atoms' features exchanged
   after every layer and their gradients sent back to the owners.
   comm shell: a ghost shell num_layers x cutoff (+ skin) deep, every owned
   and ghost atom a graph node.
   exchange (comm layer): how ghost rows travel between layers. device:
   the ranks' GPUs read each other's rows (CUDA IPC; every rank on one
   host), host: through LAMMPS' communication in host memory; auto: device
   where it works, else host (the log says which and why).
   recompute yes (comm layer): keep no layer's autograd graph in the forward
   pass, run each layer again in the backward pass (memory of one layer's
   graph instead of all, for about one more forward pass of time).
   cuda_graph (comm none on CUDA): the evaluation replayed from a CUDA graph
   (cuda_graph_step.h); auto: for graphs of at most 300,000 edges (larger
   steps are bound by the GPU, not by launches), yes: at every size.
   The scheme is described at the top of pair_md_accel.cpp.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MD_ACCEL_H
#define LMP_PAIR_MD_ACCEL_H

#include "pair.h"

#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "edge_collector.h"
#include "graph_upload.h"
#include "host_threads.h"
#include "node_sums.h"
#include "phase_timer.h"

#ifdef MD_ACCEL_CUDA_GRAPH
#include "cuda_graph_step.h"
#include "device_exchange.h"
#endif

namespace LAMMPS_NS {

class PairMDAccel : public Pair {
 public:
  PairMDAccel(class LAMMPS *);
  ~PairMDAccel() override;

  void compute(int, int) override;
  void settings(int, char **) override;
  void coeff(int, char **) override;
  void init_style() override;
  double init_one(int, int) override;

  int pack_forward_comm(int, int *, double *, int, int *) override;
  void unpack_forward_comm(int, int, double *) override;
  int pack_reverse_comm(int, int, double *) override;
  void unpack_reverse_comm(int, int *, double *) override;

 protected:
  enum DeviceChoice { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };
  enum CommChoice { COMM_AUTO, COMM_NONE, COMM_LAYER, COMM_SHELL };
  enum CommPhase { PHASE_FIND_BORDER, PHASE_OWNERS, PHASE_ROWS };
  enum GraphChoice { GRAPH_AUTO, GRAPH_YES, GRAPH_NO };
  enum ExchangeChoice { EXCHANGE_AUTO, EXCHANGE_HOST, EXCHANGE_DEVICE };

  void allocate();
  void load_model(const std::string &filename);
  torch::Device pick_device() const;

  using EdgeGradients = md_accel_lammps::EdgeGradients;
  void evaluate_graph(int64_t num_owned, torch::Tensor &node_e, EdgeGradients &edges);
  void collect_edges(const int *receivers, int count);
  void build_receiver_graph(bool senders_to_owners);
  // comm none
  void find_owners();
  void compute_images(torch::Tensor &node_e, EdgeGradients &edges);
  bool use_cuda_graph(int64_t num_edges);
  // comm shell
  void build_shell_graph();
  void compute_shell(torch::Tensor &node_e, EdgeGradients &edges);
  // comm layer
  void find_border_atoms();
  void choose_exchange();
  bool exchange_on_device() const;
  void compute_layers(torch::Tensor &node_e, EdgeGradients &edges);
  torch::Tensor rows_view(int width);
  torch::Tensor staging_view(int64_t rows, int width);
  torch::Tensor fill_ghost_rows(const torch::Tensor &h_owned, int width, int layer);
  torch::Tensor add_ghost_gradients(const torch::Tensor &g, int width, int layer);

  torch::Tensor edge_vectors_f64(const torch::Tensor &model_vec) const;
  void tally(const torch::Tensor &node_e, const md_accel_lammps::NodeSums &sums);
  void report_sizes();
  void report_timing();
  void wait_for_ranks_if_timed();

  DeviceChoice device_choice;
  CommChoice comm_choice;
  CommChoice comm_mode;                 // resolved for this run (never COMM_AUTO after init_style)
  GraphChoice graph_choice;
  ExchangeChoice exchange_choice;
  bool exchange_chosen;                 // comm layer: choose_exchange() ran for this run
  torch::Device device;
  torch::Dtype dtype;
  torch::jit::Module model;
  bool model_loaded;
  bool layered_model;                   // exports the layered interface
  bool report_pending;

  std::vector<std::string> elements;    // model species index -> symbol
  double cutoff;                        // model cutoff (Angstrom)
  int num_layers;                       // message-passing depth
  std::vector<int64_t> feature_dims;    // widths of h_0 .. h_L (layered models)
  std::vector<int64_t> type2species;    // LAMMPS type (1-based) -> species

  // per-step graph: edges by LAMMPS atom index (receiver i = dst, sender
  // j = src) and by graph node index; species per graph node
  std::vector<int64_t> edge_src, edge_dst, node_src, node_dst, species;
  std::vector<double> edge_vec;
  md_accel_lammps::EdgeCollector edge_collector;    // LAMMPS' list -> edge_src/dst/vec
  md_accel_lammps::GraphUpload graph_upload;        // species, node_src/dst, edge_vec -> the device
  std::vector<int64_t> node_of;           // LAMMPS atom index -> graph node or -1
  std::vector<char> reached, grown;       // comm shell: atoms within k hops of an owned atom

  // graph nodes are the owned atoms (node i = atom i), then ghost atoms
  // (ghost_atoms[node - nlocal]; comm none: none)
  std::vector<int64_t> ghost_atoms;
  std::vector<int64_t> border_atoms;      // owned atoms in some send list
  std::vector<char> border_mark;
  bool send_lists_known;                  // border_atoms / owner_of found since the last build
  // comm none, exchange device: LAMMPS atom index -> its owner's rank and its row there (find_owners)
  std::vector<int64_t> owner_of;
  std::vector<int> owner_rank;
#ifdef MD_ACCEL_CUDA_GRAPH
  std::unique_ptr<md_accel_lammps::CudaGraphStep> graphed;
  std::unique_ptr<md_accel_lammps::DeviceExchange> exchange;   // exchange device
#endif
  torch::Tensor t_ghost_atoms, t_border_cpu, t_border_dev;
  torch::Tensor comm_rows;                // host rows [nall, width] packed / unpacked
  torch::Tensor staging;                  // host (pinned on CUDA) transfer buffer
  CommPhase comm_phase;
  size_t comm_row_bytes;                  // bytes of one row of the current exchange
  int comm_stride;                        // doubles per row in LAMMPS' comm buffers
  bool recompute;                         // comm layer: redo each layer in the backward pass
  md_accel_lammps::PhaseTimer timer;      // MD_ACCEL_LAMMPS_TIMING=1: time per phase, per run
};

}    // namespace LAMMPS_NS

#endif
