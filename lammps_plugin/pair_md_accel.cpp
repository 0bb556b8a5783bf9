/* ----------------------------------------------------------------------
   md_accel pair style: see pair_md_accel.h for the input syntax.

   Forces and virial come from the gradient g_e = dE/d(edge_vec_e) of the
   energy of the owned atoms, edge_vec_e = x[src] - x[dst]:
     F[src] -= g_e, F[dst] += g_e   (ghost forces are reverse-communicated)
     W      -= edge_vec_e (x) g_e   (per-atom: half to each end of the edge)
   summed per graph node on the model's device (node_sums.h), one row per
   node added on the host into its atom.

   comm none (one rank): the ghost shell is cutoff + skin deep and every
   ghost is a periodic image of an owned atom (owner_of, found by a width-2
   forward_comm after each neighbor-list build). The graph's nodes are the
   owned atoms; an edge from ghost j to owned i joins owner_of[j] to i with
   the vector x[j] - x[i], as a periodic graph in ASE does, and its force
   goes on owner_of[j]'s node. On CUDA the evaluation
   can be replayed from a CUDA graph (cuda_graph_step.h).

   comm shell: the ghost shell is num_layers x cutoff (+ skin) deep; the
   graph holds every edge into an atom at most num_layers-1 hops from an
   owned atom; node_energies runs on it and the owned rows are summed.

   comm layer: the ghost shell is cutoff + skin deep, the graph holds the
   edges into owned atoms only (full neighbor list; ghosts are senders).
   Graph nodes: owned atoms (node i = atom i), then the ghost senders. With
   the model's layered interface (md_accel/model/potential.py):
     x_0 = embed(species) on all nodes (exact: ghosts' species are known)
     h_{k+1} = interaction(k, x_k), exact on owned rows; for k+1 < L the
       ghost rows are replaced by their owners' rows: owned rows that LAMMPS
       sends (border atoms) go to a host array, forward_comm (pack/unpack_
       forward_comm; a row travels as its raw bytes) fills its ghost rows,
       periodic self-images included, the ghost nodes' rows go back: x_{k+1},
       a new autograd leaf. x_L = h_L (the readout reads owned rows only).
     E = sum over owned rows of readout_energies(x_1 .. x_L, edge features);
       the edge features are leaves as well, shared by all layers.
   Backward, k = L .. 1: dE/dx_k (from the readout and from layer k's
   backward) has ghost rows for k < L; reverse_comm (pack/unpack_reverse_
   comm) sums them into their owners, and the owned rows are the incoming
   gradient of h_k for the backward of interaction k-1 (its ghost rows: 0).
   The edge features' gradients, summed over layers, go through
   edge_features' backward once: dE/d(edge_vec). Ghost features are
   copies of their owners', so this is the exact gradient of the total
   energy, as in comm shell. Every rank, one without atoms too, makes the
   same L-1 forward and L-1 reverse comm calls; after every neighbor-list
   build one forward_comm of width 1 records which owned atoms are sent.
   recompute yes: the forward pass runs the layers without autograd; each
   runs again (from the kept x_k) just before its backward.
   exchange device (all ranks on one host, CUDA): the ghost rows and their
   gradients do not pass through LAMMPS' buffers; each GPU reads them from
   the owners' GPUs (device_exchange.h), the owners sum the gradients of
   their atoms' ghost copies in a fixed order.
------------------------------------------------------------------------- */

#include "pair_md_accel.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "exceptions.h"
#include "force.h"
#include "json.h"
#include "memory.h"
#include "neigh_list.h"
#include "neighbor.h"
#include "update.h"
#include "utils.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>

#include <mpi.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <unordered_map>

using namespace LAMMPS_NS;

namespace {

constexpr const char *OPS_ENV = "MD_ACCEL_OPS_LIBRARY";
constexpr const char *OPS_NEXT_TO_PLUGIN = "libmd_accel_ops.so";

// Custom torch ops must be registered before a model naming them is loaded.
// Libraries listed (':'-separated) in MD_ACCEL_OPS_LIBRARY must load; the one
// next to this plugin (lammps_plugin/build.py puts the CPU part of the ops
// there for a CPU-only torch) is loaded when present and the ops are not
// registered yet. Returns an error text or "".
std::string load_ops_libraries()
{
  static bool done = false;
  static std::string failure;
  if (done) return failure;
  done = true;

  if (const char *env = std::getenv(OPS_ENV)) {
    std::istringstream paths(env);
    std::string path;
    while (std::getline(paths, path, ':')) {
      if (path.empty()) continue;
      if (!dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
        failure = "cannot load " + path + " (from " + OPS_ENV + "): " + dlerror();
        return failure;
      }
    }
  }

  // not when the ops are registered already (e.g. LAMMPS inside a Python process that
  // imported md_accel): a second registration of the namespace aborts
  bool registered =
      c10::Dispatcher::singleton().findSchema({"md_accel::tp_conv_fwd", ""}).has_value();
  Dl_info info;
  if (!registered && dladdr(reinterpret_cast<void *>(&load_ops_libraries), &info) &&
      info.dli_fname) {
    auto candidate = std::filesystem::path(info.dli_fname).parent_path() / OPS_NEXT_TO_PLUGIN;
    if (std::filesystem::exists(candidate) && !dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      failure = "cannot load " + candidate.string() + ": " + dlerror();
    }
  }
  return failure;
}

// The layered interface (md_accel.model.potential.Potential) that comm layer calls.
constexpr const char *LAYERED_METHODS[] = {"feature_dims", "edge_features", "embed",
                                           "interaction", "readout_energies", "receiver_graph"};

// Comm buffers are doubles; a feature row (width values of the model's dtype)
// travels as its raw bytes in the fewest doubles that hold them (a float32
// row of 480 values: 240 doubles), unconverted.
int row_doubles(int64_t width, torch::Dtype dtype)
{
  return static_cast<int>((width * static_cast<int64_t>(c10::elementSize(dtype)) + 7) / 8);
}

template <typename T>
void add_rows(char *rows, size_t row_bytes, int n, const int *list, const double *buf, int stride)
{
  const size_t width = row_bytes / sizeof(T);
  std::vector<T> in(width);
  for (int i = 0; i < n; i++) {
    std::memcpy(in.data(), buf + static_cast<int64_t>(i) * stride, row_bytes);
    T *row = reinterpret_cast<T *>(rows + static_cast<size_t>(list[i]) * row_bytes);
    for (size_t c = 0; c < width; c++) row[c] += in[c];
  }
}

torch::Tensor long_tensor(std::vector<int64_t> &v)
{
  return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())},
                          torch::TensorOptions().dtype(torch::kInt64));
}

}    // namespace

/* ---------------------------------------------------------------------- */

