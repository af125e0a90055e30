/* harness/emulate_ram.c: the RAM-locking helper process (see emulate_ram.h).
 *
 * The child only calls async-signal-safe functions after fork (prctl, mmap,
 * mlock, read, write, _exit), so forking from a process that has threads
 * would still be safe, though the runner forks before opening the engine.
 * It reports a one-int status on a pipe: 0 when locked, else errno.
 */
#define _GNU_SOURCE
#include "harness/emulate_ram.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int spill_ramlock_meminfo(uint64_t *total, uint64_t *available, spill_err *e) {
  /* MemTotal is the kernel's total RAM pages (sysconf reads the same);
   * MemAvailable comes from the engine's one /proc/meminfo reader */
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  *total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  *available = spill_available_ram();
  if (!*total || !*available) return spill_err_set(e, SPILL_E_IO, "/proc/meminfo: no MemTotal/MemAvailable");
  return SPILL_OK;
}

int spill_ramlock_plan(uint64_t emulate, uint64_t *lock_bytes, spill_err *e) {
  uint64_t total, avail;
  SPILL_TRY(spill_ramlock_meminfo(&total, &avail, e));
  uint64_t usable = spill_usable_ram();
  if (!usable || usable > total) usable = total;
  if (emulate >= usable)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "machine.emulate_ram: %.2f GiB is not below this machine's %.2f GiB",
                         emulate / 1073741824.0, usable / 1073741824.0);
  uint64_t lock = usable - emulate;
  const uint64_t margin = 1ull << 30;
  if (avail < margin || lock > avail - margin)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "machine.emulate_ram: locking %.2f GiB would leave %.2f GiB of the "
                         "%.2f GiB available (at least 1 GiB must stay free); refusing",
                         lock / 1073741824.0,
                         avail > lock ? (avail - lock) / 1073741824.0 : 0.0,
                         avail / 1073741824.0);
  *lock_bytes = lock;
  return SPILL_OK;
}

static void helper(uint64_t bytes, pid_t parent, int status_fd, int alive_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0); /* the parent died before prctl */
  prctl(PR_SET_NAME, "spill-ramlock");
  struct rlimit rl = {RLIM_INFINITY, RLIM_INFINITY};
  setrlimit(RLIMIT_MEMLOCK, &rl); /* best effort: root may raise it */
  int err = 0;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) err = errno;
  /* The raw syscall, not mlock(): sanitizer runtimes (ASan) intercept
   * mlock() as a silent no-op, which would make emulate_ram lock nothing. */
  else if (syscall(SYS_mlock, p, bytes) < 0) err = errno;
  ssize_t w = write(status_fd, &err, sizeof err);
  (void)w;
  close(status_fd);
  if (err) _exit(1);
  char c;
  while (read(alive_fd, &c, 1) != 0) {
    /* EOF (0) means the runner closed the pipe or died; EINTR retries */
  }
  _exit(0);
}

int spill_ramlock_start(uint64_t lock_bytes, spill_ramlock *out, spill_err *e) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  int st[2], alive[2];
  if (pipe2(st, O_CLOEXEC) < 0) return spill_err_set(e, SPILL_E_IO, "pipe: %s", strerror(errno));
  if (pipe2(alive, O_CLOEXEC) < 0) {
    close(st[0]), close(st[1]);
    return spill_err_set(e, SPILL_E_IO, "pipe: %s", strerror(errno));
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(st[0]), close(st[1]), close(alive[0]), close(alive[1]);
    return spill_err_set(e, SPILL_E_IO, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    close(st[0]);
    close(alive[1]);
    helper(lock_bytes, parent, st[1], alive[0]);
  }
  close(st[1]);
  close(alive[0]);
  int err = -1;
  ssize_t r;
  do r = read(st[0], &err, sizeof err);
  while (r < 0 && errno == EINTR);
  close(st[0]);
  if (r != (ssize_t)sizeof err || err != 0) {
    close(alive[1]);
    waitpid(pid, NULL, 0);
    if (r != (ssize_t)sizeof err)
      return spill_err_set(e, SPILL_E_IO, "emulate_ram helper died before locking memory");
    return spill_err_set(e, SPILL_E_IO, "emulate_ram helper: locking %.2f GiB: %s",
                         lock_bytes / 1073741824.0, strerror(err));
  }
  out->pid = pid;
  out->fd = alive[1];
  out->locked = lock_bytes;
  return SPILL_OK;
}

int spill_ramlock_check(spill_ramlock *r, spill_err *e) {
  if (!r || !r->pid) return SPILL_OK;
  int status = 0;
  pid_t w;
  do w = waitpid(r->pid, &status, WNOHANG);
  while (w < 0 && errno == EINTR);
  if (w <= 0) return SPILL_OK; /* running, or not our child (ECHILD): nothing to tell */
  const double gib = r->locked / 1073741824.0;
  close(r->fd);
  r->pid = 0;
  r->fd = -1;
  r->locked = 0;
  if (WIFSIGNALED(status))
    return spill_err_set(e, SPILL_E_IO,
                         "emulate_ram: the helper holding %.2f GiB locked was killed by signal "
                         "%d (%s)%s, so the machine no longer emulates the cell's RAM",
                         gib, WTERMSIG(status), strsignal(WTERMSIG(status)),
                         WTERMSIG(status) == SIGKILL
                             ? "; most likely the kernel's OOM killer (dmesg): other processes "
                               "need the memory the lock assumed free"
                             : "");
  return spill_err_set(e, SPILL_E_IO,
                       "emulate_ram: the helper holding %.2f GiB locked exited (status %d), so "
                       "the machine no longer emulates the cell's RAM",
                       gib, WIFEXITED(status) ? WEXITSTATUS(status) : status);
}

void spill_ramlock_release(spill_ramlock *r) {
  if (!r || !r->pid) return;
  close(r->fd);
  int status;
  while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR) {
  }
  r->pid = 0;
  r->fd = -1;
  r->locked = 0;
}
