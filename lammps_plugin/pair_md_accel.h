/* -*- c++ -*- ----------------------------------------------------------
   md_accel: LAMMPS pair style for md_accel message-passing potentials.

   pair_style md_accel [device auto|cpu|cuda]
   pair_coeff * * model.mdx El1 [El2 ...]

   The model file is a TorchScript archive whose extra file md_accel.json
   names the elements, the cutoff and the number of message-passing layers.
   Multi-rank runs use a ghost shell num_layers x cutoff (+ skin) deep: every
   owned and ghost atom is a graph node, only owned atoms' energies count.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MD_ACCEL_H
#define LMP_PAIR_MD_ACCEL_H

#include "pair.h"

#include <torch/script.h>

#include <string>
#include <vector>

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

 protected:
  enum DeviceChoice { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };

  void allocate();
  int build_graph();
  void load_model(const std::string &filename);
  torch::Device pick_device() const;

  DeviceChoice device_choice;
  torch::Device device;
  torch::Dtype dtype;
  torch::jit::Module model;
  bool model_loaded;

  std::vector<std::string> elements;    // model species index -> symbol
  double cutoff;                        // model cutoff (Angstrom)
  int num_layers;                       // message-passing depth
  std::vector<int64_t> type2species;    // LAMMPS type (1-based) -> species

  // per-step graph: edges by LAMMPS atom index (receiver i = dst, sender
  // j = src) and by graph node index; species per graph node
  std::vector<int64_t> edge_src, edge_dst, node_src, node_dst, species;
  std::vector<double> edge_vec;
  std::vector<int64_t> node_of;           // LAMMPS atom index -> graph node or -1
  std::vector<char> reached, grown;       // atoms within k hops of an owned atom
};

}    // namespace LAMMPS_NS

#endif
