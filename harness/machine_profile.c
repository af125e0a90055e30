/* harness/machine_profile.c: memory cgroup + wired ballast + swap (see
 * machine_profile.h).
 *
 * Order of set-up, each step recorded in the state file before it is made:
 * swap (an existing area with room, else a file: fallocate, our own
 * version-1 swap header, swapon), the cgroup (a child of the process's own
 * memory cgroup, so whatever limits the process already lives under still
 * hold), its limits read back and compared with what was asked, the process
 * moved in, then the ballast forked inside it (it inherits the cgroup and its
 * mlocked pages are charged there and cannot be swapped). Memory the process
 * already had stays charged where it was (no move_charge): what the limit
 * sees is what the engine allocates from now on. Close undoes in reverse
 * order; reap undoes a dead runner's recorded resources.
 */
#define _GNU_SOURCE
#include "harness/machine_profile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static const char *const STATE_DIR_DEFAULT = "/run/spill";

const char *spill_machine_state_dir(void) {
  const char *d = getenv("SPILL_MACHINE_STATE_DIR");
  return d && d[0] ? d : STATE_DIR_DEFAULT;
}

/* ---- small file helpers ---- */

static int read_text(const char *path, char *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t got = 0;
  while (got + 1 < n) {
    ssize_t r = read(fd, buf + got, n - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = 0;
  return (int)got;
}

static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  ssize_t w = write(fd, text, n);
  int err = errno;
  close(fd);
  if (w != (ssize_t)n) {
    errno = w < 0 ? err : EIO;
    return -1;
  }
  return 0;
}

static int read_u64(const char *path, uint64_t *v) {
  char b[64];
  if (read_text(path, b, sizeof b) <= 0) return -1;
  if (!strncmp(b, "max", 3)) {
    *v = UINT64_MAX;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long x = strtoull(b, &end, 10);
  if (errno || end == b) return -1;
  *v = x;
  return 0;
}

static int cg_file(const spill_machine *m, const char *name, char *out, size_t n) {
  int w = snprintf(out, n, "%s/%s", m->cg_dir, name);
  return w > 0 && (size_t)w < n ? 0 : -1;
}

/* Value of key in a "key value" per line file (memory.stat, /proc/vmstat). */
static int stat_key(const char *text, const char *key, uint64_t *v) {
  size_t kl = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (!strncmp(p, key, kl) && p[kl] == ' ') {
      *v = strtoull(p + kl + 1, NULL, 10);
      return 0;
    }
  }
  return -1;
}

/* Start time (clock ticks since boot) of pid, 0 when it does not exist. */
static unsigned long long proc_start(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  if (read_text(path, buf, sizeof buf) <= 0) return 0;
  const char *p = strrchr(buf, ')'); /* comm may hold spaces */
  if (!p) return 0;
  unsigned long long v = 0;
  /* after ") " come fields 3..; starttime is field 22 */
  int field = 2;
  for (const char *q = p + 1; *q; q++) {
    if (*q == ' ') {
      field++;
      if (field == 22) {
        v = strtoull(q + 1, NULL, 10);
        break;
      }
    }
  }
  return v;
}

/* ---- the state file ---- */

static int state_write(const spill_machine *m, spill_err *e) {
  char tmp[PATH_MAX + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", m->state_file);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return spill_err_set(e, SPILL_E_IO, "machine profile: state file %s: %s", tmp, strerror(errno));
  char buf[3 * PATH_MAX + 128];
  int n = snprintf(buf, sizeof buf, "pid %d\nstart %llu\ncgroup %s\nhome %s\nswapfile %s\n",
                   (int)getpid(), proc_start(getpid()), m->cg_dir, m->cg_home, m->swap_file);
  int ok = n > 0 && (size_t)n < sizeof buf && write(fd, buf, (size_t)n) == n && fsync(fd) == 0;
  int err = errno;
  close(fd);
  if (!ok || rename(tmp, m->state_file) < 0) {
    unlink(tmp);
    return spill_err_set(e, SPILL_E_IO, "machine profile: state file %s: %s", m->state_file,
                         strerror(ok ? errno : err));
  }
  return SPILL_OK;
}

static void state_field(const char *text, const char *key, char *out, size_t n) {
  out[0] = 0;
  size_t kl = strlen(key);
  for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (!strncmp(p, key, kl) && p[kl] == ' ') {
      const char *v = p + kl + 1, *end = strchr(v, '\n');
      size_t l = end ? (size_t)(end - v) : strlen(v);
      if (l >= n) l = n - 1;
      memcpy(out, v, l);
      out[l] = 0;
      return;
    }
  }
}

/* ---- cgroup discovery ---- */

/* The memory controller's mount point and the process's cgroup under it. */
static int find_memory_cgroup(int *version, char *dir, size_t n, spill_err *e) {
  char cg[8192], mi[65536];
  if (read_text("/proc/self/cgroup", cg, sizeof cg) <= 0)
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "machine profile: /proc/self/cgroup unreadable");
  if (read_text("/proc/self/mountinfo", mi, sizeof mi) <= 0)
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "machine profile: /proc/self/mountinfo unreadable");
  char v1path[PATH_MAX] = "", v2path[PATH_MAX] = "";
  int have_v1 = 0, have_v2 = 0;
  for (char *line = cg; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c1 && c2) {
      *c2 = 0;
      const char *ctrls = c1 + 1, *path = c2 + 1;
      if (!strcmp(line, "0") && !ctrls[0]) {
        snprintf(v2path, sizeof v2path, "%s", path);
        have_v2 = 1;
      } else {
        char tmp[256];
        snprintf(tmp, sizeof tmp, ",%s,", ctrls);
        if (strstr(tmp, ",memory,")) {
          snprintf(v1path, sizeof v1path, "%s", path);
          have_v1 = 1;
        }
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  /* mountinfo: id parent maj:min root mountpoint opts [tags] - fstype src superopts */
  for (char *line = mi; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    char root[PATH_MAX], mnt[PATH_MAX], fstype[64], super[512];
    const char *dash = strstr(line, " - ");
    if (dash && sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) == 2 &&
        sscanf(dash + 3, "%63s %*s %511s", fstype, super) == 2) {
      char opts[520];
      snprintf(opts, sizeof opts, ",%s,", super);
      const char *path = NULL;
      int ver = 0;
      if (have_v1 && !strcmp(fstype, "cgroup") && strstr(opts, ",memory,")) path = v1path, ver = 1;
      else if (!have_v1 && have_v2 && !strcmp(fstype, "cgroup2")) path = v2path, ver = 2;
      if (path) {
        /* the process's path is relative to the hierarchy's root; the mount
         * shows the part of it below `root` */
        size_t rl = strlen(root);
        const char *rel = path;
        if (strcmp(root, "/") && !strncmp(path, root, rl)) rel = path + rl;
        int w = snprintf(dir, n, "%s%s", mnt, rel);
        if (w <= 0 || (size_t)w >= n) return spill_err_set(e, SPILL_E_IO, "machine profile: cgroup path too long");
        size_t dl = strlen(dir);
        while (dl > 1 && dir[dl - 1] == '/') dir[--dl] = 0;
        *version = ver;
        return SPILL_OK;
      }
    }
    line = nl ? nl + 1 : NULL;
  }
  return spill_err_set(e, SPILL_E_UNSUPPORTED,
                       "machine profile: no memory cgroup controller is mounted (neither cgroup v1 "
                       "with \"memory\" nor cgroup v2)");
}

