/* engine/io/reader_core.c: the part of the reader both backends call (and
 * nothing else): each attempt's fault hook and short-read rule, the token
 * bucket, a finished request's move to the completion ring with its
 * counters and latency histograms, the ring's pop, timed sleeps; and the
 * latency read-outs. Below reader_pread.c and reader_uring.c, which are
 * below reader.c (the front: options, files, validation, and the backend
 * ops table it dispatches through); it calls neither.
 *
 * Latency is kept in two fixed log-linear histograms (16 sub-buckets per
 * power of two of nanoseconds) updated with relaxed atomics, so recording a
 * read allocates nothing and takes no lock; percentiles are read from the
 * bucket counts. The bandwidth cap is a GCRA token bucket: each read
 * reserves len/rate seconds of a shared timeline and may not complete
 * before that reservation minus a 50 ms burst allowance.
 */
#define _GNU_SOURCE
#include "engine/io/reader_internal.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "engine/base/clock.h"

void spill_io__sleep_until(uint64_t deadline_ns) {
  for (;;) {
    uint64_t now = spill_clock_ns();
    if (now >= deadline_ns) return;
    uint64_t d = deadline_ns - now;
    struct timespec ts = {(time_t)(d / 1000000000ull),
                          (long)(d % 1000000000ull)};
    nanosleep(&ts, NULL); /* EINTR: loop re-checks the clock */
  }
}


int spill_io__pop_locked(spill_io *io, spill_io_completion *out, int max) {
  int n = io->ring_count < max ? io->ring_count : max;
  for (int i = 0; i < n; i++) {
    out[i] = io->ring[io->ring_head];
    io->ring_head = (io->ring_head + 1) % io->opts.max_pending;
  }
  io->ring_count -= n;
  io->outstanding -= n;
  return n;
}


/* ---- latency histogram ---- */

static int hist_index(uint64_t v) {
  if (v < SPILL_IO_HIST_SUB) return (int)v;
  int e = 63 - __builtin_clzll(v); /* >= 4 */
  int sub = (int)((v >> (e - 4)) & (SPILL_IO_HIST_SUB - 1));
  return SPILL_IO_HIST_SUB + (e - 4) * SPILL_IO_HIST_SUB + sub;
}

/* Midpoint of bucket i, the value reported for it. */
static uint64_t hist_value(int i) {
  if (i < SPILL_IO_HIST_SUB) return (uint64_t)i;
  int e = (i - SPILL_IO_HIST_SUB) / SPILL_IO_HIST_SUB + 4;
  uint64_t sub = (uint64_t)((i - SPILL_IO_HIST_SUB) % SPILL_IO_HIST_SUB);
  uint64_t width = 1ull << (e - 4);
  return (1ull << e) + sub * width + width / 2;
}

