/* engine/io/reader.c: the front of the reader: options, files (O_DIRECT
 * with buffered fallback, mappings), request validation, counters, error
 * descriptions and page-cache eviction; submit, wait and the lifetime go
 * through the backend ops table (one row per backend: reader_pread.c,
 * reader_uring.c), which move requests through the device. What both
 * backends share (attempts and faults, throttle, the completion ring,
 * latency) is reader_core.c, below them; this file is above all three.
 */
#define _GNU_SOURCE
#include "engine/io/reader_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/clock.h"
#include "engine/base/safe_file.h"

/* The backend ops table, indexed by spill_io_backend. */
static const spill_io_backend_ops *const backends[] = {
    [SPILL_IO_BACKEND_PREAD] = &spill_io_pread_ops,
    [SPILL_IO_BACKEND_URING] = &spill_io_uring_ops,
};
#define N_BACKENDS (int)(sizeof backends / sizeof backends[0])

static const spill_io_backend_ops *backend_ops(spill_io_backend b) {
  return (int)b >= 0 && (int)b < N_BACKENDS ? backends[b] : NULL;
}

const char *spill_io_backend_name(spill_io_backend b) {
  const spill_io_backend_ops *ops = backend_ops(b);
  return ops ? ops->name : "unknown";
}

const char *spill_io_mode_name(spill_io_mode m) {
  switch (m) {
    case SPILL_IO_MODE_DIRECT: return "direct";
    case SPILL_IO_MODE_PAGECACHE: return "pagecache";
    case SPILL_IO_MODE_MMAP: return "mmap";
  }
  return "unknown";
}

static const char *errno_str(int e, char *buf, size_t n) {
  return strerror_r(e, buf, n); /* GNU variant: returns the message */
}

/* ---- open / close ---- */

int spill_io_open(const spill_io_opts *opts, spill_io **out, spill_err *err) {
  SPILL_FAIL_IF(err, opts == NULL || out == NULL, SPILL_E_INVALID_ARG,
                "spill_io_open: NULL argument");
  *out = NULL;
  spill_io_opts o = *opts;
  SPILL_FAIL_IF(err, !backend_ops(o.backend), SPILL_E_INVALID_ARG, "io: unknown backend %d",
                (int)o.backend);
  SPILL_FAIL_IF(err,
                o.mode != SPILL_IO_MODE_DIRECT &&
                    o.mode != SPILL_IO_MODE_PAGECACHE &&
                    o.mode != SPILL_IO_MODE_MMAP,
                SPILL_E_INVALID_ARG, "io: unknown mode %d", (int)o.mode);
  SPILL_FAIL_IF(err,
                o.mode == SPILL_IO_MODE_MMAP &&
                    o.backend == SPILL_IO_BACKEND_URING,
                SPILL_E_INVALID_ARG,
                "io: mmap mode reads through page faults, not read calls, so "
                "it has nothing to queue on io_uring; use backend pread");
  if (o.threads == 0) o.threads = 4;
  if (o.depth == 0) o.depth = 32;
  if (o.max_files == 0) o.max_files = 1024;
  SPILL_FAIL_IF(err, o.threads < 1 || o.threads > SPILL_IO_MAX_THREADS,
                SPILL_E_INVALID_ARG, "io: threads %d not in [1, %d]",
                o.threads, SPILL_IO_MAX_THREADS);
  SPILL_FAIL_IF(err, o.depth < 1 || o.depth > SPILL_IO_MAX_DEPTH,
                SPILL_E_INVALID_ARG, "io: depth %d not in [1, %d]", o.depth,
                SPILL_IO_MAX_DEPTH);
  if (o.max_pending == 0) o.max_pending = o.depth * 4 > 1024 ? o.depth * 4 : 1024;
  SPILL_FAIL_IF(err, o.max_pending < o.depth || o.max_pending > (1 << 24),
                SPILL_E_INVALID_ARG,
                "io: max_pending %d must be in [depth=%d, 16M]", o.max_pending,
                o.depth);
  SPILL_FAIL_IF(err, o.max_files < 1 || o.max_files > (1 << 20),
                SPILL_E_INVALID_ARG, "io: max_files %d not in [1, 1M]",
                o.max_files);

  spill_io *io = calloc(1, sizeof(*io));
  SPILL_FAIL_IF(err, io == NULL, SPILL_E_NOMEM, "io: out of memory");
  io->opts = o;
  io->files = calloc((size_t)o.max_files, sizeof(*io->files));
  io->reqs = calloc((size_t)o.depth, sizeof(*io->reqs));
  io->free_stack = calloc((size_t)o.depth, sizeof(int));
  io->queue = calloc((size_t)o.depth, sizeof(int));
  io->ring = calloc((size_t)o.max_pending, sizeof(*io->ring));
  if (!io->files || !io->reqs || !io->free_stack || !io->queue || !io->ring) {
    free(io->files), free(io->reqs), free(io->free_stack), free(io->queue);
    free(io->ring), free(io);
    return spill_err_set(err, SPILL_E_NOMEM, "io: out of memory");
  }
  for (int i = 0; i < o.depth; i++) io->free_stack[i] = o.depth - 1 - i;
  io->free_top = o.depth;
  pthread_mutex_init(&io->mu, NULL);
  pthread_mutex_init(&io->throttle_mu, NULL);
  pthread_cond_init(&io->done_cv, NULL);
  pthread_cond_init(&io->work_cv, NULL);

  int rc = backend_ops(o.backend)->start(io, err);
  if (rc < 0) {
    spill_io_close(io); /* io->ops still NULL: nothing to stop */
    return rc;
  }
  io->ops = backend_ops(o.backend);
  *out = io;
  return SPILL_OK;
}