/* ---- swap ---- */

/* Total and used bytes of active swap, and the active areas' names. */
static void swaps_read(uint64_t *total, uint64_t *used, char *names, size_t n) {
  char buf[8192];
  *total = *used = 0;
  if (names && n) names[0] = 0;
  if (read_text("/proc/swaps", buf, sizeof buf) <= 0) return;
  char *line = strchr(buf, '\n'); /* header */
  while (line && *++line) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    char name[PATH_MAX];
    unsigned long long size, u;
    if (sscanf(line, "%4095s %*s %llu %llu", name, &size, &u) == 3) {
      *total += size * 1024ull;
      *used += u * 1024ull;
      if (names && n) {
        size_t l = strlen(names);
        snprintf(names + l, n - l, "%s%s", l ? "," : "", name);
      }
    }
    line = nl;
  }
}

static int swap_active(const char *path) {
  char buf[8192];
  if (read_text("/proc/swaps", buf, sizeof buf) <= 0) return 0;
  size_t l = strlen(path);
  for (char *p = strstr(buf, path); p; p = strstr(p + 1, path))
    if ((p == buf || p[-1] == '\n') && (p[l] == ' ' || p[l] == '\t')) return 1;
  return 0;
}

/* Writes a version-1 swap header (what mkswap writes: version, last page,
 * no bad pages, a uuid, the SWAPSPACE2 magic at the end of page 0). */
