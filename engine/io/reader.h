/* engine/io/reader.h: asynchronous readers of byte ranges (expert records).
 *
 * Role: the streaming engine submits every record a layer needs at once and
 * consumes completions in arrival order. A reader owns a set of files, one
 * storage mode (direct = O_DIRECT, pagecache = buffered pread, mmap = views
 * into a read-only mapping) and one backend (a pread worker pool or an
 * io_uring ring). It knows nothing of the container format, the cache or the
 * model, and depends on engine/base only.
 *
 * Invariants: every accepted request completes exactly once, with its tag,
 * whether it succeeded or not; no lock is held across a read; short reads are
 * retried until the range is complete or EOF; the library never prints (a
 * direct-mode file that fell back to buffered reads is reported through
 * spill_io_file_is_direct and spill_io_stats, for the caller to print).
 */
#ifndef SPILL_IO_READER_H
#define SPILL_IO_READER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Direct-mode alignment of buffers, offsets and lengths (bytes). */
#define SPILL_IO_ALIGN 4096u
/* Upper bounds checked by spill_io_open. */
#define SPILL_IO_MAX_THREADS 256
#define SPILL_IO_MAX_DEPTH 4096

typedef enum spill_io_backend {
  SPILL_IO_BACKEND_PREAD = 0, /* worker threads calling pread */
  SPILL_IO_BACKEND_URING = 1, /* io_uring (liburing), reaped by the caller */
} spill_io_backend;

typedef enum spill_io_mode {
  SPILL_IO_MODE_DIRECT = 0,    /* O_DIRECT; buffered fallback if refused */
  SPILL_IO_MODE_PAGECACHE = 1, /* buffered pread through the page cache */
  SPILL_IO_MODE_MMAP = 2,      /* read-only mapping; views or copies */
} spill_io_mode;

/* Options of spill_io_open. Zero-initialise, then set what you need; zero
 * fields take the defaults given. */
typedef struct spill_io_opts {
  spill_io_backend backend;
  spill_io_mode mode;
  int threads;  /* pread pool workers (default 4); ignored by io_uring */
  int depth;    /* max requests at the device at once (default 32); for
                   io_uring also the ring size */
  int max_pending; /* max requests submitted and not yet returned by
                      spill_io_wait (default max(1024, 4 * depth)) */
  int max_files;   /* capacity of spill_io_add_file (default 1024) */
  uint64_t throttle_bytes_per_s; /* bandwidth cap emulating a slower device,
                                    0 = none (see spill_io_submit) */
} spill_io_opts;

/* One finished request, returned by spill_io_wait in arrival order. */
typedef struct spill_io_completion {
  uint64_t tag;        /* as given to spill_io_submit */
  int status;          /* SPILL_OK, SPILL_E_IO, SPILL_E_SHORT_READ */
  int sys_errno;       /* errno behind SPILL_E_IO, else 0 */
  uint32_t file_id;
  uint64_t offset;
  size_t len;          /* bytes requested */
  size_t bytes;        /* bytes delivered (== len when status is SPILL_OK) */
  const void *data;    /* where the bytes are: dst, or in mmap view mode a
                          pointer into the mapping valid until close; NULL
                          on failure */
  uint64_t latency_ns; /* from spill_io_submit to completion */
  uint64_t service_ns; /* from hand-off to the device to completion */
} spill_io_completion;

/* Fault injection (tests): the hook is consulted before each read attempt
 * (one pread call, one io_uring SQE, one mapping copy) and may turn it into
 * an error, a shorter read (then retried like any short read), or add a
 * latency spike to the request. Called from worker threads (pread) or from
 * the caller's thread (io_uring), so it must be thread-safe. */
typedef enum spill_io_fault_kind {
  SPILL_IO_FAULT_NONE = 0,
  SPILL_IO_FAULT_ERROR = 1, /* the attempt fails with `err` (e.g. EIO) */
  SPILL_IO_FAULT_SHORT = 2, /* the attempt reads at most `short_len` bytes;
                               in direct mode rounded down to SPILL_IO_ALIGN
                               (at least SPILL_IO_ALIGN) */
  SPILL_IO_FAULT_DELAY = 3, /* the request completes `delay_ns` later */
} spill_io_fault_kind;

typedef struct spill_io_fault_site {
  uint32_t file_id;
  uint64_t offset;     /* of this attempt (request offset + bytes done) */
  size_t len;          /* bytes this attempt asks for */
  uint64_t request_seq; /* 0-based index of the request in submit order */
  uint64_t attempt_seq; /* 0-based index of this attempt on the handle */
  int attempt;          /* 0 for a request's first attempt, then 1, 2, ... */
} spill_io_fault_site;