void spill_io_close(spill_io *io) {
  if (io == NULL) return;
  if (io->ops) io->ops->stop(io);
  uint32_t n = atomic_load(&io->n_files);
  for (uint32_t i = 0; i < n; i++) {
    spill_io_file *f = &io->files[i];
    if (f->map) munmap(f->map, f->map_len);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
  }
  pthread_mutex_destroy(&io->mu);
  pthread_mutex_destroy(&io->throttle_mu);
  pthread_cond_destroy(&io->done_cv);
  pthread_cond_destroy(&io->work_cv);
  free(io->files), free(io->reqs), free(io->free_stack), free(io->queue);
  free(io->ring);
  free(io);
}

/* ---- files ---- */

/* 1 if an aligned O_DIRECT read of fd works, 0 if the filesystem refuses it
 * with EINVAL (some accept the open flag but not the read). Other errors
 * are left for the real reads to report. */
static int direct_read_works(int fd, uint64_t size) {
  if (size < SPILL_IO_ALIGN) return 1; /* nothing to probe without EOF */
  void *buf = spill_alloc_nozero(SPILL_IO_ALIGN, SPILL_IO_ALIGN);
  if (buf == NULL) return 1;
  ssize_t n;
  do n = pread(fd, buf, SPILL_IO_ALIGN, 0); while (n < 0 && errno == EINTR);
  int ok = !(n < 0 && errno == EINVAL);
  spill_free(buf, SPILL_IO_ALIGN);
  return ok;
}