PairMDAccel::PairMDAccel(LAMMPS *lmp) :
    Pair(lmp), device_choice(DEVICE_AUTO), comm_choice(COMM_AUTO), comm_mode(COMM_AUTO),
    graph_choice(GRAPH_AUTO), exchange_choice(EXCHANGE_AUTO), exchange_chosen(false), device(torch::kCPU),
    dtype(torch::kFloat64), model_loaded(false),
    layered_model(false), report_pending(false), cutoff(0.0), num_layers(0),
    edge_collector(md_accel_lammps::host_threads()), graph_upload(md_accel_lammps::host_threads()),
    send_lists_known(false),
    comm_phase(PHASE_ROWS), comm_row_bytes(0), comm_stride(0), recompute(false)
{
  single_enable = 0;
  restartinfo = 0;
  one_coeff = 1;
  manybody_flag = 1;
  ghostneigh = 1;
  no_virial_fdotr_compute = 1;
  comm_forward = comm_reverse = 0;
}

PairMDAccel::~PairMDAccel()
{
  report_timing();
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
    memory->destroy(cutghost);
  }
}

void PairMDAccel::allocate()
{
  allocated = 1;
  int n = atom->ntypes + 1;
  memory->create(setflag, n, n, "pair:setflag");
  memory->create(cutsq, n, n, "pair:cutsq");
  memory->create(cutghost, n, n, "pair:cutghost");
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) setflag[i][j] = 0;
}

/* ----------------------------------------------------------------------
   pair_style md_accel [device auto|cpu|cuda] [comm auto|none|layer|shell]
                       [recompute yes|no] [cuda_graph auto|yes|no]
                       [exchange auto|host|device]
   (the enums list their values in this order)
------------------------------------------------------------------------- */

void PairMDAccel::settings(int narg, char **arg)
{
  // the value after keyword arg[iarg], as its index among `values` (an error names them otherwise)
  auto value_of = [&](int iarg, const std::vector<std::string> &values) {
    const std::string keyword = arg[iarg];
    if (iarg + 2 > narg) utils::missing_cmd_args(FLERR, "pair_style md_accel " + keyword, error);
    auto it = std::find(values.begin(), values.end(), std::string(arg[iarg + 1]));
    if (it == values.end())
      error->all(FLERR, "Unknown pair_style md_accel {} {} ({})", keyword, arg[iarg + 1],
                 utils::join_words(values, ", "));
    return static_cast<int>(it - values.begin());
  };
  // a pair_style line again starts from the defaults
  device_choice = DEVICE_AUTO;
  comm_choice = COMM_AUTO;
  graph_choice = GRAPH_AUTO;
  exchange_choice = EXCHANGE_AUTO;
  recompute = false;
  for (int iarg = 0; iarg < narg; iarg += 2) {
    if (strcmp(arg[iarg], "device") == 0)
      device_choice = static_cast<DeviceChoice>(value_of(iarg, {"auto", "cpu", "cuda"}));
    else if (strcmp(arg[iarg], "comm") == 0)
      comm_choice = static_cast<CommChoice>(value_of(iarg, {"auto", "none", "layer", "shell"}));
    else if (strcmp(arg[iarg], "recompute") == 0) {
      if (iarg + 2 > narg) utils::missing_cmd_args(FLERR, "pair_style md_accel recompute", error);
      recompute = utils::logical(FLERR, arg[iarg + 1], false, lmp) == 1;
    } else if (strcmp(arg[iarg], "cuda_graph") == 0)
      graph_choice = static_cast<GraphChoice>(value_of(iarg, {"auto", "yes", "no"}));
    else if (strcmp(arg[iarg], "exchange") == 0)
      exchange_choice = static_cast<ExchangeChoice>(value_of(iarg, {"auto", "host", "device"}));
    else
      error->all(FLERR, "Unknown pair_style md_accel keyword {}", arg[iarg]);
  }
}

/* ----------------------------------------------------------------------
   CUDA when available (one GPU per rank: node-local rank modulo GPU count)
------------------------------------------------------------------------- */

torch::Device PairMDAccel::pick_device() const
{
  bool cuda = torch::cuda::is_available();
  if (device_choice == DEVICE_CPU || (device_choice == DEVICE_AUTO && !cuda))
    return torch::Device(torch::kCPU);
  if (!cuda) error->all(FLERR, "pair_style md_accel device cuda: torch sees no CUDA device");

  MPI_Comm node_comm;
  int local_rank = 0;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, comm->me, MPI_INFO_NULL, &node_comm);
  MPI_Comm_rank(node_comm, &local_rank);
  MPI_Comm_free(&node_comm);
  int ngpu = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % ngpu));
}

/* ----------------------------------------------------------------------
   read the TorchScript archive and its md_accel.json header
------------------------------------------------------------------------- */

void PairMDAccel::load_model(const std::string &filename)
{
  std::string ops_error = load_ops_libraries();
  if (!ops_error.empty()) error->all(FLERR, "pair_style md_accel: {}", ops_error);

  device = pick_device();
  // TorchScript's profiling executor re-specialises its fused kernels for new shapes, and the
  // edge count changes every step: with it, SevenNet-0's comm layer step at 32,000 atoms per
  // H200 took 528 ms, without it 380 (the edge features and their backward 132 -> 13 ms,
  // docs/benchmarks.md, session 34). md_accel's own ops do the heavy work either way.
  torch::jit::setGraphExecutorOptimize(false);
  std::unordered_map<std::string, std::string> extra{{"md_accel.json", ""}};
  try {
    model = torch::jit::load(filename, device, extra);
  } catch (const std::exception &e) {
    error->all(FLERR, "pair_style md_accel: cannot load model file {}: {}", filename, e.what());
  }
  model.eval();
  // only dE/d(edge_vec) is wanted: weights that require grad would make autograd keep what
  // their gradients need
  for (auto param : model.parameters()) param.requires_grad_(false);

  const std::string &header = extra["md_accel.json"];
  if (header.empty())
    error->all(FLERR, "pair_style md_accel: {} has no md_accel.json (not an md_accel model file)",
               filename);
  try {
    auto meta = json::parse(header);
    if (meta.at("format").get<std::string>() != "md_accel")
      error->all(FLERR, "pair_style md_accel: {} is not an md_accel model file", filename);
    int version = meta.at("format_version").get<int>();
    if (version < 1 || version > 3)
      error->all(FLERR, "pair_style md_accel: {} has format_version {}, this plugin reads 1 to 3",
                 filename, version);
    elements = meta.at("elements").get<std::vector<std::string>>();
    cutoff = meta.at("cutoff").get<double>();
    num_layers = meta.at("num_layers").get<int>();
    std::string dt = meta.at("dtype").get<std::string>();
    if (dt == "float64")
      dtype = torch::kFloat64;
    else if (dt == "float32")
      dtype = torch::kFloat32;
    else
      error->all(FLERR, "pair_style md_accel: unsupported model dtype {}", dt);
  } catch (const json::exception &e) {
    error->all(FLERR, "pair_style md_accel: bad md_accel.json in {}: {}", filename, e.what());
  }
  if (cutoff <= 0.0 || num_layers < 1)
    error->all(FLERR, "pair_style md_accel: model needs cutoff > 0 and num_layers >= 1");
  if (!model.find_method("node_energies"))
    error->all(FLERR, "pair_style md_accel: model in {} has no node_energies method", filename);

  layered_model = true;
  for (const char *name : LAYERED_METHODS)
    if (!model.find_method(name)) layered_model = false;
  if (layered_model) feature_dims = model.run_method("feature_dims").toIntVector();
  model_loaded = true;
#ifdef MD_ACCEL_CUDA_GRAPH
  graphed.reset();    // captured with the previous model
#endif

  if (comm->me == 0)
    utils::logmesg(lmp,
                   "md_accel: {} ({} elements, cutoff {} A, {} layers, {}) on {}\n", filename,
                   elements.size(), cutoff, num_layers,
                   dtype == torch::kFloat64 ? "float64" : "float32", device.str());
}

