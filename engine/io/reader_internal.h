/* engine/io/reader_internal.h: the reader handle shared by reader.c (the
 * front: options, files, validation, stats; dispatches through the backend
 * ops table), reader_pread.c (worker pool and the synchronous read loop),
 * reader_uring.c (io_uring backend) and reader_core.c (what both backends
 * call: attempts, faults, throttle, completion ring, latency). Calls go one
 * way: reader.c -> reader_pread.c, reader_uring.c -> reader_core.c. Not
 * part of the public API.
 *
 * Invariants: a request occupies one slot from submit until its bytes are
 * done and its hold time (throttle, injected delay) has passed; then its
 * completion moves to the ring and the slot is freed. So
 * ring_count + in_device == outstanding <= max_pending, and the ring never
 * overflows. `mu` guards slots, queue and ring; it is never held across a
 * read, a sleep or a blocking io_uring call.
 */
#ifndef SPILL_IO_READER_INTERNAL_H
#define SPILL_IO_READER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine/io/reader.h"

#define SPILL_IO_HIST_SUB 16 /* sub-buckets per power of two */
#define SPILL_IO_HIST_BUCKETS 1024
/* Burst allowance of the token bucket, in nanoseconds of bandwidth. */
#define SPILL_IO_THROTTLE_BURST_NS 50000000ull

typedef struct spill_io_file {
  char *path;
  int fd;
  int direct;     /* opened with O_DIRECT */
  uint64_t size;  /* at add time */
  uint8_t *map;   /* mmap mode: whole-file read-only mapping, or NULL */
  size_t map_len;
} spill_io_file;

typedef struct spill_io_req {
  uint64_t tag;
  uint32_t file_id;
  uint64_t offset;
  size_t len;
  uint8_t *dst;          /* NULL: mmap view */
  size_t done;           /* bytes complete */
  size_t cur_len;        /* bytes the in-flight attempt asked for */
  int attempt;
  uint64_t request_seq;
  uint64_t t_submit, t_start, t_done;
  uint64_t throttle_deadline; /* token-bucket release time, 0 = none */
  uint64_t not_before;   /* max(throttle_deadline, injected delays) */
  int status;
  int sys_errno;
} spill_io_req;

typedef struct spill_io_hist {
  _Atomic uint64_t bucket[SPILL_IO_HIST_BUCKETS];
  _Atomic uint64_t count, sum, max;
} spill_io_hist;

typedef struct spill_io_backend_ops spill_io_backend_ops;

struct spill_io {
  spill_io_opts opts; /* defaults resolved */
  const spill_io_backend_ops *ops; /* opts.backend's row; NULL until started */

  spill_io_file *files; /* opts.max_files entries */
  _Atomic uint32_t n_files;
  _Atomic uint32_t n_fallback;

  pthread_mutex_t mu;
  pthread_cond_t done_cv; /* a request finished (slot free, ring grew) */
  pthread_cond_t work_cv; /* pool: queue grew or stop */

  spill_io_req *reqs; /* opts.depth slots */
  int *free_stack;
  int free_top;
  int in_device; /* slots in use */
  int outstanding;

  spill_io_completion *ring; /* opts.max_pending entries */
  int ring_head, ring_count;

  /* pread pool */
  int *queue; /* opts.depth slot indices, FIFO */
  int q_head, q_count;
  pthread_t *workers;
  int n_workers;
  int stop;

  /* io_uring backend state (reader_uring.c) */
  void *uring;

  spill_io_fault_fn fault_fn;
  void *fault_ctx;
  _Atomic uint64_t attempt_seq;
  uint64_t request_seq; /* under mu / caller thread */

  pthread_mutex_t throttle_mu;
  uint64_t throttle_tat_ns; /* GCRA theoretical arrival time */

  _Atomic uint64_t st_reads_ok, st_reads_failed, st_bytes_read,
      st_bytes_direct, st_bytes_buffered, st_bytes_mmap, st_attempts,
      st_short_retries, st_eintr_retries, st_throttle_wait_ns;

  spill_io_hist h_latency, h_service;
  spill_io_hist h_run; /* latency over the run window (reset separately) */
};

/* ---- the backend ops table: one row per spill_io_backend ---- */
struct spill_io_backend_ops {
  const char *name;
  /* Starts the backend's threads or ring; on failure nothing is left to stop. */
  int (*start)(spill_io *io, spill_err *err);
  /* Takes a validated request (proto: tag, file, offset, len, dst). */
  int (*submit)(spill_io *io, const spill_io_req *proto);
  /* Pops up to max completions, blocking until min_wait are there. */
  int (*wait)(spill_io *io, spill_io_completion *out, int max, int min_wait);
  /* Stops after the outstanding requests (before the files close). */
  void (*stop)(spill_io *io);
};
extern const spill_io_backend_ops spill_io_pread_ops; /* reader_pread.c */
extern const spill_io_backend_ops spill_io_uring_ops; /* reader_uring.c */

/* ---- reader_core.c: what both backends call ---- */
/* Starts the next attempt of r, the one place both backends apply the fault
 * hook: consults it, counts the attempt and applies the fault (DELAY moves
 * r->not_before, SHORT shortens the attempt). Returns the bytes to ask for,
 * or 0 when an injected error ended the request (r->status and sys_errno
 * set). Requires r->done < r->len. Thread-safe for distinct requests. */
size_t spill_io__begin_attempt(spill_io *io, spill_io_req *r);
/* Reserves r->len bytes of the token bucket and sets r->throttle_deadline
 * and r->not_before (no-op without a cap). */
void spill_io__throttle_reserve(spill_io *io, spill_io_req *r);
/* Bookkeeping when a request's bytes are done (before any hold). */
void spill_io__mark_done(spill_io *io, spill_io_req *r, uint64_t now);
/* Moves a finished request to the completion ring, records latency and
 * counters, frees its slot and wakes waiters. Caller holds io->mu. */
void spill_io__deliver_locked(spill_io *io, int slot, uint64_t now);
/* Pops up to max completions; caller holds io->mu. */
int spill_io__pop_locked(spill_io *io, spill_io_completion *out, int max);
void spill_io__sleep_until(uint64_t deadline_ns);

#endif