static int write_swap_header(int fd, uint64_t bytes) {
  long page = sysconf(_SC_PAGESIZE);
  unsigned char *h = calloc(1, (size_t)page);
  if (!h) return -1;
  uint32_t version = 1, last_page = (uint32_t)(bytes / (uint64_t)page - 1), bad = 0;
  memcpy(h + 1024, &version, 4);
  memcpy(h + 1028, &last_page, 4);
  memcpy(h + 1032, &bad, 4);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
  for (int i = 0; i < 16; i++) { /* uuid: any distinct bytes serve */
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h[1036 + i] = (unsigned char)x;
  }
  memcpy(h + page - 10, "SWAPSPACE2", 10);
  ssize_t w = pwrite(fd, h, (size_t)page, 0);
  free(h);
  return w == page ? 0 : -1;
}

static int make_swap_file(spill_machine *m, const char *dir, uint64_t bytes, spill_err *e) {
  long page = sysconf(_SC_PAGESIZE);
  bytes -= bytes % (uint64_t)page;
  if (bytes < 10 * (uint64_t)page)
    return spill_err_set(e, SPILL_E_CONFIG, "machine.swap: %llu bytes is too small for a swap area",
                         (unsigned long long)bytes);
  static unsigned seq;
  /* absolute: /proc/swaps names areas by absolute path, and close and the
   * reaper find the area by that name (a relative name here left a results
   * directory's swap file on after its runner closed) */
  char abs[PATH_MAX];
  if (!realpath(dir && dir[0] ? dir : ".", abs))
    return spill_err_set(e, SPILL_E_IO, "machine.swap: swap directory %s: %s", dir, strerror(errno));
  int w = snprintf(m->swap_file, sizeof m->swap_file, "%s/.spill-swap-%d-%u", abs, (int)getpid(), seq++);
  if (w <= 0 || (size_t)w >= sizeof m->swap_file) {
    m->swap_file[0] = 0;
    return spill_err_set(e, SPILL_E_IO, "machine.swap: swap file path too long under %s", dir);
  }
  SPILL_TRY(state_write(m, e)); /* recorded before it exists */
  int fd = open(m->swap_file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    m->swap_file[0] = 0;
    return spill_err_set(e, SPILL_E_IO, "machine.swap: creating a swap file in %s: %s", dir, strerror(err));
  }
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  if (rc)
    return close(fd), spill_err_set(e, SPILL_E_IO, "machine.swap: allocating %.2f GiB for %s: %s",
                                    bytes / 1073741824.0, m->swap_file, strerror(rc));
  if (write_swap_header(fd, bytes) < 0 || fsync(fd) < 0)
    return close(fd), spill_err_set(e, SPILL_E_IO, "machine.swap: writing %s: %s", m->swap_file, strerror(errno));
  close(fd);
  if (swapon(m->swap_file, 0) < 0)
    return spill_err_set(e, SPILL_E_IO,
                         "machine.swap: swapon %s refused: %s (a filesystem that cannot hold swap "
                         "files, or swap disabled in this kernel)",
                         m->swap_file, strerror(errno));
  return SPILL_OK;
}

/* Turns the area off (the kernel refuses to unlink an active swap file)
 * and deletes it. */
/* Turns a swap file off and deletes it: 0, or -1 with errno when it is
 * still there. swapoff can fail for a moment (EINTR from a pending signal,
 * ENOMEM while the killed cgroup's pages are still being freed), and the
 * kernel refuses to unlink an active swap file (EPERM): retried for ~2 s. */
