/* engine/spill_probe.c: spill_disk_probe (engine/spill.h), the one O_DIRECT
 * read-bandwidth probe of the device under a model, and
 * spill_io_backend_choose, the one place io_backend auto is decided.
 *
 * Two modes share the open, the aligned buffer, the pread loop and the
 * timing: records (random whole expert records of the model's banks, or of
 * a given list, `threads` threads each with one pread in flight, until a
 * deadline; `spill roofline`'s disk leg) and sequential (one pass over the
 * model directory's largest file from its start in fixed blocks, up to a
 * byte limit or EOF; the experiment runner's env.json). The page cache is
 * bypassed, so a probe measures the device (or what sits in front of it: a
 * VM host's cache, a SAN). Never prints.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/clock.h"
#include "engine/format/container.h"
#include "engine/io/reader.h"
#include "engine/spill.h"

#define PROBE_MAX_THREADS 64
#define PROBE_LAT_KEEP 4096

typedef struct probe {
  int *fds;
  int n_fds;
  uint32_t n_experts;
  uint64_t record_bytes, data_offset;
  uint64_t deadline_ns;
  /* NULL: random records of every bank; else records drawn from this list
   * (bank << 32 | expert), the ones a workload routed to */
  const uint64_t *pairs;
  size_t n_pairs;
  /* per-thread results */
  uint64_t bytes[PROBE_MAX_THREADS], reads[PROBE_MAX_THREADS];
  int failed[PROBE_MAX_THREADS];
  uint64_t lat_ns[PROBE_MAX_THREADS][PROBE_LAT_KEEP];
} probe;

typedef struct probe_arg {
  probe *p;
  int t;
} probe_arg;

/* Reads n bytes at off into buf (short reads continued); 0 or -1. */
static int pread_full(int fd, void *buf, uint64_t n, off_t off) {
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
    if (r <= 0) return -1;
    done += (uint64_t)r;
  }
  return 0;
}

static void *record_thread(void *arg) {
  probe_arg *a = arg;
  probe *p = a->p;
  const int t = a->t;
  void *buf = spill_alloc_nozero(p->record_bytes, 4096);
  if (!buf) {
    p->failed[t] = 1;
    return NULL;
  }
  uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
  while (spill_clock_ns() < p->deadline_ns) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    int b;
    uint64_t ex;
    if (p->pairs) {
      const uint64_t pr = p->pairs[(x >> 11) % p->n_pairs];
      b = (int)(pr >> 32);
      ex = pr & 0xffffffffu;
    } else {
      b = (int)(x % (uint64_t)p->n_fds);
      ex = (x >> 20) % p->n_experts;
    }
    const off_t off = (off_t)(p->data_offset + ex * p->record_bytes);
    const uint64_t t0 = spill_clock_ns();
    if (pread_full(p->fds[b], buf, p->record_bytes, off) < 0) {
      p->failed[t] = 1;
      break;
    }
    p->lat_ns[t][p->reads[t] % PROBE_LAT_KEEP] = spill_clock_ns() - t0;
    p->bytes[t] += p->record_bytes;
    p->reads[t]++;
  }
  spill_free(buf, p->record_bytes);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Runs `threads` record readers until the deadline and fills r. */