/* ----------------------------------------------------------------------
   pair_coeff * * model.mdx El1 El2 ... (one element per atom type)
------------------------------------------------------------------------- */

void PairMDAccel::coeff(int narg, char **arg)
{
  if (!allocated) allocate();
  int ntypes = atom->ntypes;
  if (narg != 3 + ntypes)
    error->all(FLERR,
               "pair_coeff md_accel needs: * * model_file followed by one element per atom type "
               "({} types)",
               ntypes);
  if (strcmp(arg[0], "*") != 0 || strcmp(arg[1], "*") != 0)
    error->all(FLERR, "pair_coeff md_accel must use * * as atom types");

  load_model(arg[2]);

  type2species.assign(ntypes + 1, -1);
  for (int t = 1; t <= ntypes; t++) {
    std::string symbol = arg[2 + t];
    auto it = std::find(elements.begin(), elements.end(), symbol);
    if (it == elements.end())
      error->all(FLERR, "pair_coeff md_accel: element {} (atom type {}) is not in model {} "
                 "(elements: {})", symbol, t, arg[2], utils::join_words(elements, " "));
    type2species[t] = static_cast<int64_t>(it - elements.begin());
  }
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++) setflag[i][j] = 1;
}

/* ---------------------------------------------------------------------- */

void PairMDAccel::init_style()
{
  if (!model_loaded) error->all(FLERR, "pair_style md_accel: no pair_coeff with a model file");
  if (strcmp(update->unit_style, "metal") != 0)
    error->all(FLERR, "pair_style md_accel requires 'units metal'");
  if (force->newton_pair == 0) error->all(FLERR, "pair_style md_accel requires newton pair on");
  if (comm->mode != Comm::SINGLE)
    error->all(FLERR, "pair_style md_accel requires comm_modify mode single");
  if (comm_choice == COMM_LAYER && !layered_model)
    error->all(FLERR, "pair_style md_accel comm layer: the model does not export the layered "
               "interface (feature_dims, edge_features, embed, interaction, readout_energies, "
               "receiver_graph); convert it again with this md_accel or use comm shell");
  const bool one_rank = comm->nprocs == 1;
  comm_mode = comm_choice;
  const char *why = "requested";
  if (comm_choice == COMM_AUTO) {
    comm_mode = one_rank && !recompute ? COMM_NONE : layered_model ? COMM_LAYER : COMM_SHELL;
    why = comm_mode == COMM_NONE ? "one MPI rank"
        : layered_model          ? "the model exports the layered interface"
                                 : "the model has no layered interface";
  }
  if (comm_mode == COMM_NONE && !one_rank)
    error->all(FLERR, "pair_style md_accel comm none needs one MPI rank (its ghost atoms must be "
               "images of owned atoms); use comm layer or comm shell on {} ranks", comm->nprocs);
  if (recompute && comm_mode != COMM_LAYER)
    error->all(FLERR, "pair_style md_accel recompute yes needs comm layer");
  if (exchange_choice == EXCHANGE_DEVICE && comm_mode != COMM_LAYER)
    error->all(FLERR, "pair_style md_accel exchange device needs comm layer");
  exchange_chosen = false;
#ifdef MD_ACCEL_CUDA_GRAPH
  exchange.reset();
#endif
  if (graph_choice == GRAPH_YES) {
    if (comm_mode != COMM_NONE)
      error->all(FLERR, "pair_style md_accel cuda_graph yes needs comm none (one MPI rank)");
    if (!device.is_cuda())
      error->all(FLERR, "pair_style md_accel cuda_graph yes needs the model on CUDA (device {})",
                 device.str());
#ifndef MD_ACCEL_CUDA_GRAPH
    error->all(FLERR, "pair_style md_accel cuda_graph yes: this plugin was built without CUDA "
               "graphs (against a torch without CUDA)");
#endif
  }
  send_lists_known = false;
  report_pending = true;
  report_timing();    // the previous run's
  const char *timing = std::getenv("MD_ACCEL_LAMMPS_TIMING");
  timer.enable(timing != nullptr && std::strcmp(timing, "1") == 0, device.is_cuda() ? device.index() : -1);

  if (comm_mode == COMM_NONE) {
    // one-cutoff ghosts; one forward_comm of width 1 after every neighbor-list build
    // records each ghost's owned atom
    ghostneigh = 0;
    neighbor->add_request(this, NeighConst::REQ_FULL);
    comm_forward = 2;   // find_owners
    comm_reverse = 0;
    if (comm->me == 0)
      utils::logmesg(lmp, "md_accel: comm none ({}): ghost atoms within cutoff + skin, edges from "
                     "them start at their owned atoms{}\n", why,
                     use_cuda_graph(0) ? "; the evaluation replayed from a CUDA graph" : "");
    return;
  }

  if (comm_mode == COMM_LAYER) {
    bool ok = static_cast<int>(feature_dims.size()) == num_layers + 1;
    for (int64_t d : feature_dims) ok = ok && d > 0;
    if (!ok)
      error->all(FLERR, "pair_style md_accel comm layer: the model's feature_dims() has {} "
                 "entries, its header says {} layers (needs {} positive widths)",
                 feature_dims.size(), num_layers, num_layers + 1);
    // one-cutoff ghosts (the default communication cutoff: pair cutoff + skin);
    // the comm buffers must hold the widest feature exchanged between layers
    ghostneigh = 0;
    neighbor->add_request(this, NeighConst::REQ_FULL);
    int width = 0;
    for (int k = 1; k < num_layers; k++) width = std::max(width, static_cast<int>(feature_dims[k]));
    comm_forward = comm_reverse = std::max(row_doubles(width, dtype), 2);   // 2: find_owners
    if (comm->me == 0)
      utils::logmesg(lmp, "md_accel: comm layer ({}): ghost atoms within cutoff + skin, features "
                     "of up to {} numbers per atom exchanged between layers{}\n", why, width,
                     recompute ? "; layers recomputed in the backward pass" : "");
    return;
  }

  ghostneigh = 1;
  comm_forward = comm_reverse = 0;
  neighbor->add_request(this, NeighConst::REQ_FULL | NeighConst::REQ_GHOST);
  // Owned atoms' energies depend on atoms num_layers x cutoff away:
  // the ghost shell must be that deep (plus the skin atoms may move).
  double shell = num_layers * cutoff + neighbor->skin;
  if (comm->me == 0) utils::logmesg(lmp, "md_accel: comm shell ({})\n", why);
  if (comm->cutghostuser < shell) {
    comm->cutghostuser = shell;
    if (comm->me == 0)
      utils::logmesg(lmp, "md_accel: communication cutoff set to {} A ({} layers x {} A + skin)\n",
                     shell, num_layers, cutoff);
  }
}