static int remove_swap_file(const char *path) {
  if (!path[0]) return 0;
  int err = 0;
  for (int tries = 0; tries < 20; tries++) {
    if ((swap_active(path) || path[0] != '/') && swapoff(path) < 0 && errno != EINVAL) err = errno;
    if (unlink(path) == 0 || errno == ENOENT) return 0;
    if (!err) err = errno;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  errno = err;
  return -1;
}

/* ---- cgroup ---- */

static int cg_set(spill_machine *m, const char *name, uint64_t v, spill_err *e) {
  char f[PATH_MAX + 64], s[32];
  if (cg_file(m, name, f, sizeof f) < 0) return spill_err_set(e, SPILL_E_IO, "cgroup path too long");
  if (v == UINT64_MAX) snprintf(s, sizeof s, "max");
  else snprintf(s, sizeof s, "%llu", (unsigned long long)v);
  if (write_text(f, s) < 0)
    return spill_err_set(e, SPILL_E_CONFIG, "machine profile: the kernel refused %s = %s: %s", f, s,
                         strerror(errno));
  return SPILL_OK;
}

/* Sets a byte limit and checks the kernel took it (it rounds to pages). */
static int cg_limit(spill_machine *m, const char *name, uint64_t v, uint64_t *took, spill_err *e) {
  SPILL_TRY(cg_set(m, name, v, e));
  char f[PATH_MAX + 64];
  cg_file(m, name, f, sizeof f);
  uint64_t got;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (read_u64(f, &got) < 0 || got != (v / page) * page)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "machine profile: the kernel did not take %s = %llu (it reads %llu)", f,
                         (unsigned long long)v, (unsigned long long)got);
  *took = got;
  return SPILL_OK;
}

static int move_to(const char *procs_file, spill_err *e) {
  char s[32];
  snprintf(s, sizeof s, "%d", (int)getpid());
  if (write_text(procs_file, s) < 0)
    return spill_err_set(e, SPILL_E_IO, "machine profile: moving pid %s into %s: %s", s, procs_file,
                         strerror(errno));
  return SPILL_OK;
}

/* Kills every process left in cgroup dir and removes it (up to ~5 s). */
static int cg_remove(const char *dir) {
  char procs[PATH_MAX + 32], buf[8192];
  snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
  for (int tries = 0; tries < 500; tries++) {
    if (rmdir(dir) == 0 || errno == ENOENT) return 0;
    if (read_text(procs, buf, sizeof buf) > 0)
      for (char *p = buf; *p;) {
        long pid = strtol(p, &p, 10);
        if (pid > 0 && pid != getpid()) kill((pid_t)pid, SIGKILL);
        while (*p == '\n') p++;
        if (!pid) break;
      }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return -1;
}

/* ---- public ---- */

void spill_machine_close(spill_machine *m) {
  if (!m) return;
  spill_ramlock_release(&m->ballast);
  if (m->cg_dir[0]) {
    if (m->cg_home[0]) {
      spill_err ignore = {0};
      move_to(m->cg_home, &ignore);
    }
    cg_remove(m->cg_dir);
    m->cg_dir[0] = 0;
  }
  m->leftover[0] = 0;
  if (remove_swap_file(m->swap_file) < 0) {
    /* kept in the state file: the next runner's reap tries again */
    snprintf(m->leftover, sizeof m->leftover, "swap file %s could not be removed (%s); it stays "
             "in %s for the next runner to clean up", m->swap_file, strerror(errno), m->state_file);
  } else if (m->state_file[0]) {
    unlink(m->state_file);
  }
  m->swap_file[0] = 0;
  m->state_file[0] = 0;
  m->up = 0;
}

static int check_spec(const spill_machine_spec *spec, spill_err *e) {
  if (!spec->ram) return spill_err_set(e, SPILL_E_CONFIG, "machine.ram: must be set (bytes > 0)");
  if (spec->wired >= spec->ram)
    return spill_err_set(e, SPILL_E_CONFIG, "machine.wired: %.2f GiB is not below machine.ram %.2f GiB",
                         spec->wired / 1073741824.0, spec->ram / 1073741824.0);
  if (spec->swappiness < -1 || spec->swappiness > 200)
    return spill_err_set(e, SPILL_E_CONFIG, "machine.swappiness: %d is not in [0, 200]", spec->swappiness);
  if (geteuid() != 0)
    return spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "machine profile: needs root (a memory cgroup, mlock and swapon); running as uid %d",
                         (int)geteuid());
  return SPILL_OK;
}