int spill_io_add_file(spill_io *io, const char *path, uint32_t *file_id,
                      spill_err *err) {
  SPILL_FAIL_IF(err, io == NULL || path == NULL || file_id == NULL,
                SPILL_E_INVALID_ARG, "spill_io_add_file: NULL argument");
  uint32_t id = atomic_load(&io->n_files);
  SPILL_FAIL_IF(err, id >= (uint32_t)io->opts.max_files, SPILL_E_RANGE,
                "io: cannot add '%s': max_files (%d) reached", path,
                io->opts.max_files);
  char eb[128];
  int want_direct = io->opts.mode == SPILL_IO_MODE_DIRECT;
  int direct = 0, fd = -1;
  /* spill_file_open_read: a FIFO or device in place of a bank is refused by
   * kind, without blocking in open() */
  spill_err oe = {0};
  if (want_direct) {
    int rc = spill_file_open_read(path, O_DIRECT, &fd, &oe);
    if (rc == SPILL_OK) {
      direct = 1;
    } else if (errno != EINVAL) { /* EINVAL: the filesystem has no O_DIRECT */
      return spill_err_set(err, rc, "io: %s", oe.msg);
    }
  }
  if (fd < 0) {
    int rc = spill_file_open_read(path, 0, &fd, &oe);
    SPILL_FAIL_IF(err, rc < 0, rc, "io: %s", oe.msg);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
    close(fd);
    return spill_err_set(err, SPILL_E_IO, "io: '%s': %s", path,
                         errno_str(e, eb, sizeof eb));
  }
  uint64_t size = (uint64_t)st.st_size;
  if (direct && !direct_read_works(fd, size)) {
    close(fd);
    direct = 0;
    int rc = spill_file_open_read(path, 0, &fd, &oe);
    SPILL_FAIL_IF(err, rc < 0, rc, "io: %s", oe.msg);
  }
  spill_io_file f = {0};
  f.fd = fd;
  f.direct = direct;
  f.size = size;
  if (io->opts.mode == SPILL_IO_MODE_MMAP && size > 0) {
    if (size > (uint64_t)SIZE_MAX) {
      close(fd);
      return spill_err_set(err, SPILL_E_IO, "io: '%s' too large to map", path);
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      close(fd);
      return spill_err_set(err, SPILL_E_IO, "io: mmap '%s' (%llu bytes): %s",
                           path, (unsigned long long)size,
                           errno_str(e, eb, sizeof eb));
    }
    f.map = m;
    f.map_len = (size_t)size;
  }
  f.path = strdup(path);
  if (f.path == NULL) {
    if (f.map) munmap(f.map, f.map_len);
    close(fd);
    return spill_err_set(err, SPILL_E_NOMEM, "io: out of memory");
  }
  io->files[id] = f;
  if (want_direct && !direct) atomic_fetch_add(&io->n_fallback, 1);
  atomic_store_explicit(&io->n_files, id + 1, memory_order_release);
  *file_id = id;
  return SPILL_OK;
}

int spill_io_file_is_direct(const spill_io *io, uint32_t file_id) {
  if (io == NULL || file_id >= atomic_load(&((spill_io *)io)->n_files))
    return SPILL_E_RANGE;
  return io->files[file_id].direct;
}

uint64_t spill_io_file_size(const spill_io *io, uint32_t file_id) {
  if (io == NULL || file_id >= atomic_load(&((spill_io *)io)->n_files))
    return 0;
  return io->files[file_id].size;
}

const char *spill_io_file_path(const spill_io *io, uint32_t file_id) {
  if (io == NULL || file_id >= atomic_load(&((spill_io *)io)->n_files))
    return NULL;
  return io->files[file_id].path;
}

/* ---- submit / wait ---- */

int spill_io_submit(spill_io *io, uint32_t file_id, uint64_t offset,
                    size_t len, void *dst, uint64_t tag) {
  if (io == NULL || len == 0) return SPILL_E_INVALID_ARG;
  if (file_id >= atomic_load_explicit(&io->n_files, memory_order_acquire))
    return SPILL_E_RANGE;
  if (dst == NULL && io->opts.mode != SPILL_IO_MODE_MMAP)
    return SPILL_E_INVALID_ARG;
  if (offset > UINT64_MAX - len) return SPILL_E_INVALID_ARG;
  if (io->opts.mode == SPILL_IO_MODE_DIRECT &&
      ((uintptr_t)dst % SPILL_IO_ALIGN != 0 || offset % SPILL_IO_ALIGN != 0 ||
       len % SPILL_IO_ALIGN != 0))
    return SPILL_E_INVALID_ARG;
  spill_io_req r = {0};
  r.tag = tag;
  r.file_id = file_id;
  r.offset = offset;
  r.len = len;
  r.dst = dst;
  return io->ops->submit(io, &r);
}

int spill_io_wait(spill_io *io, spill_io_completion *out, int max,
                  int min_wait) {
  if (io == NULL || out == NULL || max < 1 || min_wait < 0)
    return SPILL_E_INVALID_ARG;
  if (min_wait > max) min_wait = max;
  return io->ops->wait(io, out, max, min_wait);
}

