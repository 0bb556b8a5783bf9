/* ----------------------------------------------------------------------
   md_accel LAMMPS plugin: the host threads of the plugin's own loops
   (host_threads.h)
------------------------------------------------------------------------- */

#include "host_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>

namespace md_accel_lammps {

int host_threads()
{
  int threads = 1;
  if (const char *env = std::getenv("OMP_NUM_THREADS")) {
    char *end = nullptr;
    const long v = std::strtol(env, &end, 10);    // "16" or "16,4" (nested levels): the first
    if (end != env && v > 0) threads = static_cast<int>(std::min<long>(v, 1024));
  }
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) threads = std::min(threads, std::max(1, CPU_COUNT(&cpus)));
  return threads;
}

int copy_threads(int threads, int64_t bytes)
{
  constexpr int64_t kMinBytesPerThread = 1 << 20;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, bytes / kMinBytesPerThread)));
}

}    // namespace md_accel_lammps