/* The process's memory cgroup, checked usable: *version, home dir. */
static int usable_cgroup(int *version, char *home, size_t n, spill_err *e) {
  SPILL_TRY(find_memory_cgroup(version, home, n, e));
  if (access(home, W_OK) < 0)
    return spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "machine profile: the memory cgroup %s is not writable (%s; inside Bazel's "
                         "sandbox the cgroup tree is read-only)",
                         home, strerror(errno));
  if (*version == 1) {
    char f[PATH_MAX + 64];
    snprintf(f, sizeof f, "%s/memory.memsw.limit_in_bytes", home);
    if (access(f, F_OK) < 0)
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "machine profile: cgroup v1 without swap accounting (%s missing: boot "
                           "with swapaccount=1)",
                           f);
  }
  return SPILL_OK;
}

int spill_machine_probe(int *version, char *home, size_t home_n, spill_err *e) {
  return usable_cgroup(version, home, home_n, e);
}

void spill_machine_swaps(uint64_t *total, uint64_t *used, char *names, size_t names_n) {
  swaps_read(total, used, names, names_n);
}

int spill_machine_check(const spill_machine_spec *spec, spill_err *e) {
  SPILL_TRY(check_spec(spec, e));
  int v;
  char home[PATH_MAX];
  SPILL_TRY(usable_cgroup(&v, home, sizeof home, e));
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  if (phys && spec->ram >= phys)
    return spill_err_set(e, SPILL_E_CONFIG, "machine.ram: %.2f GiB is not below this machine's %.2f GiB",
                         spec->ram / 1073741824.0, phys / 1073741824.0);
  return SPILL_OK;
}

int spill_machine_open(const spill_machine_spec *spec, const char *swap_dir, spill_machine *m,
                       spill_err *e) {
  memset(m, 0, sizeof *m);
  m->spec = *spec;
  SPILL_TRY(check_spec(spec, e));
  char home[PATH_MAX];
  SPILL_TRY(usable_cgroup(&m->cg_version, home, sizeof home, e));
  snprintf(m->cg_home, sizeof m->cg_home, "%s/cgroup.procs", home);
  const char *sd = spill_machine_state_dir();
  if (mkdir(sd, 0700) < 0 && errno != EEXIST)
    return spill_err_set(e, SPILL_E_IO, "machine profile: state directory %s: %s", sd, strerror(errno));
  static unsigned seq;
  unsigned my = seq++;
  snprintf(m->state_file, sizeof m->state_file, "%s/machine-%d-%u.state", sd, (int)getpid(), my);
  int w = snprintf(m->cg_dir, sizeof m->cg_dir, "%s/spill-machine-%d-%u", home, (int)getpid(), my);
  if (w <= 0 || (size_t)w >= sizeof m->cg_dir) {
    m->cg_dir[0] = 0;
    return spill_err_set(e, SPILL_E_IO, "machine profile: cgroup path too long under %s", home);
  }
  char cgdir[PATH_MAX];
  snprintf(cgdir, sizeof cgdir, "%s", m->cg_dir);
  m->cg_dir[0] = 0; /* not ours until made */
  int rc = state_write(m, e);
  if (rc < 0) return rc;

  /* swap */
  uint64_t used, free_swap;
  swaps_read(&m->swap_total, &used, NULL, 0);
  free_swap = m->swap_total - used;
  if (spec->swap > 0 && free_swap < spec->swap) {
    /* the header page holds no swapped pages: one more page gives `swap` */
    rc = make_swap_file(m, swap_dir, spec->swap - free_swap + (uint64_t)sysconf(_SC_PAGESIZE), e);
    if (rc < 0) goto fail;
  }
  swaps_read(&m->swap_total, &used, m->swap_devices, sizeof m->swap_devices);

  /* cgroup */
  snprintf(m->cg_dir, sizeof m->cg_dir, "%s", cgdir);
  if ((rc = state_write(m, e)) < 0) goto fail;
  if (mkdir(m->cg_dir, 0755) < 0) {
    rc = spill_err_set(e, SPILL_E_IO, "machine profile: creating cgroup %s: %s", m->cg_dir, strerror(errno));
    m->cg_dir[0] = 0;
    goto fail;
  }
  if (m->cg_version == 1) {
    if ((rc = cg_limit(m, "memory.limit_in_bytes", spec->ram, &m->limit_ram, e)) < 0) goto fail;
    if ((rc = cg_limit(m, "memory.memsw.limit_in_bytes", spec->ram + spec->swap, &m->limit_ram_swap, e)) < 0)
      goto fail;
    char f[PATH_MAX + 64];
    if (spec->swappiness >= 0 && (rc = cg_set(m, "memory.swappiness", (uint64_t)spec->swappiness, e)) < 0)
      goto fail;
    cg_file(m, "memory.swappiness", f, sizeof f);
    uint64_t sw = 0;
    read_u64(f, &sw);
    m->swappiness = (int)sw;
    if (spec->swappiness >= 0 && m->swappiness != spec->swappiness) {
      rc = spill_err_set(e, SPILL_E_CONFIG, "machine profile: the kernel did not take swappiness %d",
                         spec->swappiness);
      goto fail;
    }
  } else {
    uint64_t s;
    if ((rc = cg_limit(m, "memory.max", spec->ram, &m->limit_ram, e)) < 0) goto fail;
    if ((rc = cg_limit(m, "memory.swap.max", spec->swap, &s, e)) < 0) goto fail;
    m->limit_ram_swap = m->limit_ram + s;
    if (spec->swappiness >= 0) {
      rc = spill_err_set(e, SPILL_E_UNSUPPORTED,
                         "machine.swappiness: cgroup v2 has no per-cgroup swappiness (set "
                         "vm.swappiness instead)");
      goto fail;
    }
    uint64_t sw = 0;
    read_u64("/proc/sys/vm/swappiness", &sw);
    m->swappiness = (int)sw;
  }
  /* The ballast is forked from inside the cgroup (it is charged there from
   * its first page), then the caller moves back home: the engine runs in a
   * child that joins with spill_machine_enter, so an OOM kill ends that
   * child and not the caller. */
  if (spec->wired) {
    char procs[PATH_MAX + 64];
    cg_file(m, "cgroup.procs", procs, sizeof procs);
    if ((rc = move_to(procs, e)) < 0) goto fail;
    rc = spill_ramlock_start(spec->wired, &m->ballast, e);
    spill_err ig = {0};
    if (move_to(m->cg_home, &ig) < 0 && rc >= 0)
      rc = spill_err_set(e, SPILL_E_IO, "machine profile: moving back to %s: %s", m->cg_home, ig.msg);
    if (rc < 0) {
      if (!m->ballast.pid) spill_err_prefix(e, "machine.wired");
      goto fail;
    }
  }
  m->up = 1;
  return SPILL_OK;
fail:
  spill_machine_close(m);
  return rc;
}