static void hist_record(spill_io_hist *h, uint64_t v) {
  atomic_fetch_add_explicit(&h->bucket[hist_index(v)], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
  uint64_t m = atomic_load_explicit(&h->max, memory_order_relaxed);
  while (v > m && !atomic_compare_exchange_weak_explicit(
                      &h->max, &m, v, memory_order_relaxed,
                      memory_order_relaxed)) {
  }
}

static void hist_reset(spill_io_hist *h) {
  for (int i = 0; i < SPILL_IO_HIST_BUCKETS; i++)
    atomic_store_explicit(&h->bucket[i], 0, memory_order_relaxed);
  atomic_store(&h->count, 0);
  atomic_store(&h->sum, 0);
  atomic_store(&h->max, 0);
}

static void hist_read(const spill_io_hist *hc, spill_io_latency_pct *p) {
  spill_io_hist *h = (spill_io_hist *)hc;
  memset(p, 0, sizeof *p);
  uint64_t total = 0;
  for (int i = 0; i < SPILL_IO_HIST_BUCKETS; i++)
    total += atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
  if (total == 0) return;
  /* Rank r (1-based) is the smallest with r >= q * total. */
  uint64_t r50 = (total * 50 + 99) / 100, r99 = (total * 99 + 99) / 100;
  uint64_t cum = 0;
  for (int i = 0; i < SPILL_IO_HIST_BUCKETS; i++) {
    uint64_t c = atomic_load_explicit(&h->bucket[i], memory_order_relaxed);
    if (c == 0) continue;
    uint64_t before = cum;
    cum += c;
    if (before < r50 && cum >= r50) p->p50_ns = hist_value(i);
    if (before < r99 && cum >= r99) p->p99_ns = hist_value(i);
  }
  p->count = total;
  p->max_ns = atomic_load(&h->max);
  /* The exact max bounds the bucket midpoints from above. */
  if (p->p50_ns > p->max_ns) p->p50_ns = p->max_ns;
  if (p->p99_ns > p->max_ns) p->p99_ns = p->max_ns;
  uint64_t cnt = atomic_load(&h->count);
  p->mean_ns = cnt ? atomic_load(&h->sum) / cnt : 0;
}

void spill_io_get_latency(const spill_io *io, spill_io_latency_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (io == NULL) return;
  hist_read(&io->h_latency, &out->latency);
  hist_read(&io->h_service, &out->service);
}

void spill_io_latency_reset(spill_io *io) {
  if (io == NULL) return;
  hist_reset(&io->h_latency);
  hist_reset(&io->h_service);
}

void spill_io_get_run_latency(const spill_io *io, spill_io_latency_pct *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  if (io == NULL) return;
  hist_read(&io->h_run, out);
}

void spill_io_run_latency_reset(spill_io *io) {
  if (io == NULL) return;
  hist_reset(&io->h_run);
}

/* ---- completion bookkeeping ---- */

void spill_io__mark_done(spill_io *io, spill_io_req *r, uint64_t now) {
  r->t_done = now;
  if (r->throttle_deadline > now)
    atomic_fetch_add_explicit(&io->st_throttle_wait_ns,
                              r->throttle_deadline - now, memory_order_relaxed);
}

void spill_io__deliver_locked(spill_io *io, int slot, uint64_t now) {
  spill_io_req *r = &io->reqs[slot];
  const spill_io_file *f = &io->files[r->file_id];
  spill_io_completion *c =
      &io->ring[(io->ring_head + io->ring_count) % io->opts.max_pending];
  c->tag = r->tag;
  c->status = r->status;
  c->sys_errno = r->sys_errno;
  c->file_id = r->file_id;
  c->offset = r->offset;
  c->len = r->len;
  c->bytes = r->done;
  c->latency_ns = now - r->t_submit;
  c->service_ns = now - r->t_start;
  if (r->status == SPILL_OK)
    c->data = r->dst ? (const void *)r->dst
                     : (const void *)(f->map + r->offset);
  else
    c->data = NULL;
  io->ring_count++;

  if (r->status == SPILL_OK) {
    atomic_fetch_add_explicit(&io->st_reads_ok, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&io->st_bytes_read, r->done,
                              memory_order_relaxed);
    _Atomic uint64_t *by = io->opts.mode == SPILL_IO_MODE_MMAP ? &io->st_bytes_mmap
                           : f->direct ? &io->st_bytes_direct
                                       : &io->st_bytes_buffered;
    atomic_fetch_add_explicit(by, r->done, memory_order_relaxed);
  } else {
    atomic_fetch_add_explicit(&io->st_reads_failed, 1, memory_order_relaxed);
  }
  hist_record(&io->h_latency, c->latency_ns);
  hist_record(&io->h_service, c->service_ns);
  hist_record(&io->h_run, c->latency_ns);

  io->free_stack[io->free_top++] = slot;
  io->in_device--;
  pthread_cond_broadcast(&io->done_cv);
}

/* ---- faults and throttle ---- */

/* The hook's answer for the next attempt of r (len = bytes it would ask);
 * kind NONE without a hook. attempt_seq counts every attempt either way. */
static spill_io_fault consult_fault(spill_io *io, const spill_io_req *r,
                                    size_t len) {
  spill_io_fault f = {0};
  uint64_t seq = atomic_fetch_add_explicit(&io->attempt_seq, 1,
                                           memory_order_relaxed);
  if (io->fault_fn == NULL) return f;
  spill_io_fault_site s;
  s.file_id = r->file_id;
  s.offset = r->offset + r->done;
  s.len = len;
  s.request_seq = r->request_seq;
  s.attempt_seq = seq;
  s.attempt = r->attempt;
  io->fault_fn(io->fault_ctx, &s, &f);
  if (f.kind == SPILL_IO_FAULT_ERROR && f.err <= 0) f.err = EIO;
  return f;
}

/* A SHORT fault's attempt length (kept aligned in direct mode). */
static size_t short_len(const spill_io *io, size_t len, size_t want) {
  size_t n = want < len ? want : len;
  if (io->opts.mode == SPILL_IO_MODE_DIRECT) {
    n -= n % SPILL_IO_ALIGN;
    if (n == 0) n = SPILL_IO_ALIGN < len ? SPILL_IO_ALIGN : len;
  } else if (n == 0) {
    n = 1; /* a zero-length read would look like EOF */
  }
  return n;
}

size_t spill_io__begin_attempt(spill_io *io, spill_io_req *r) {
  size_t want = r->len - r->done;
  spill_io_fault flt = consult_fault(io, r, want);
  r->attempt++;
  atomic_fetch_add_explicit(&io->st_attempts, 1, memory_order_relaxed);
  switch (flt.kind) {
    case SPILL_IO_FAULT_ERROR:
      r->status = SPILL_E_IO;
      r->sys_errno = flt.err;
      return 0;
    case SPILL_IO_FAULT_DELAY: {
      uint64_t t = spill_clock_ns() + flt.delay_ns;
      if (t > r->not_before) r->not_before = t;
      return want;
    }
    case SPILL_IO_FAULT_SHORT:
      return short_len(io, want, flt.short_len);
    default:
      return want;
  }
}

void spill_io__throttle_reserve(spill_io *io, spill_io_req *r) {
  uint64_t rate = io->opts.throttle_bytes_per_s;
  if (rate == 0) return;
  uint64_t cost = (uint64_t)((double)r->len * 1e9 / (double)rate);
  pthread_mutex_lock(&io->throttle_mu);
  uint64_t now = spill_clock_ns();
  if (io->throttle_tat_ns < now) io->throttle_tat_ns = now;
  io->throttle_tat_ns += cost;
  uint64_t tat = io->throttle_tat_ns;
  pthread_mutex_unlock(&io->throttle_mu);
  uint64_t deadline = tat > SPILL_IO_THROTTLE_BURST_NS
                          ? tat - SPILL_IO_THROTTLE_BURST_NS
                          : 0;
  if (deadline > now) {
    r->throttle_deadline = deadline;
    if (deadline > r->not_before) r->not_before = deadline;
  }
}