typedef struct spill_io_fault {
  spill_io_fault_kind kind;
  int err;          /* errno for SPILL_IO_FAULT_ERROR (0 means EIO) */
  size_t short_len; /* for SPILL_IO_FAULT_SHORT */
  uint64_t delay_ns; /* for SPILL_IO_FAULT_DELAY */
} spill_io_fault;

/* `out` arrives zeroed (kind NONE); the hook fills it to inject a fault. */
typedef void (*spill_io_fault_fn)(void *ctx, const spill_io_fault_site *site,
                                  spill_io_fault *out);

/* Counters since open; readable at any time from any thread. */
typedef struct spill_io_stats {
  uint64_t reads_ok;       /* requests completed with SPILL_OK */
  uint64_t reads_failed;   /* requests completed with an error */
  uint64_t bytes_read;     /* bytes delivered by successful requests */
  uint64_t bytes_direct;   /* ... of which read with O_DIRECT */
  uint64_t bytes_buffered; /* ... through the page cache (pagecache mode,
                              or direct mode after a fallback) */
  uint64_t bytes_mmap;     /* ... from the mapping (mmap mode) */
  uint64_t attempts;       /* pread calls, SQEs or mapping copies */
  uint64_t short_retries;  /* attempts that left the request short and
                              were followed by another */
  uint64_t eintr_retries;  /* attempts interrupted and repeated */
  uint64_t throttle_wait_ns; /* delay added by the bandwidth cap */
  uint32_t files;
  uint32_t files_direct_fallback; /* direct-mode files opened buffered */
} spill_io_stats;

/* Latency percentiles over the current window (since open or the last
 * spill_io_latency_reset). Values come from a fixed log-linear histogram
 * (16 sub-buckets per power of two, so within ~6%); max is exact. */
typedef struct spill_io_latency_pct {
  uint64_t count;
  uint64_t p50_ns;
  uint64_t p99_ns;
  uint64_t max_ns;
  uint64_t mean_ns;
} spill_io_latency_pct;

typedef struct spill_io_latency_stats {
  spill_io_latency_pct latency; /* submit -> completion (what the caller
                                   waits, queueing included) */
  spill_io_latency_pct service; /* device hand-off -> completion */
} spill_io_latency_stats;

typedef struct spill_io spill_io;

/* Opens a reader. On success *out owns worker threads or an io_uring ring
 * and must be closed with spill_io_close. Errors: SPILL_E_INVALID_ARG (bad
 * options; mmap mode with the io_uring backend, which has no reads to queue),
 * SPILL_E_NOMEM, SPILL_E_UNSUPPORTED (io_uring refused by the kernel or a
 * seccomp filter; err says why, the caller may fall back to pread). */
int spill_io_open(const spill_io_opts *opts, spill_io **out, spill_err *err);

/* Waits for every outstanding request, stops workers, unmaps and closes the
 * files. Views returned in mmap mode die here. NULL is accepted. */
void spill_io_close(spill_io *io);

/* Opens `path` (copied) for reading in the reader's mode and returns its
 * id (0, 1, 2, ... in call order). In direct mode a filesystem that refuses
 * O_DIRECT (EINVAL at open or on a probe read) gets a buffered descriptor
 * instead: see spill_io_file_is_direct. Not thread-safe against another
 * spill_io_add_file; safe while reads of other files are in flight.
 * Errors: SPILL_E_IO (open/fstat/mmap failed), SPILL_E_RANGE (max_files). */
int spill_io_add_file(spill_io *io, const char *path, uint32_t *file_id,
                      spill_err *err);

/* 1 if the file is read with O_DIRECT, 0 if buffered or mapped, negative
 * status if file_id is unknown. */
int spill_io_file_is_direct(const spill_io *io, uint32_t file_id);
/* Size in bytes at spill_io_add_file time, 0 if file_id is unknown. */
uint64_t spill_io_file_size(const spill_io *io, uint32_t file_id);
/* Path as given to spill_io_add_file, NULL if file_id is unknown. */
const char *spill_io_file_path(const spill_io *io, uint32_t file_id);

/* Queues a read of [offset, offset + len) of file_id into dst, tagged `tag`.
 * dst must hold len bytes and is written until the completion is returned;
 * the caller keeps ownership. In mmap mode dst may be NULL: the completion
 * then carries a view into the mapping (pages faulted in by the reader) and
 * nothing is copied. In direct mode dst, offset and len must be multiples
 * of SPILL_IO_ALIGN (also after a buffered fallback, so behaviour does not
 * depend on the filesystem). Returns at once unless `depth` requests are at
 * the device, then blocks until one finishes. With a bandwidth cap, a read
 * of n bytes is not completed before the token bucket (50 ms of burst)
 * has n bytes for it. Errors (the request is then not queued):
 * SPILL_E_INVALID_ARG (alignment, len 0, NULL dst outside mmap mode),
 * SPILL_E_RANGE (unknown file_id, or max_pending requests not yet reaped).
 * Read errors are reported per request in its completion, never here.
 * Call spill_io_submit and spill_io_wait from one thread at a time. */