int spill_io_outstanding(const spill_io *io) {
  if (io == NULL) return 0;
  spill_io *m = (spill_io *)io;
  pthread_mutex_lock(&m->mu);
  int n = m->outstanding;
  pthread_mutex_unlock(&m->mu);
  return n;
}

void spill_io_set_fault_hook(spill_io *io, spill_io_fault_fn fn, void *ctx) {
  if (io == NULL) return;
  pthread_mutex_lock(&io->mu);
  io->fault_fn = fn;
  io->fault_ctx = fn ? ctx : NULL;
  pthread_mutex_unlock(&io->mu);
}

/* ---- reporting ---- */

int spill_io_describe(const spill_io *io, const spill_io_completion *c,
                      spill_err *e) {
  if (c == NULL) return SPILL_E_INVALID_ARG;
  const char *path = spill_io_file_path(io, c->file_id);
  if (path == NULL) path = "?";
  char eb[128];
  switch (c->status) {
    case SPILL_OK:
      spill_err_clear(e);
      return SPILL_OK;
    case SPILL_E_SHORT_READ:
      return spill_err_set(e, c->status,
                           "short read of '%s' at offset %llu: %zu of %zu "
                           "bytes before end of file",
                           path, (unsigned long long)c->offset, c->bytes,
                           c->len);
    case SPILL_E_IO:
      return spill_err_set(e, c->status,
                           "read of '%s' at offset %llu (%zu bytes, %zu "
                           "done): %s",
                           path, (unsigned long long)c->offset, c->len,
                           c->bytes, errno_str(c->sys_errno, eb, sizeof eb));
    default:
      return spill_err_set(e, c->status, "read of '%s' at offset %llu: %s",
                           path, (unsigned long long)c->offset,
                           spill_status_str(c->status));
  }
}

void spill_io_get_stats(const spill_io *io, spill_io_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (io == NULL) return;
  spill_io *m = (spill_io *)io;
  out->reads_ok = atomic_load(&m->st_reads_ok);
  out->reads_failed = atomic_load(&m->st_reads_failed);
  out->bytes_read = atomic_load(&m->st_bytes_read);
  out->bytes_direct = atomic_load(&m->st_bytes_direct);
  out->bytes_buffered = atomic_load(&m->st_bytes_buffered);
  out->bytes_mmap = atomic_load(&m->st_bytes_mmap);
  out->attempts = atomic_load(&m->st_attempts);
  out->short_retries = atomic_load(&m->st_short_retries);
  out->eintr_retries = atomic_load(&m->st_eintr_retries);
  out->throttle_wait_ns = atomic_load(&m->st_throttle_wait_ns);
  out->files = atomic_load(&m->n_files);
  out->files_direct_fallback = atomic_load(&m->n_fallback);
}

/* ---- eviction ---- */

int spill_io_evict_fd(int fd, spill_err *err) {
  SPILL_FAIL_IF(err, fd < 0, SPILL_E_INVALID_ARG, "io: evict: bad fd %d", fd);
  int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  char eb[128];
  SPILL_FAIL_IF(err, rc != 0, SPILL_E_IO, "io: posix_fadvise(DONTNEED): %s",
                errno_str(rc, eb, sizeof eb));
  return SPILL_OK;
}

int spill_io_evict_file(spill_io *io, uint32_t file_id, spill_err *err) {
  SPILL_FAIL_IF(err, io == NULL, SPILL_E_INVALID_ARG, "io: evict: NULL io");
  SPILL_FAIL_IF(err, file_id >= atomic_load(&io->n_files), SPILL_E_RANGE,
                "io: evict: unknown file id %u", file_id);
  spill_io_file *f = &io->files[file_id];
  char eb[128];
  /* Our own mapping pins pages; unmap them from this process first. */
  if (f->map && madvise(f->map, f->map_len, MADV_DONTNEED) != 0)
    return spill_err_set(err, SPILL_E_IO, "io: madvise(DONTNEED) '%s': %s",
                         f->path, errno_str(errno, eb, sizeof eb));
  int rc = spill_io_evict_fd(f->fd, err);
  if (rc < 0) spill_err_prefix(err, "'%s'", f->path);
  return rc;
}