double PairMDAccel::init_one(int i, int j)
{
  cutghost[i][j] = cutghost[j][i] = cutoff;
  return cutoff;
}

/* ---------------------------------------------------------------------- */

void PairMDAccel::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);

  torch::Tensor node_e;
  md_accel_lammps::NodeSums sums;
  // the rank's GPU is the current device (pinned buffers, streams, waits), not GPU 0
  const c10::DeviceGuard on_device(device);
  timer.start();
  try {
    EdgeGradients edges;
    if (comm_mode == COMM_NONE)
      compute_images(node_e, edges);
    else if (comm_mode == COMM_LAYER)
      compute_layers(node_e, edges);
    else
      compute_shell(node_e, edges);
    if (comm_mode != COMM_LAYER) timer.lap("model");
    sums = md_accel_lammps::sum_per_node(edges, vflag_either ? edge_vectors_f64(edges.vec) : torch::Tensor(),
                                         vflag_global, vflag_atom);
  } catch (const LAMMPSException &) {
    throw;    // error->all/one raised inside: reported already, collective or not as it was meant
  } catch (const std::exception &e) {
    error->one(FLERR, "pair_style md_accel: model evaluation failed: {}", e.what());
  }
  timer.lap("sums per node, download");
  tally(node_e, sums);
  timer.lap("tally");
  if (report_pending) report_sizes();
}

/* ----------------------------------------------------------------------
   the step's edge vectors in float64 on the model's device (the virial's
   factor): the model's own input where it is float64, else uploaded
------------------------------------------------------------------------- */

torch::Tensor PairMDAccel::edge_vectors_f64(const torch::Tensor &model_vec) const
{
  if (model_vec.defined() && model_vec.scalar_type() == torch::kFloat64) return model_vec.detach();
  const int64_t nedges = static_cast<int64_t>(edge_vec.size() / 3);
  return torch::from_blob(const_cast<double *>(edge_vec.data()), {nedges, 3},
                          torch::TensorOptions().dtype(torch::kFloat64))
      .to(device);
}

/* ----------------------------------------------------------------------
   forces, energies and virial from the owned node energies [nlocal] and
   the sums per graph node (node_sums.h): one row per node into its atom
   (graph node n: atom n if owned, else ghost_atoms[n - nlocal]; ghost
   forces are reverse-communicated by LAMMPS)
------------------------------------------------------------------------- */

void PairMDAccel::tally(const torch::Tensor &node_e, const md_accel_lammps::NodeSums &sums)
{
  const int nlocal = atom->nlocal;
  double **f = atom->f;
  const double *e_node = node_e.data_ptr<double>();
  const int64_t nodes = sums.rows.size(0), stride = sums.rows.stride(0);
  const double *rows = sums.rows.data_ptr<double>();
  for (int64_t n = 0; n < nodes; n++) {
    const int64_t a = n < nlocal ? n : ghost_atoms[n - nlocal];
    const double *row = rows + stride * n;
    for (int k = 0; k < 3; k++) f[a][k] += row[k];
    if (vflag_atom)
      for (int k = 0; k < 6; k++) vatom[a][k] += row[3 + k];
  }
  if (vflag_global)
    for (int k = 0; k < 6; k++) virial[k] += sums.virial[k];

  if (eflag_global)
    for (int i = 0; i < nlocal; i++) eng_vdwl += e_node[i];
  if (eflag_atom)
    for (int i = 0; i < nlocal; i++) eatom[i] += e_node[i];
}

/* ----------------------------------------------------------------------
   MD_ACCEL_LAMMPS_TIMING=1: each rank's time per phase since the last
   report (one per run: at the next run's setup, and when the pair style
   goes away), on stderr, which mpirun collects from every rank
------------------------------------------------------------------------- */

void PairMDAccel::report_timing()
{
  if (timer.steps() > 0)
    std::fprintf(stderr, "md_accel timing (comm %s), rank %d: %s\n",
                 comm_mode == COMM_NONE ? "none" : comm_mode == COMM_LAYER ? "layer" : "shell", comm->me,
                 timer.summary().c_str());
  timer = md_accel_lammps::PhaseTimer();
}

/* ----------------------------------------------------------------------
   timed runs only: the ranks meet before an exchange, so that its time is
   the transfer's and the time spent waiting for the slowest rank is a
   phase of its own
------------------------------------------------------------------------- */

void PairMDAccel::wait_for_ranks_if_timed()
{
  if (!timer.enabled()) return;
  MPI_Barrier(world);
  timer.lap("waiting for ranks");
}

/* ----------------------------------------------------------------------
   once per run: atoms, ghosts and graph sizes over the ranks (log)
------------------------------------------------------------------------- */

void PairMDAccel::report_sizes()
{
  report_pending = false;
  const int64_t nodes = static_cast<int64_t>(species.size());
  double mine[4] = {static_cast<double>(atom->nlocal), static_cast<double>(atom->nghost),
                    static_cast<double>(nodes), static_cast<double>(edge_src.size())};
  double sum[4], max[4], min_owned;
  MPI_Allreduce(mine, sum, 4, MPI_DOUBLE, MPI_SUM, world);
  MPI_Allreduce(mine, max, 4, MPI_DOUBLE, MPI_MAX, world);
  MPI_Allreduce(mine, &min_owned, 1, MPI_DOUBLE, MPI_MIN, world);
  if (comm->me != 0) return;
  const double n = comm->nprocs;
  utils::logmesg(lmp,
                 "md_accel: comm {} on {} ranks, per rank (min / average / max): owned atoms "
                 "{:.0f} / {:.0f} / {:.0f}; (average / max): ghost atoms {:.0f} / {:.0f}, graph "
                 "nodes {:.0f} / {:.0f}, edges {:.0f} / {:.0f}; graph from the list on {} host "
                 "thread(s) (OMP_NUM_THREADS)\n",
                 comm_mode == COMM_NONE ? "none" : comm_mode == COMM_LAYER ? "layer" : "shell",
                 comm->nprocs, min_owned, sum[0] / n, max[0],
                 sum[1] / n, max[1], sum[2] / n, max[2], sum[3] / n, max[3], edge_collector.threads());
}

