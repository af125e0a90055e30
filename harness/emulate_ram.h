/* harness/emulate_ram.h: make this machine behave like one with less RAM.
 *
 * A helper process (fork) mlocks `lock_bytes` of anonymous memory and holds
 * it until released. It dies with the runner whatever way the runner ends:
 * PR_SET_PDEATHSIG(SIGKILL) covers a killed runner, and the helper also
 * exits when the pipe from the runner reaches EOF (which the kernel
 * delivers when the runner's last copy of the write end closes, including a
 * crash). Fork it before starting threads: death signals follow the forking
 * thread. Refuses a lock that would leave less than 1 GiB of MemAvailable.
 */
#ifndef SPILL_HARNESS_EMULATE_RAM_H
#define SPILL_HARNESS_EMULATE_RAM_H

#include <stdint.h>
#include <sys/types.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_ramlock {
  pid_t pid;          /* the helper; 0 when not running */
  int fd;             /* write end of the keep-alive pipe */
  uint64_t locked;    /* bytes the helper holds locked */
} spill_ramlock;

/* MemTotal, MemAvailable from /proc/meminfo (bytes). */
int spill_ramlock_meminfo(uint64_t *total, uint64_t *available, spill_err *e);
/* Bytes to lock so that `emulate` bytes are left of the machine's usable RAM
 * (min of physical RAM and the cgroup limit); SPILL_E_CONFIG when emulate is
 * not below it or the lock would leave MemAvailable under 1 GiB. */
int spill_ramlock_plan(uint64_t emulate, uint64_t *lock_bytes, spill_err *e);
/* Starts the helper and waits until the memory is locked (or the helper
 * reports why it could not lock it: e.g. RLIMIT_MEMLOCK). */
int spill_ramlock_start(uint64_t lock_bytes, spill_ramlock *out, spill_err *e);
/* Whether the helper still holds its memory: SPILL_OK while it runs (or when
 * r holds no helper, or the helper is not this process's child); when it has
 * died (the kernel's OOM killer picks it first: it is the largest process),
 * reaps it, clears r and returns SPILL_E_IO naming the signal or status. A
 * run measured after that died had more RAM than it was meant to emulate. */
int spill_ramlock_check(spill_ramlock *r, spill_err *e);
/* Releases the memory: closes the pipe and reaps the helper. NULL fine. */
void spill_ramlock_release(spill_ramlock *r);

#ifdef __cplusplus
}
#endif
#endif
