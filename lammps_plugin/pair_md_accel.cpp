/* ----------------------------------------------------------------------
   md_accel pair style: see pair_md_accel.h for the input syntax.

   Forces and virial come from the gradient g_e = dE/d(edge_vec_e) of the
   energy of the owned atoms, edge_vec_e = x[src] - x[dst]:
     F[src] -= g_e, F[dst] += g_e   (ghost forces are reverse-communicated)
     W      -= edge_vec_e (x) g_e   (per-atom: half to each end of the edge)
------------------------------------------------------------------------- */

#include "pair_md_accel.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "json.h"
#include "memory.h"
#include "neigh_list.h"
#include "neighbor.h"
#include "update.h"
#include "utils.h"

#include <torch/csrc/autograd/autograd.h>
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
// next to this plugin is loaded when present. Returns an error text or "".
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

  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&load_ops_libraries), &info) && info.dli_fname) {
    auto candidate = std::filesystem::path(info.dli_fname).parent_path() / OPS_NEXT_TO_PLUGIN;
    if (std::filesystem::exists(candidate) && !dlopen(candidate.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
      failure = "cannot load " + candidate.string() + ": " + dlerror();
    }
  }
  return failure;
}

}    // namespace

/* ---------------------------------------------------------------------- */

PairMDAccel::PairMDAccel(LAMMPS *lmp) :
    Pair(lmp), device_choice(DEVICE_AUTO), device(torch::kCPU), dtype(torch::kFloat64),
    model_loaded(false), cutoff(0.0), num_layers(0)
{
  single_enable = 0;
  restartinfo = 0;
  one_coeff = 1;
  manybody_flag = 1;
  ghostneigh = 1;
  no_virial_fdotr_compute = 1;
}