/* ----------------------------------------------------------------------
   edges j -> i within the model cutoff, for the given receivers i in their
   order, j in neighbor-list order: edge_src, edge_dst, edge_vec = x[j] -
   x[i] (edge_collector.h: on OMP_NUM_THREADS host threads)
------------------------------------------------------------------------- */

void PairMDAccel::collect_edges(const int *receivers, int count)
{
  const md_accel_lammps::NeighborSource source{list->firstneigh, list->numneigh, atom->x, NEIGHMASK};
  edge_collector.collect(source, receivers, count, cutoff, edge_src, edge_dst, edge_vec);
}

/* ======================================================================
   comm shell
====================================================================== */

/* ----------------------------------------------------------------------
   edges (within the model cutoff) that can change an owned atom's energy:
   those into atoms at most num_layers-1 hops from an owned atom. Graph
   nodes: owned atoms (same index) then the ghosts these edges touch
   (ghost_atoms, in order of first sight).
------------------------------------------------------------------------- */

void PairMDAccel::build_shell_graph()
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;

  collect_edges(list->ilist, list->inum + list->gnum);

  reached.assign(nall, 0);
  std::fill(reached.begin(), reached.begin() + nlocal, 1);
  for (int hop = 1; hop < num_layers; hop++) {
    grown = reached;
    for (size_t e = 0; e < edge_src.size(); e++)
      if (reached[edge_dst[e]]) grown[edge_src[e]] = 1;
    reached.swap(grown);
  }

  size_t kept = 0;
  for (size_t e = 0; e < edge_src.size(); e++) {
    if (!reached[edge_dst[e]]) continue;
    edge_src[kept] = edge_src[e];
    edge_dst[kept] = edge_dst[e];
    std::copy_n(edge_vec.begin() + 3 * e, 3, edge_vec.begin() + 3 * kept);
    kept++;
  }
  edge_src.resize(kept);
  edge_dst.resize(kept);
  edge_vec.resize(3 * kept);

  node_of.assign(nall, -1);
  for (int i = 0; i < nlocal; i++) node_of[i] = i;
  int nnodes = nlocal;
  ghost_atoms.clear();
  node_src.resize(kept);
  node_dst.resize(kept);
  for (size_t e = 0; e < kept; e++) {
    for (int64_t atom_index : {edge_src[e], edge_dst[e]})
      if (node_of[atom_index] < 0) {
        node_of[atom_index] = nnodes++;
        ghost_atoms.push_back(atom_index);
      }
    node_src[e] = node_of[edge_src[e]];
    node_dst[e] = node_of[edge_dst[e]];
  }
  species.resize(nnodes);
  const int *type = atom->type;
  for (int i = 0; i < nall; i++)
    if (node_of[i] >= 0) species[node_of[i]] = type2species[type[i]];
}

void PairMDAccel::compute_shell(torch::Tensor &node_e, EdgeGradients &edges)
{
  build_shell_graph();
  evaluate_graph(atom->nlocal, node_e, edges);
}

/* ----------------------------------------------------------------------
   node_energies on the graph (species, node_src, node_dst, edge_vec) and
   the gradient of the first num_owned nodes' energy: node_e [num_owned]
   (CPU, float64), edges: dE/d(edge_vec) and the graph on the device
------------------------------------------------------------------------- */

void PairMDAccel::evaluate_graph(int64_t num_owned, torch::Tensor &node_e, EdgeGradients &edges)
{
  const md_accel_lammps::GraphOnDevice g = graph_upload.upload(species, node_src, node_dst, edge_vec, device, dtype);
  torch::Tensor t_species = g.species, t_src = g.src, t_dst = g.dst;
  torch::Tensor t_vec = g.vec.requires_grad_(true);

  node_e = model.get_method("node_energies")({t_species, t_vec, t_src, t_dst}).toTensor();
  torch::Tensor energy = node_e.narrow(0, 0, num_owned).sum();
  torch::Tensor grad;
  if (energy.requires_grad())
    grad = torch::autograd::grad({energy}, {t_vec}, {}, false, false, true)[0];
  if (!grad.defined()) grad = torch::zeros_like(t_vec);
  edges = EdgeGradients{grad, t_src, t_dst, t_vec.detach(), comm_mode != COMM_SHELL,
                        static_cast<int64_t>(species.size())};
  node_e = node_e.detach().narrow(0, 0, num_owned).to(torch::kCPU, torch::kFloat64).contiguous();
}

/* ======================================================================
   comm none
====================================================================== */

/* ----------------------------------------------------------------------
   every atom's owner: the rank (owner_rank) and its row there (owner_of;
   itself if owned), by one width-2 forward_comm (a ghost sent on in a
   later swap carries its own owner's). comm none: on one rank every ghost
   is a periodic image of an owned atom; exchange device: the rows the
   GPUs read. The ghosts change only when the neighbor lists are rebuilt
   (borders()).
------------------------------------------------------------------------- */

void PairMDAccel::find_owners()
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  owner_of.assign(nall, -1);
  owner_rank.assign(nall, -1);
  for (int i = 0; i < nlocal; i++) {
    owner_of[i] = i;
    owner_rank[i] = comm->me;
  }
  comm_phase = PHASE_OWNERS;
  comm->forward_comm(this, 2);
  for (int j = nlocal; j < nall; j++) {
    const bool image = owner_rank[j] == comm->me && owner_of[j] >= 0 && owner_of[j] < nlocal;
    if (comm_mode == COMM_NONE && !image)
      error->one(FLERR, "pair_style md_accel comm none: ghost atom {} (id {}) is not an image of "
                 "an owned atom", j, atom->tag[j]);
    if (owner_rank[j] < 0 || owner_rank[j] >= comm->nprocs || owner_of[j] < 0)
      error->one(FLERR, "pair_style md_accel: ghost atom {} (tag {}) has no owner after the exchange", j,
                 atom->tag[j]);
  }
  send_lists_known = true;
}

/* ----------------------------------------------------------------------
   comm none: graph nodes are the owned atoms, edges into them from the
   full neighbor list, a ghost sender replaced by its owner (the edge keeps
   the ghost's vector; its sender's force goes on the owner's node)
------------------------------------------------------------------------- */