int spill_io_submit(spill_io *io, uint32_t file_id, uint64_t offset,
                    size_t len, void *dst, uint64_t tag);

/* Copies up to `max` completions into out, in arrival order, blocking until
 * at least min(min_wait, outstanding requests) are available (min_wait 0
 * polls). Returns the count (>= 0) or SPILL_E_INVALID_ARG. Never blocks when
 * nothing is outstanding. */
int spill_io_wait(spill_io *io, spill_io_completion *out, int max,
                  int min_wait);

/* Requests submitted and not yet returned by spill_io_wait. */
int spill_io_outstanding(const spill_io *io);

/* Fills e with the status of a failed completion and a message naming the
 * file path and offset ("short read of 'x.bin' at offset 8192: 4096 of 16384
 * bytes before EOF"); returns c->status. */
int spill_io_describe(const spill_io *io, const spill_io_completion *c,
                      spill_err *e);

/* Installs (fn != NULL) or removes the fault hook. Call while no request is
 * outstanding. */
void spill_io_set_fault_hook(spill_io *io, spill_io_fault_fn fn, void *ctx);

void spill_io_get_stats(const spill_io *io, spill_io_stats *out);
void spill_io_get_latency(const spill_io *io, spill_io_latency_stats *out);
/* Starts a new latency window (e.g. per token). Thread-safe; samples that
 * race with the reset may land in either window. */
void spill_io_latency_reset(spill_io *io);
/* A second, independent latency window over the same samples (submit ->
 * completion), e.g. a whole generate run while the first window is reset per
 * forward call. spill_io_latency_reset does not touch it. */
void spill_io_get_run_latency(const spill_io *io, spill_io_latency_pct *out);
void spill_io_run_latency_reset(spill_io *io);

/* Drops the file's clean pages from the page cache
 * (posix_fadvise(POSIX_FADV_DONTNEED)), for cold-cache runs; in mmap mode
 * the mapping's pages are released first. Dirty pages are not dropped:
 * write and fsync before. */
int spill_io_evict_file(spill_io *io, uint32_t file_id, spill_err *err);
/* The same on a descriptor the caller owns. */
int spill_io_evict_fd(int fd, spill_err *err);

const char *spill_io_backend_name(spill_io_backend b); /* "pread", "uring" */
const char *spill_io_mode_name(spill_io_mode m); /* "direct", ... */

/* ---- Ready-made fault plan for tests (io_fault.c) ----
 * A fixed table of rules; each attempt is matched against the rules in order
 * and the first rule that fires decides the fault. Thread-safe. */
#define SPILL_IO_FAULT_PLAN_MAX 16
#define SPILL_IO_ANY_FILE UINT32_MAX
#define SPILL_IO_ANY_OFFSET UINT64_MAX

typedef struct spill_io_fault_rule {
  uint32_t file_id;   /* or SPILL_IO_ANY_FILE */
  uint64_t offset;    /* attempt offset to match, or SPILL_IO_ANY_OFFSET */
  uint64_t skip;      /* let this many matching attempts pass first */
  uint64_t times;     /* then fire this many times (0 = forever) */
  int first_attempt_only; /* match only a request's first attempt */
  spill_io_fault fault;
} spill_io_fault_rule;

typedef struct spill_io_fault_plan {
  int n_rules;
  spill_io_fault_rule rules[SPILL_IO_FAULT_PLAN_MAX];
  uint64_t matched[SPILL_IO_FAULT_PLAN_MAX]; /* atomic counters */
  uint64_t fired[SPILL_IO_FAULT_PLAN_MAX];
} spill_io_fault_plan;

void spill_io_fault_plan_init(spill_io_fault_plan *p);
/* Appends a rule; SPILL_E_RANGE when the table is full. */
int spill_io_fault_plan_add(spill_io_fault_plan *p,
                            const spill_io_fault_rule *r);
/* Times rule i fired so far. */
uint64_t spill_io_fault_plan_fired(const spill_io_fault_plan *p, int i);
/* Hook to pass to spill_io_set_fault_hook with ctx = the plan. */
void spill_io_fault_plan_hook(void *ctx, const spill_io_fault_site *site,
                              spill_io_fault *out);

#ifdef __cplusplus
}
#endif
#endif
