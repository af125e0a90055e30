/* harness/machine_profile.h: a machine that pages like the Mac (issue 29).
 *
 * `machine.emulate_ram` (emulate_ram.h) locks the rest of RAM with no swap,
 * so Linux can never page out the engine's anonymous memory. A machine
 * profile is the other emulation: a memory cgroup around the engine with a
 * limit (`ram`), a ballast process inside the same cgroup that touches and
 * locks `wired` bytes (the part of the Mac's memory that the OS and its
 * applications hold, which cannot be swapped), and swap the cgroup may use
 * (`swap`): an existing swap area when it has room, else a swap file this
 * module creates and removes. The engine then runs inside its budget while
 * the machine is not, and cache hits can become page faults.
 *
 * Set-up either succeeds whole or fails with a named error and undoes what
 * it did: never a silent fallback to another emulation. Every resource is
 * recorded in a state file (/run/spill/machine-PID.state) before it is
 * made, so spill_machine_reap_stale undoes what a killed runner (kill -9)
 * left. Needs root and a memory controller (cgroup v1 with swap accounting,
 * or v2). Not thread-safe; open it before starting threads (the ballast is
 * a fork). Depends on the public header and emulate_ram only.
 */
#ifndef SPILL_HARNESS_MACHINE_PROFILE_H
#define SPILL_HARNESS_MACHINE_PROFILE_H

#include <limits.h>
#include <stdint.h>

#include "engine/spill.h"
#include "harness/emulate_ram.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_machine_spec {
  uint64_t ram;   /* the cgroup's memory limit, bytes (> wired) */
  uint64_t wired; /* bytes locked by the ballast inside the cgroup (0 = none) */
  uint64_t swap;  /* swap the cgroup may use, bytes (0 = none) */
  int swappiness; /* the cgroup's vm.swappiness (v1), 0..200; -1 = the kernel's */
} spill_machine_spec;

typedef struct spill_machine {
  int cg_version;              /* 1 or 2 */
  char cg_dir[PATH_MAX];       /* the cgroup made for this machine */
  char cg_home[PATH_MAX];      /* the cgroup the process came from */
  spill_ramlock ballast;       /* the wired reserve (inside the cgroup) */
  char swap_file[PATH_MAX];    /* a swap file this module made ("" = none) */
  char swap_devices[512];      /* what swap was active, from /proc/swaps */
  uint64_t swap_total;         /* bytes of swap active while up */
  uint64_t limit_ram;          /* limits as the kernel took them (read back) */
  uint64_t limit_ram_swap;     /* v1: memsw limit; v2: memory.swap.max + ram */
  int swappiness;              /* effective (cgroup's on v1, vm.swappiness on v2) */
  char state_file[PATH_MAX];
  char leftover[2 * PATH_MAX + 128]; /* after close: what it could not undo ("" = all undone) */
  spill_machine_spec spec;
  int up;
} spill_machine;

/* Counters of the machine while up: the cgroup's major faults, the
 * system's swap-ins and swap-outs in pages (/proc/vmstat: pswpin/pswpout;
 * system-wide, since cgroup v1 has no per-cgroup count), the cgroup's
 * memory and memory+swap usage, and how often a limit was hit (v1: the
 * memory and the memory+swap limit's failcnt summed; v2: memory.events max). */
typedef struct spill_machine_counters {
  uint64_t major_faults;
  uint64_t swap_ins, swap_outs;
  uint64_t usage, usage_swap, failcnt;
  uint64_t oom_kills; /* processes the cgroup's OOM killer ended */
} spill_machine_counters;

/* What can be checked without making anything: the spec is possible, the
 * process is root, a memory controller with swap accounting is mounted and
 * its cgroup is writable, and ram is below this machine's RAM. */
int spill_machine_check(const spill_machine_spec *spec, spill_err *e);
/* Sets the machine up: swap, the cgroup with its limits and the ballast
 * inside it (protected from the OOM killer). The calling process stays
 * where it was: what should run in the machine joins it with
 * spill_machine_enter (the runner forks a child per run, so an OOM kill
 * ends the run, not the runner). swap_dir is where a swap file is made when
 * the active swap has too little room (the results' filesystem). On failure
 * nothing of it is left. */
int spill_machine_open(const spill_machine_spec *spec, const char *swap_dir, spill_machine *m,
                       spill_err *e);
/* Moves the calling process into the machine's cgroup (memory it touches
 * from then on counts against the machine's limits) and makes it the OOM
 * killer's first choice (oom_score_adj 1000: never the ballast). */
int spill_machine_enter(const spill_machine *m, spill_err *e);
/* Samples the counters (cumulative; subtract two samples). */
int spill_machine_sample(const spill_machine *m, spill_machine_counters *c, spill_err *e);
/* Moves the calling process home (if it entered), stops the ballast,
 * removes the cgroup, turns the swap file off and deletes it, removes the
 * state file. A swap file that cannot be removed (retried ~2 s) keeps the
 * state file, for the next reap, and m->leftover says so. NULL fine. */
void spill_machine_close(spill_machine *m);
/* Undoes what runners that died without closing their machine left (their
 * state files name a dead process). what gets one line per cleaned runner
 * ("" when there was nothing). Returns the number cleaned, or an error. */
int spill_machine_reap_stale(char *what, size_t what_n, spill_err *e);
/* The memory controller this process would use: cgroup version and the
 * directory of its own cgroup (checked usable: root, mounted, writable, swap
 * accounting on v1). For env.json. */
int spill_machine_probe(int *version, char *home, size_t home_n, spill_err *e);
/* Active swap (/proc/swaps): total and used bytes, area names joined by ','. */
void spill_machine_swaps(uint64_t *total, uint64_t *used, char *names, size_t names_n);
/* Where state files live (tests may point it elsewhere: SPILL_MACHINE_STATE_DIR). */
const char *spill_machine_state_dir(void);

#ifdef __cplusplus
}
#endif
#endif