void PairMDAccel::compute_images(torch::Tensor &node_e, EdgeGradients &edges)
{
  const int nlocal = atom->nlocal;
  if (neighbor->ago == 0 || !send_lists_known) find_owners();
  timer.lap("graph: owners");
  build_receiver_graph(true);
  if (nlocal == 0 || edge_src.empty() || !use_cuda_graph(static_cast<int64_t>(edge_src.size()))) {
    evaluate_graph(nlocal, node_e, edges);
    return;
  }
#ifdef MD_ACCEL_CUDA_GRAPH
  try {
    if (!graphed)
      graphed = std::make_unique<md_accel_lammps::CudaGraphStep>(model, device, dtype, cutoff);
    const int64_t before = graphed->captures();
    graphed->run(species, node_src, node_dst, edge_vec, node_e, edges);
    if (graphed->captures() != before && comm->me == 0) {
      const auto &l = graphed->layout();
      utils::logmesg(lmp, "md_accel: CUDA graph capture {}: {} atoms, {} edges (layout: {} to {} "
                     "edges, {} nodes with padding)\n", graphed->captures(), nlocal,
                     edge_src.size(), l.min_edges, l.edge_capacity, l.node_capacity);
    }
  } catch (const c10::OutOfMemoryError &) {
    graphed.reset();
    throw;
  } catch (const LAMMPSException &) {
    throw;
  } catch (const std::exception &e) {
    // an op that waits for the host or cannot be captured: the step runs uncaptured from now on
    graphed.reset();
    graph_choice = GRAPH_NO;
    error->warning(FLERR, "pair_style md_accel: CUDA graph capture failed, running uncaptured: {}",
                   utils::split_lines(e.what())[0]);
    evaluate_graph(nlocal, node_e, edges);
  }
#endif
}

/* ----------------------------------------------------------------------
   whether comm none replays its evaluation from a CUDA graph; above the
   auto limit the graph's memory is released
------------------------------------------------------------------------- */

bool PairMDAccel::use_cuda_graph(int64_t num_edges)
{
#ifdef MD_ACCEL_CUDA_GRAPH
  using md_accel_lammps::GraphLayout;
  bool on = comm_mode == COMM_NONE && device.is_cuda() &&
      (graph_choice == GRAPH_YES ||
       (graph_choice == GRAPH_AUTO && num_edges <= GraphLayout::AUTO_MAX_EDGES));
  if (!on) graphed.reset();
  return on;
#else
  (void) num_edges;
  return false;
#endif
}

/* ======================================================================
   comm layer
====================================================================== */

/* ----------------------------------------------------------------------
   edges j -> i (within the model cutoff) into owned atoms, sorted by
   receiver; graph nodes: owned atoms, then the ghost senders (comm layer)
   or, senders_to_owners, owned atoms only (comm none: owner_of)
------------------------------------------------------------------------- */

void PairMDAccel::build_receiver_graph(bool senders_to_owners)
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  const int *type = atom->type;

  std::vector<int> receivers(list->ilist, list->ilist + list->inum);
  if (!std::is_sorted(receivers.begin(), receivers.end()))
    std::sort(receivers.begin(), receivers.end());

  collect_edges(receivers.data(), static_cast<int>(receivers.size()));
  timer.lap("graph: edges");
  edge_collector.sender_nodes(edge_src, nlocal, nall, senders_to_owners ? owner_of.data() : nullptr, node_src,
                              ghost_atoms);
  timer.lap("graph: nodes");
  node_dst = edge_dst;    // owned receivers: node index = atom index

  species.resize(nlocal + ghost_atoms.size());
  for (int i = 0; i < nlocal; i++) species[i] = type2species[type[i]];
  for (size_t g = 0; g < ghost_atoms.size(); g++)
    species[nlocal + g] = type2species[type[ghost_atoms[g]]];
  t_ghost_atoms = long_tensor(ghost_atoms);
}

/* ----------------------------------------------------------------------
   the owned atoms that LAMMPS sends to other ranks (or to own periodic
   images): one width-1 forward_comm records the send lists. The lists
   change only when the neighbor lists are rebuilt (borders()).
------------------------------------------------------------------------- */

void PairMDAccel::find_border_atoms()
{
  const int nlocal = atom->nlocal;
  border_mark.assign(nlocal, 0);
  comm_phase = PHASE_FIND_BORDER;
  comm->forward_comm(this, 1);
  border_atoms.clear();
  for (int i = 0; i < nlocal; i++)
    if (border_mark[i]) border_atoms.push_back(i);
  t_border_cpu = long_tensor(border_atoms).clone();
  t_border_dev = t_border_cpu.to(device);
  send_lists_known = true;
}

/* ----------------------------------------------------------------------
   comm layer, at the first evaluation of a run (collective): the exchange
   on the GPUs where the ranks share a host and can map each other's memory
------------------------------------------------------------------------- */

void PairMDAccel::choose_exchange()
{
  exchange_chosen = true;
  if (exchange_choice == EXCHANGE_HOST || num_layers < 2) return;
  std::string why;
#ifdef MD_ACCEL_CUDA_GRAPH
  int64_t width = 1;
  for (int k = 1; k < num_layers; k++) width = std::max(width, feature_dims[k]);
  exchange = md_accel_lammps::DeviceExchange::create(world, device, dtype, width, why);
#else
  why = "this plugin was built against a torch without CUDA";
#endif
  if (exchange_on_device()) {
    if (comm->me == 0)
      utils::logmesg(lmp, "md_accel: exchange device: ghost rows read from the owners' GPUs\n");
  } else if (exchange_choice == EXCHANGE_DEVICE) {
    error->all(FLERR, "pair_style md_accel exchange device: {}", why);
  } else if (comm->me == 0) {
    utils::logmesg(lmp, "md_accel: exchange host ({})\n", why);
  }
}

bool PairMDAccel::exchange_on_device() const
{
#ifdef MD_ACCEL_CUDA_GRAPH
  return exchange != nullptr;
#else
  return false;
#endif
}

int PairMDAccel::pack_forward_comm(int n, int *list_send, double *buf, int /*pbc_flag*/,
                                   int * /*pbc*/)
{
  if (comm_phase == PHASE_FIND_BORDER) {
    const int nlocal = atom->nlocal;
    for (int i = 0; i < n; i++) {
      if (list_send[i] < nlocal) border_mark[list_send[i]] = 1;
      buf[i] = 0.0;
    }
    return n;
  }
  if (comm_phase == PHASE_OWNERS) {
    for (int i = 0; i < n; i++) {
      buf[2 * i] = static_cast<double>(owner_rank[list_send[i]]);
      buf[2 * i + 1] = static_cast<double>(owner_of[list_send[i]]);
    }
    return 2 * n;
  }
  const char *rows = static_cast<const char *>(comm_rows.data_ptr());
  for (int i = 0; i < n; i++)
    std::memcpy(buf + static_cast<int64_t>(i) * comm_stride,
                rows + static_cast<size_t>(list_send[i]) * comm_row_bytes, comm_row_bytes);
  return n * comm_stride;
}

