/* engine/base/cpu_cores.h: how many physical cores this process may run on
 * (the `threads` knob's default, engine/spill_config.c).
 *
 * A physical core is a distinct (physical_package_id, core_id) pair of the
 * Linux sysfs topology among the CPUs of the process's affinity mask, so SMT
 * siblings count once. Never fails: without sysfs topology it counts the
 * CPUs of the mask, without a mask the online CPUs; at least 1. A cgroup CPU
 * quota is not read. Depends on libc only.
 */
#ifndef SPILL_BASE_CPU_CORES_H
#define SPILL_BASE_CPU_CORES_H

#ifdef __cplusplus
extern "C" {
#endif

/* Physical cores of the affinity mask, from /sys/devices/system/cpu. */
int spill_cpu_physical_cores(void);

/* The same over a sysfs cpu directory `root` (holding cpuN/topology/) for
 * the CPUs listed in cpus[0..n) (tests give a made-up tree). */
int spill_cpu_physical_cores_at(const char *root, const int *cpus, int n);

#ifdef __cplusplus
}
#endif
#endif