int spill_machine_enter(const spill_machine *m, spill_err *e) {
  if (!m->up) return spill_err_set(e, SPILL_E_INVALID_ARG, "machine profile is not up");
  /* the OOM killer's first choice, before the ballast (raising needs no
   * capability; lowering the ballast's would need CAP_SYS_RESOURCE) */
  if (write_text("/proc/self/oom_score_adj", "1000") < 0)
    return spill_err_set(e, SPILL_E_IO, "machine profile: /proc/self/oom_score_adj: %s", strerror(errno));
  char procs[PATH_MAX + 64];
  cg_file(m, "cgroup.procs", procs, sizeof procs);
  return move_to(procs, e);
}

int spill_machine_sample(const spill_machine *m, spill_machine_counters *c, spill_err *e) {
  memset(c, 0, sizeof *c);
  if (!m->up) return spill_err_set(e, SPILL_E_INVALID_ARG, "machine profile is not up");
  char f[PATH_MAX + 64], buf[16384];
  cg_file(m, "memory.stat", f, sizeof f);
  if (read_text(f, buf, sizeof buf) <= 0) return spill_err_set(e, SPILL_E_IO, "%s: %s", f, strerror(errno));
  if (stat_key(buf, m->cg_version == 1 ? "total_pgmajfault" : "pgmajfault", &c->major_faults) < 0)
    stat_key(buf, "pgmajfault", &c->major_faults);
  if (m->cg_version == 1) {
    cg_file(m, "memory.usage_in_bytes", f, sizeof f);
    read_u64(f, &c->usage);
    cg_file(m, "memory.memsw.usage_in_bytes", f, sizeof f);
    read_u64(f, &c->usage_swap);
    cg_file(m, "memory.failcnt", f, sizeof f);
    read_u64(f, &c->failcnt);
    uint64_t memsw = 0; /* with swap 0 the memory+swap limit is the one hit */
    cg_file(m, "memory.memsw.failcnt", f, sizeof f);
    read_u64(f, &memsw);
    c->failcnt += memsw;
    cg_file(m, "memory.oom_control", f, sizeof f); /* "oom_kill N" since Linux 4.13 */
    if (read_text(f, buf, sizeof buf) > 0) stat_key(buf, "oom_kill", &c->oom_kills);
  } else {
    uint64_t s = 0;
    cg_file(m, "memory.current", f, sizeof f);
    read_u64(f, &c->usage);
    cg_file(m, "memory.swap.current", f, sizeof f);
    read_u64(f, &s);
    c->usage_swap = c->usage + s;
    cg_file(m, "memory.events", f, sizeof f);
    if (read_text(f, buf, sizeof buf) > 0) {
      stat_key(buf, "max", &c->failcnt);
      stat_key(buf, "oom_kill", &c->oom_kills);
    }
  }
  if (read_text("/proc/vmstat", buf, sizeof buf) > 0) {
    stat_key(buf, "pswpin", &c->swap_ins);
    stat_key(buf, "pswpout", &c->swap_outs);
  }
  return SPILL_OK;
}