static int run_record_threads(probe *p, const char *dir, int threads, double seconds,
                              spill_disk_probe_result *r, spill_err *e) {
  pthread_t th[PROBE_MAX_THREADS];
  probe_arg args[PROBE_MAX_THREADS];
  const uint64_t t0 = spill_clock_ns();
  p->deadline_ns = t0 + (uint64_t)(seconds * 1e9);
  int started = 0;
  for (int t = 0; t < threads; t++) {
    args[t].p = p;
    args[t].t = t;
    if (pthread_create(&th[t], NULL, record_thread, &args[t]) != 0) break;
    started++;
  }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  const double el = (double)(spill_clock_ns() - t0) / 1e9;
  uint64_t bytes = 0, reads = 0;
  int failed = started < threads;
  for (int t = 0; t < started; t++) {
    bytes += p->bytes[t];
    reads += p->reads[t];
    failed |= p->failed[t];
  }
  SPILL_FAIL_IF(e, failed || reads == 0, SPILL_E_IO,
                "disk probe: failed on %s (O_DIRECT reads)", dir);
  /* median latency over the kept samples (the last 4096 per thread) */
  uint64_t n_lat = 0;
  uint64_t *lat = malloc(sizeof(uint64_t) * PROBE_LAT_KEEP * (size_t)started);
  if (lat) {
    for (int t = 0; t < started; t++) {
      const uint64_t k = p->reads[t] < PROBE_LAT_KEEP ? p->reads[t] : PROBE_LAT_KEEP;
      memcpy(lat + n_lat, p->lat_ns[t], k * sizeof(uint64_t));
      n_lat += k;
    }
    qsort(lat, n_lat, sizeof *lat, cmp_u64);
    r->p50_ms = n_lat ? lat[n_lat / 2] / 1e6 : 0;
    free(lat);
  }
  r->record_bytes = p->record_bytes;
  r->threads = started;
  r->bytes = bytes;
  r->reads = reads;
  r->bytes_per_s = (double)bytes / el;
  r->reads_per_s = (double)reads / el;
  return SPILL_OK;
}

static int probe_records(const char *dir, const spill_disk_probe_opts *o,
                         spill_disk_probe_result *r, spill_err *e) {
  int threads = o->threads > 0 ? o->threads : 8;
  if (threads > PROBE_MAX_THREADS) threads = PROBE_MAX_THREADS;
  const double seconds = o->seconds > 0 ? o->seconds : 3.0;
  SPILL_FAIL_IF(e, o->records && !o->n_records, SPILL_E_INVALID_ARG,
                "disk probe: empty record list");
  spill_container c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(spill_container_open(dir, &c, e));
  int rc = SPILL_OK;
  probe *p = calloc(1, sizeof *p);
  if (!p || c.m.n_banks < 1) {
    rc = spill_err_set(e, p ? SPILL_E_INVALID_ARG : SPILL_E_NOMEM,
                       p ? "disk probe: %s has no expert banks" : "disk probe: state (%s)", dir);
    goto out;
  }
  p->n_experts = c.m.banks[0].n_experts;
  p->record_bytes = c.m.banks[0].record_bytes;
  p->data_offset = c.m.banks[0].data_offset;
  p->pairs = o->records;
  p->n_pairs = o->records ? o->n_records : 0;
  for (size_t i = 0; i < p->n_pairs; i++)
    if ((int)(p->pairs[i] >> 32) >= c.m.n_banks || (p->pairs[i] & 0xffffffffu) >= p->n_experts) {
      rc = spill_err_set(e, SPILL_E_INVALID_ARG, "disk probe: record %zu out of range", i);
      goto out;
    }
  p->fds = malloc((size_t)c.m.n_banks * sizeof *p->fds);
  if (!p->fds) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "disk probe: fds");
    goto out;
  }
  for (int b = 0; b < c.m.n_banks; b++) p->fds[b] = -1;
  p->n_fds = c.m.n_banks;
  for (int b = 0; b < c.m.n_banks; b++) {
    char path[4096];
    if ((rc = spill_container_path(&c, c.m.banks[b].file, path, sizeof path, e)) < 0) goto out;
    p->fds[b] = open(path, O_RDONLY | O_DIRECT);
    if (p->fds[b] < 0) {
      rc = spill_err_set(e, SPILL_E_IO, "disk probe: cannot open %s with O_DIRECT", path);
      goto out;
    }
  }
  rc = run_record_threads(p, dir, threads, seconds, r, e);
out:
  if (p && p->fds)
    for (int b = 0; b < p->n_fds; b++)
      if (p->fds[b] >= 0) close(p->fds[b]);
  if (p) free(p->fds);
  free(p);
  spill_container_close(&c);
  return rc;
}

/* The largest regular file directly in dir (names starting with '.'
 * skipped): for a model, an expert bank. */