void PairMDAccel::unpack_forward_comm(int n, int first, double *buf)
{
  if (comm_phase == PHASE_FIND_BORDER) return;
  if (comm_phase == PHASE_OWNERS) {
    for (int i = 0; i < n; i++) {
      owner_rank[first + i] = static_cast<int>(buf[2 * i]);
      owner_of[first + i] = static_cast<int64_t>(buf[2 * i + 1]);
    }
    return;
  }
  char *rows = static_cast<char *>(comm_rows.data_ptr());
  for (int i = 0; i < n; i++)
    std::memcpy(rows + static_cast<size_t>(first + i) * comm_row_bytes,
                buf + static_cast<int64_t>(i) * comm_stride, comm_row_bytes);
}

int PairMDAccel::pack_reverse_comm(int n, int first, double *buf)
{
  const char *rows = static_cast<const char *>(comm_rows.data_ptr());
  for (int i = 0; i < n; i++)
    std::memcpy(buf + static_cast<int64_t>(i) * comm_stride,
                rows + static_cast<size_t>(first + i) * comm_row_bytes, comm_row_bytes);
  return n * comm_stride;
}

void PairMDAccel::unpack_reverse_comm(int n, int *list_send, double *buf)
{
  char *rows = static_cast<char *>(comm_rows.data_ptr());
  if (dtype == torch::kFloat32)
    add_rows<float>(rows, comm_row_bytes, n, list_send, buf, comm_stride);
  else
    add_rows<double>(rows, comm_row_bytes, n, list_send, buf, comm_stride);
}

/* ----------------------------------------------------------------------
   host rows [nall, width] for the comm calls (grow-only storage), and a
   transfer buffer [rows, width] (pinned on CUDA)
------------------------------------------------------------------------- */

torch::Tensor PairMDAccel::rows_view(int width)
{
  const int64_t nall = atom->nlocal + atom->nghost;
  const int64_t need = std::max<int64_t>(nall * width, 1);
  if (!comm_rows.defined() || comm_rows.numel() < need)
    comm_rows = torch::empty({need + need / 4}, torch::TensorOptions().dtype(dtype));
  comm_row_bytes = static_cast<size_t>(width) * c10::elementSize(dtype);
  comm_stride = row_doubles(width, dtype);
  return comm_rows.narrow(0, 0, nall * width).view({nall, width});
}

torch::Tensor PairMDAccel::staging_view(int64_t rows, int width)
{
  const int64_t need = std::max<int64_t>(rows * width, 1);
  if (!staging.defined() || staging.numel() < need)
    staging = torch::empty({need + need / 4},
                           torch::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda()));
  return staging.narrow(0, 0, rows * width).view({rows, width});
}

/* ----------------------------------------------------------------------
   forward_comm of one layer's features: the owned rows h_owned [nlocal,
   width] (on the device; undefined on a rank without atoms) -> all graph
   nodes' rows, ghost nodes holding their owners' rows
------------------------------------------------------------------------- */

torch::Tensor PairMDAccel::fill_ghost_rows(const torch::Tensor &h_owned, int width, int layer)
{
#ifdef MD_ACCEL_CUDA_GRAPH
  if (exchange) {
    wait_for_ranks_if_timed();
    torch::Tensor ghosts = exchange->forward(h_owned, width, layer);
    timer.lap("exchange: device");
    return h_owned.defined() ? torch::cat({h_owned, ghosts}) : torch::Tensor();
  }
#endif
  (void) layer;
  const int64_t nborder = static_cast<int64_t>(border_atoms.size());
  const int64_t nghost = static_cast<int64_t>(ghost_atoms.size());
  torch::Tensor rows = rows_view(width);
  if (nborder > 0) {
    torch::Tensor stage = staging_view(nborder, width);
    stage.copy_(h_owned.index_select(0, t_border_dev));
    rows.index_copy_(0, t_border_cpu, stage);
  }
  timer.lap("exchange: to host");
  wait_for_ranks_if_timed();
  comm_phase = PHASE_ROWS;
  comm->forward_comm(this, comm_stride);
  timer.lap("exchange: comm");
  if (!h_owned.defined()) return {};
  torch::Tensor stage = staging_view(nghost, width);
  torch::index_select_out(stage, rows, 0, t_ghost_atoms);
  return torch::cat({h_owned, stage.to(device, dtype, false, true)});
}

/* ----------------------------------------------------------------------
   reverse_comm of one layer's feature gradient g [nodes, width]: ghost
   rows summed into their owners; returns the owned rows with the sums
   added and zero ghost rows (g undefined on a rank without atoms)
------------------------------------------------------------------------- */

torch::Tensor PairMDAccel::add_ghost_gradients(const torch::Tensor &g, int width, int layer)
{
  const int nlocal = atom->nlocal;
#ifdef MD_ACCEL_CUDA_GRAPH
  if (exchange) {
    const int64_t nghost = static_cast<int64_t>(ghost_atoms.size());
    wait_for_ranks_if_timed();
    torch::Tensor ghost_rows = g.defined() ? g.narrow(0, nlocal, nghost) : torch::Tensor();
    torch::Tensor sums = exchange->reverse(ghost_rows, width, layer);
    timer.lap("exchange back: device");
    if (!g.defined()) return {};
    return torch::cat({g.narrow(0, 0, nlocal) + sums, torch::zeros({nghost, width}, g.options())});
  }
#endif
  (void) layer;
  const int64_t nborder = static_cast<int64_t>(border_atoms.size());
  const int64_t nghost = static_cast<int64_t>(ghost_atoms.size());
  torch::Tensor rows = rows_view(width);
  rows.narrow(0, nlocal, rows.size(0) - nlocal).zero_();
  if (nborder > 0) rows.index_fill_(0, t_border_cpu, 0);
  if (g.defined() && nghost > 0) {
    torch::Tensor stage = staging_view(nghost, width);
    stage.copy_(g.narrow(0, nlocal, nghost));
    rows.index_copy_(0, t_ghost_atoms, stage);
  }
  timer.lap("exchange back: to host");
  wait_for_ranks_if_timed();
  comm_phase = PHASE_ROWS;
  comm->reverse_comm(this, comm_stride);
  timer.lap("exchange back: comm");
  if (!g.defined()) return {};
  torch::Tensor owned = g.narrow(0, 0, nlocal);
  if (nborder > 0) {
    torch::Tensor stage = staging_view(nborder, width);
    torch::index_select_out(stage, rows, 0, t_border_cpu);
    owned = owned.index_add(0, t_border_dev, stage.to(device, dtype, false, true));
  }
  return torch::cat({owned, torch::zeros({nghost, width}, g.options())});
}

/* ----------------------------------------------------------------------
   one evaluation in comm layer mode (scheme at the top of this file)
------------------------------------------------------------------------- */