int spill_machine_reap_stale(char *what, size_t what_n, spill_err *e) {
  if (what && what_n) what[0] = 0;
  const char *sd = spill_machine_state_dir();
  DIR *d = opendir(sd);
  if (!d) return errno == ENOENT ? 0 : spill_err_set(e, SPILL_E_IO, "%s: %s", sd, strerror(errno));
  int cleaned = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (strncmp(de->d_name, "machine-", 8) || l < 6 || strcmp(de->d_name + l - 6, ".state")) continue;
    char path[PATH_MAX + 256], text[3 * PATH_MAX + 256], v[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", sd, de->d_name);
    if (read_text(path, text, sizeof text) <= 0) continue;
    state_field(text, "pid", v, sizeof v);
    pid_t pid = (pid_t)atoi(v);
    state_field(text, "start", v, sizeof v);
    unsigned long long start = strtoull(v, NULL, 10);
    if (pid > 0 && start && proc_start(pid) == start) continue; /* its runner is alive */
    char cg[PATH_MAX], sw[PATH_MAX], line[3 * PATH_MAX];
    state_field(text, "cgroup", cg, sizeof cg);
    state_field(text, "swapfile", sw, sizeof sw);
    int n = snprintf(line, sizeof line, "machine profile: cleaned up after runner pid %d (it died without closing):",
                     (int)pid);
    if (cg[0] && access(cg, F_OK) == 0) {
      int ok = cg_remove(cg) == 0;
      n += snprintf(line + n, sizeof line - (size_t)n, " cgroup %s %s;", cg, ok ? "removed" : "NOT removable");
    }
    if (sw[0] && access(sw, F_OK) == 0) {
      remove_swap_file(sw);
      n += snprintf(line + n, sizeof line - (size_t)n, " swap file %s %s;", sw,
                    access(sw, F_OK) < 0 ? "turned off and deleted" : "NOT removable");
    }
    unlink(path);
    char tmp[PATH_MAX + 300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    cleaned++;
    if (what && what_n) {
      size_t wl = strlen(what);
      snprintf(what + wl, what_n - wl, "%s%s", wl ? "\n" : "", line);
    }
  }
  closedir(d);
  /* cgroups of ours with no state file whose runner is gone (a state
   * directory that was deleted, e.g. a killed test's): emptied and removed */
  int v;
  char home[PATH_MAX];
  spill_err ignore = {0};
  if (usable_cgroup(&v, home, sizeof home, &ignore) == SPILL_OK && (d = opendir(home))) {
    while ((de = readdir(d))) {
      int pid;
      unsigned n;
      if (sscanf(de->d_name, "spill-machine-%d-%u", &pid, &n) != 2 || pid <= 0) continue;
      if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to judge) */
      char cg[PATH_MAX + 300], line[PATH_MAX + 400];
      snprintf(cg, sizeof cg, "%s/%s", home, de->d_name);
      int ok = cg_remove(cg) == 0;
      snprintf(line, sizeof line, "machine profile: removed cgroup %s of runner pid %d (dead, no state file)%s",
               cg, pid, ok ? "" : ": NOT removable");
      cleaned++;
      if (what && what_n) {
        size_t wl = strlen(what);
        snprintf(what + wl, what_n - wl, "%s%s", wl ? "\n" : "", line);
      }
    }
    closedir(d);
  }
  return cleaned;
}