static int largest_file(const char *dir, char *out, size_t n, spill_err *e) {
  DIR *d = opendir(dir);
  SPILL_FAIL_IF(e, !d, SPILL_E_IO, "disk probe: cannot read directory %s", dir);
  char best[1400] = "";
  off_t best_size = 0;
  struct dirent *ent;
  while ((ent = readdir(d))) {
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
    struct stat st;
    if (ent->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size > best_size) {
      best_size = st.st_size;
      snprintf(best, sizeof best, "%s", p);
    }
  }
  closedir(d);
  SPILL_FAIL_IF(e, !best[0], SPILL_E_IO, "disk probe: no file to read in %s", dir);
  snprintf(out, n, "%s", best);
  return SPILL_OK;
}

static int probe_sequential(const char *dir, const spill_disk_probe_opts *o,
                            spill_disk_probe_result *r, spill_err *e) {
  const uint64_t blk = o->block_bytes ? o->block_bytes : 4u << 20;
  const uint64_t limit = o->max_bytes ? o->max_bytes : 256ull << 20;
  SPILL_TRY(largest_file(dir, r->file, sizeof r->file, e));
  int fd = open(r->file, O_RDONLY | O_DIRECT);
  SPILL_FAIL_IF(e, fd < 0, SPILL_E_IO, "disk probe: cannot open %s with O_DIRECT", r->file);
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, (size_t)blk)) {
    close(fd);
    return spill_err_set(e, SPILL_E_NOMEM, "disk probe: buffer of %llu bytes",
                         (unsigned long long)blk);
  }
  uint64_t done = 0, reads = 0;
  const uint64_t t0 = spill_clock_ns();
  while (done < limit) {
    ssize_t n = pread(fd, buf, (size_t)blk, (off_t)done);
    if (n <= 0) break;
    done += (uint64_t)n;
    reads++;
    if ((uint64_t)n < blk) break;
  }
  const double s = (double)(spill_clock_ns() - t0) / 1e9;
  free(buf);
  close(fd);
  r->threads = 1;
  r->bytes = done;
  r->reads = reads;
  r->bytes_per_s = s > 0 ? (double)done / s : 0;
  r->reads_per_s = s > 0 ? (double)reads / s : 0;
  return SPILL_OK;
}

int spill_disk_probe(const char *model_dir, const spill_disk_probe_opts *o,
                     spill_disk_probe_result *out, spill_err *e) {
  SPILL_FAIL_IF(e, !model_dir || !out, SPILL_E_INVALID_ARG, "disk probe: NULL argument");
  memset(out, 0, sizeof *out);
  spill_disk_probe_opts d;
  memset(&d, 0, sizeof d);
  if (o) d = *o;
  if (d.mode == SPILL_PROBE_SEQUENTIAL) return probe_sequential(model_dir, &d, out, e);
  SPILL_FAIL_IF(e, d.mode != SPILL_PROBE_RECORDS, SPILL_E_INVALID_ARG,
                "disk probe: unknown mode %d", (int)d.mode);
  return probe_records(model_dir, &d, out, e);
}

/* ------------------------------------------------------------ io_backend auto */

spill_io_backend_kind spill_io_backend_choose(spill_io_backend_kind asked, spill_storage storage,
                                              int io_depth, char *why, size_t n) {
  char dummy[8];
  if (!why || n == 0) why = dummy, n = sizeof dummy;
  if (asked != SPILL_IO_AUTO) {
    snprintf(why, n, "set: io_backend %s", spill_io_backend_kind_name(asked));
    return asked;
  }
  if (storage == SPILL_STORAGE_MMAP) {
    snprintf(why, n, "auto: storage mmap reads through page faults; io_uring has no reads to queue");
    return SPILL_IO_PREAD;
  }
  /* The ring the stream would open: same backend, depth and mode. */
  spill_io_opts o = {0};
  o.backend = SPILL_IO_BACKEND_URING;
  o.mode = storage == SPILL_STORAGE_PAGECACHE ? SPILL_IO_MODE_PAGECACHE : SPILL_IO_MODE_DIRECT;
  o.depth = io_depth;
  o.max_files = 1;
  spill_io *io = NULL;
  spill_err e = {0};
  int rc = spill_io_open(&o, &io, &e);
  spill_io_close(io);
  if (rc == SPILL_OK) {
    snprintf(why, n, "auto: io_uring available");
    return SPILL_IO_URING;
  }
  snprintf(why, n, "auto: io_uring refused: %s", e.msg);
  return SPILL_IO_PREAD;
}