PairMDAccel::~PairMDAccel()
{
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
   pair_style md_accel [device auto|cpu|cuda]
------------------------------------------------------------------------- */

void PairMDAccel::settings(int narg, char **arg)
{
  int iarg = 0;
  while (iarg < narg) {
    if (strcmp(arg[iarg], "device") == 0) {
      if (iarg + 2 > narg) utils::missing_cmd_args(FLERR, "pair_style md_accel device", error);
      std::string choice = arg[iarg + 1];
      if (choice == "auto")
        device_choice = DEVICE_AUTO;
      else if (choice == "cpu")
        device_choice = DEVICE_CPU;
      else if (choice == "cuda")
        device_choice = DEVICE_CUDA;
      else
        error->all(FLERR, "Unknown pair_style md_accel device {} (auto, cpu or cuda)", choice);
      iarg += 2;
    } else {
      error->all(FLERR, "Unknown pair_style md_accel keyword {}", arg[iarg]);
    }
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
  std::unordered_map<std::string, std::string> extra{{"md_accel.json", ""}};
  try {
    model = torch::jit::load(filename, device, extra);
  } catch (const std::exception &e) {
    error->all(FLERR, "pair_style md_accel: cannot load model file {}: {}", filename, e.what());
  }
  model.eval();

  const std::string &header = extra["md_accel.json"];
  if (header.empty())
    error->all(FLERR, "pair_style md_accel: {} has no md_accel.json (not an md_accel model file)",
               filename);
  try {
    auto meta = json::parse(header);
    if (meta.at("format").get<std::string>() != "md_accel")
      error->all(FLERR, "pair_style md_accel: {} is not an md_accel model file", filename);
    int version = meta.at("format_version").get<int>();
    if (version != 1)
      error->all(FLERR, "pair_style md_accel: {} has format_version {}, this plugin reads 1",
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
  model_loaded = true;

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

  neighbor->add_request(this, NeighConst::REQ_FULL | NeighConst::REQ_GHOST);

  // Owned atoms' energies depend on atoms num_layers x cutoff away:
  // the ghost shell must be that deep (plus the skin atoms may move).
  double shell = num_layers * cutoff + neighbor->skin;
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

/* ----------------------------------------------------------------------
   edges (within the model cutoff) that can change an owned atom's energy:
   those into atoms at most num_layers-1 hops from an owned atom. Graph
   nodes: owned atoms (same index) then the ghosts these edges touch.
   Returns the node count.
------------------------------------------------------------------------- */

int PairMDAccel::build_graph()
{
  const int nlocal = atom->nlocal;
  const int nall = nlocal + atom->nghost;
  double **x = atom->x;
  const double cutsq_model = cutoff * cutoff;

  edge_src.clear();
  edge_dst.clear();
  edge_vec.clear();
  const int ntotal = list->inum + list->gnum;
  for (int ii = 0; ii < ntotal; ii++) {
    const int i = list->ilist[ii];
    const int *jlist = list->firstneigh[i];
    const int jnum = list->numneigh[i];
    for (int jj = 0; jj < jnum; jj++) {
      const int j = jlist[jj] & NEIGHMASK;
      const double dx = x[j][0] - x[i][0];
      const double dy = x[j][1] - x[i][1];
      const double dz = x[j][2] - x[i][2];
      if (dx * dx + dy * dy + dz * dz >= cutsq_model) continue;
      edge_src.push_back(j);
      edge_dst.push_back(i);
      edge_vec.insert(edge_vec.end(), {dx, dy, dz});
    }
  }

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
  node_src.resize(kept);
  node_dst.resize(kept);
  for (size_t e = 0; e < kept; e++) {
    for (int64_t atom_index : {edge_src[e], edge_dst[e]})
      if (node_of[atom_index] < 0) node_of[atom_index] = nnodes++;
    node_src[e] = node_of[edge_src[e]];
    node_dst[e] = node_of[edge_dst[e]];
  }
  species.resize(nnodes);
  const int *type = atom->type;
  for (int i = 0; i < nall; i++)
    if (node_of[i] >= 0) species[node_of[i]] = type2species[type[i]];
  return nnodes;
}

/* ---------------------------------------------------------------------- */

void PairMDAccel::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);

  const int nlocal = atom->nlocal;
  double **f = atom->f;
  const int nnodes = build_graph();
  const int64_t nedges = static_cast<int64_t>(edge_src.size());

  torch::Tensor node_e, grad;
  try {
    auto as_long = torch::TensorOptions().dtype(torch::kInt64);
    auto as_double = torch::TensorOptions().dtype(torch::kFloat64);
    torch::Tensor t_species = torch::from_blob(species.data(), {nnodes}, as_long).to(device);
    torch::Tensor t_src = torch::from_blob(node_src.data(), {nedges}, as_long).to(device);
    torch::Tensor t_dst = torch::from_blob(node_dst.data(), {nedges}, as_long).to(device);
    torch::Tensor t_vec = torch::from_blob(edge_vec.data(), {nedges, 3}, as_double)
                              .to(device, dtype, false, true)
                              .requires_grad_(true);

    node_e = model.get_method("node_energies")({t_species, t_vec, t_src, t_dst}).toTensor();
    torch::Tensor energy = node_e.narrow(0, 0, nlocal).sum();
    if (energy.requires_grad())
      grad = torch::autograd::grad({energy}, {t_vec}, {}, false, false, true)[0];
    if (!grad.defined()) grad = torch::zeros_like(t_vec);
    grad = grad.to(torch::kCPU, torch::kFloat64).contiguous();
    node_e = node_e.detach().narrow(0, 0, nlocal).to(torch::kCPU, torch::kFloat64).contiguous();
  } catch (const std::exception &e) {
    error->one(FLERR, "pair_style md_accel: model evaluation failed: {}", e.what());
  }

  const double *g = grad.data_ptr<double>();
  const double *e_node = node_e.data_ptr<double>();

  for (int64_t e = 0; e < nedges; e++) {
    const int j = static_cast<int>(edge_src[e]);
    const int i = static_cast<int>(edge_dst[e]);
    const double *ge = g + 3 * e;
    for (int k = 0; k < 3; k++) {
      f[j][k] -= ge[k];
      f[i][k] += ge[k];
    }
  }

  if (eflag_global)
    for (int i = 0; i < nlocal; i++) eng_vdwl += e_node[i];
  if (eflag_atom)
    for (int i = 0; i < nlocal; i++) eatom[i] += e_node[i];

  if (vflag_either) {
    for (int64_t e = 0; e < nedges; e++) {
      const double *r = edge_vec.data() + 3 * e;
      const double *ge = g + 3 * e;
      const double v[6] = {-r[0] * ge[0], -r[1] * ge[1], -r[2] * ge[2],
                           -r[0] * ge[1], -r[0] * ge[2], -r[1] * ge[2]};
      if (vflag_global)
        for (int k = 0; k < 6; k++) virial[k] += v[k];
      if (vflag_atom) {
        const int j = static_cast<int>(edge_src[e]);
        const int i = static_cast<int>(edge_dst[e]);
        for (int k = 0; k < 6; k++) {
          vatom[i][k] += 0.5 * v[k];
          vatom[j][k] += 0.5 * v[k];
        }
      }
    }
  }
}