void PairMDAccel::compute_layers(torch::Tensor &node_e, EdgeGradients &edges)
{
  const int nlocal = atom->nlocal;
  const int L = num_layers;
  if (!exchange_chosen) choose_exchange();
  const bool on_device = L > 1 && exchange_on_device();
  if (L > 1 && (neighbor->ago == 0 || !send_lists_known)) {
    if (on_device)
      find_owners();
    else
      find_border_atoms();
  }
  timer.lap("graph: owners");
  build_receiver_graph(false);
#ifdef MD_ACCEL_CUDA_GRAPH
  if (on_device) {
    std::vector<int> ranks(ghost_atoms.size());
    std::vector<int64_t> rows(ghost_atoms.size());
    for (size_t g = 0; g < ghost_atoms.size(); g++) {
      ranks[g] = owner_rank[ghost_atoms[g]];
      rows[g] = owner_of[ghost_atoms[g]];
    }
    exchange->setup(nlocal, atom->nghost, ranks, rows);
  }
#endif
  timer.lap("graph: species, exchange setup");
  const int64_t nnodes = nlocal + static_cast<int64_t>(ghost_atoms.size());
  // a rank without atoms has no graph; it only takes part in the comm calls
  const bool active = nlocal > 0;

  torch::Tensor t_species, t_src, t_dst, t_vec;
  torch::IValue graph;
  std::vector<torch::Tensor> edge_feats, edge_leaves;
  c10::List<torch::Tensor> edge_list;
  std::vector<torch::Tensor> x(L + 1), h(L + 1);
  if (active) {
    const md_accel_lammps::GraphOnDevice g = graph_upload.upload(species, node_src, node_dst, edge_vec, device, dtype);
    t_species = g.species;
    t_src = g.src;
    t_dst = g.dst;
    t_vec = g.vec.requires_grad_(true);
  }
  timer.lap("upload");
  if (active) {
    graph = model.get_method("receiver_graph")({t_src, t_dst, nnodes});
    edge_feats = model.get_method("edge_features")({t_species, t_vec, t_src, t_dst}).toTensorVector();
    for (const auto &t : edge_feats) {
      edge_leaves.push_back(t.detach().requires_grad_(t.requires_grad()));
      edge_list.push_back(edge_leaves.back());
    }
    x[0] = model.get_method("embed")({t_species}).toTensor();
  }
  timer.lap("receiver graph, edge features, embedding");

  // forward: layer k reads x_k, its owned rows are exact; ghost rows from the owners
  auto interaction = [&](int k) {
    return model.get_method("interaction")({static_cast<int64_t>(k), x[k], t_species, edge_list,
                                            t_src, t_dst, graph})
        .toTensor();
  };
  for (int k = 0; k < L; k++) {
    if (active) {
      // recompute: no autograd graph now, layer k runs again in the backward pass
      torch::AutoGradMode grad_mode(!recompute);
      h[k + 1] = interaction(k);
    }
    timer.lap("layers");
    if (k + 1 < L) {
      torch::Tensor owned = active ? h[k + 1].detach().narrow(0, 0, nlocal) : torch::Tensor();
      x[k + 1] = fill_ghost_rows(owned, static_cast<int>(feature_dims[k + 1]), k);
      timer.lap("exchange: to device");
    } else if (active) {
      x[k + 1] = h[k + 1].detach();
    }
    if (active) x[k + 1].requires_grad_(true);
    if (recompute) h[k + 1] = torch::Tensor();
  }

  // readout: energies of the owned atoms and their direct gradients
  std::vector<torch::Tensor> grad_x(L + 1), grad_edge(edge_leaves.size());
  auto accumulate = [](torch::Tensor &into, const torch::Tensor &g) {
    if (g.defined()) into = into.defined() ? into + g : g;
  };
  auto backward = [&](const torch::Tensor &out, const torch::Tensor &grad_out, int k_in) {
    // k_in: index of the feature input x_k to differentiate (0: none)
    std::vector<torch::Tensor> inputs;
    if (k_in > 0) inputs.push_back(x[k_in]);
    for (const auto &t : edge_leaves)
      if (t.requires_grad()) inputs.push_back(t);
    if (!out.requires_grad() || inputs.empty()) return;
    auto grads = torch::autograd::grad({out}, inputs, {grad_out}, false, false, true);
    size_t next = 0;
    if (k_in > 0) accumulate(grad_x[k_in], grads[next++]);
    for (size_t i = 0; i < edge_leaves.size(); i++)
      if (edge_leaves[i].requires_grad()) accumulate(grad_edge[i], grads[next++]);
  };
  if (active) {
    c10::List<torch::Tensor> features;
    for (int k = 1; k <= L; k++) features.push_back(x[k]);
    torch::Tensor all_e = model.get_method("readout_energies")({t_species, features, edge_list,
                                                                t_src, t_dst})
                              .toTensor();
    torch::Tensor energy = all_e.narrow(0, 0, nlocal).sum();
    std::vector<torch::Tensor> inputs(x.begin() + 1, x.end());
    for (const auto &t : edge_leaves)
      if (t.requires_grad()) inputs.push_back(t);
    if (energy.requires_grad()) {
      auto grads = torch::autograd::grad({energy}, inputs, {}, false, false, true);
      size_t next = 0;
      for (int k = 1; k <= L; k++) accumulate(grad_x[k], grads[next++]);
      for (size_t i = 0; i < edge_leaves.size(); i++)
        if (edge_leaves[i].requires_grad()) accumulate(grad_edge[i], grads[next++]);
    }
    node_e = all_e.detach().narrow(0, 0, nlocal).to(torch::kCPU, torch::kFloat64).contiguous();
  }
  timer.lap("readout");

  // backward through the layers; ghost rows' gradients go to their owners
  for (int k = L; k >= 1; k--) {
    const int width = static_cast<int>(feature_dims[k]);
    torch::Tensor g;
    if (active)
      g = grad_x[k].defined() ? grad_x[k] : torch::zeros({nnodes, width}, x[k].options());
    if (k < L) {
      g = add_ghost_gradients(g, width, k);
      timer.lap("exchange back: to device");
    }
    if (active) {
      if (recompute) h[k] = interaction(k - 1);
      backward(h[k], g, k - 1);
    }
    timer.lap("layers back");
    h[k] = torch::Tensor();
    x[k] = torch::Tensor();
  }

  if (!active) {
    node_e = torch::zeros({0}, torch::TensorOptions().dtype(torch::kFloat64));
    return;    // edges: none
  }
  std::vector<torch::Tensor> outs, grad_outs;
  for (size_t i = 0; i < edge_feats.size(); i++)
    if (edge_feats[i].requires_grad() && grad_edge[i].defined()) {
      outs.push_back(edge_feats[i]);
      grad_outs.push_back(grad_edge[i]);
    }
  torch::Tensor grad;
  if (!outs.empty()) grad = torch::autograd::grad(outs, {t_vec}, grad_outs, false, false, true)[0];
  if (!grad.defined()) grad = torch::zeros_like(t_vec);
  edges = EdgeGradients{grad, t_src, t_dst, t_vec.detach(), true, nnodes};
  timer.lap("edges back");
}
