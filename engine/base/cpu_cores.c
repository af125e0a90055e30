/* engine/base/cpu_cores.c: physical cores of the affinity mask (see the
 * header). Reads two small sysfs files per CPU, once per call; callers
 * resolve the knob once at engine open, never per token. */
#define _GNU_SOURCE
#include "engine/base/cpu_cores.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_CPUS 4096

/* The integer in file root/cpuN/topology/name, or -1. */
static long topo_value(const char *root, int cpu, const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/cpu%d/topology/%s", root, cpu, name);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  if (fscanf(f, "%ld", &v) != 1) v = -1;
  fclose(f);
  return v;
}

int spill_cpu_physical_cores_at(const char *root, const int *cpus, int n) {
  if (n <= 0) return 1;
  if (n > MAX_CPUS) n = MAX_CPUS;
  long *pkg = malloc((size_t)n * sizeof *pkg), *core = malloc((size_t)n * sizeof *core);
  if (!pkg || !core) {
    free(pkg);
    free(core);
    return n;
  }
  int distinct = 0;
  for (int i = 0; i < n; i++) {
    const long p = topo_value(root, cpus[i], "physical_package_id");
    const long c = topo_value(root, cpus[i], "core_id");
    if (p < 0 || c < 0) { /* no topology for this CPU: it counts as a core */
      distinct++;
      pkg[i] = core[i] = -1 - i;
      continue;
    }
    pkg[i] = p;
    core[i] = c;
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = pkg[j] == p && core[j] == c;
    distinct += !seen;
  }
  free(pkg);
  free(core);
  return distinct > 0 ? distinct : 1;
}

int spill_cpu_physical_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus[MAX_CPUS], n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE && c < MAX_CPUS; c++)
      if (CPU_ISSET(c, &set)) cpus[n++] = c;
  } else {
    long on = sysconf(_SC_NPROCESSORS_ONLN);
    for (int c = 0; c < on && c < MAX_CPUS; c++) cpus[n++] = c;
  }
  return spill_cpu_physical_cores_at("/sys/devices/system/cpu", cpus, n);
}
