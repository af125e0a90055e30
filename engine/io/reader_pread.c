/* engine/io/reader_pread.c: the pread worker-pool backend and the
 * synchronous read loop it runs (also the only path for mmap mode).
 *
 * A request waits in a FIFO of slot indices; `threads` workers pop one at a
 * time under io->mu, drop the lock, run it to completion and deliver it.
 * At most `depth` requests are queued or running; spill_io_submit blocks on
 * done_cv while all slots are busy. The read loop retries short reads and
 * EINTR until the range is complete, EOF (SPILL_E_SHORT_READ) or an error
 * (SPILL_E_IO). In direct mode an unaligned byte count can only come from
 * EOF (the next O_DIRECT read would be misaligned), so it ends the request.
 * mmap mode populates the range with MADV_POPULATE_READ (one call that
 * faults pages in and reports I/O errors instead of raising SIGBUS), then
 * copies into dst or hands out a view.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/base/clock.h"
#include "engine/io/reader_internal.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Faults [p, p + n) of a file mapping in. Returns 0 or an errno. */
static int populate(uint8_t *p, size_t n) {
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(SPILL_IO_ALIGN - 1);
  size_t span = (size_t)((uintptr_t)p + n - a);
  for (;;) {
    if (madvise((void *)a, span, MADV_POPULATE_READ) == 0) return 0;
    if (errno == EINTR || errno == EAGAIN) continue;
    if (errno != EINVAL) return errno;
    break; /* kernel without MADV_POPULATE_READ */
  }
  /* Fallback: ask for readahead, then touch one byte per page. An I/O error
   * here raises SIGBUS, which is why the madvise path is preferred. */
  (void)madvise((void *)a, span, MADV_WILLNEED);
  volatile const uint8_t *v = (volatile const uint8_t *)a;
  uint8_t sink = 0;
  for (size_t off = 0; off < span; off += SPILL_IO_ALIGN) sink ^= v[off];
  (void)sink;
  return 0;
}

/* One attempt of at most `len` bytes at r->offset + r->done. Returns bytes
 * (0 = EOF) or -errno. */
static ssize_t attempt_once(spill_io *io, spill_io_req *r, size_t len) {
  const spill_io_file *f = &io->files[r->file_id];
  uint64_t off = r->offset + r->done;
  if (io->opts.mode == SPILL_IO_MODE_MMAP) {
    if (off >= f->size) return 0;
    uint64_t avail = f->size - off;
    size_t n = avail < len ? (size_t)avail : len;
    int e = populate(f->map + off, n);
    if (e != 0) return -e;
    if (r->dst) memcpy(r->dst + r->done, f->map + off, n);
    return (ssize_t)n;
  }
  ssize_t n = pread(f->fd, r->dst + r->done, len, (off_t)off);
  return n < 0 ? -errno : n;
}

static void read_sync(spill_io *io, spill_io_req *r) {
  const spill_io_file *f = &io->files[r->file_id];
  r->status = SPILL_OK;
  while (r->done < r->len) {
    size_t want = spill_io__begin_attempt(io, r);
    if (want == 0) break; /* injected error */
    ssize_t n = attempt_once(io, r, want);
    if (n == -EINTR || n == -EAGAIN) {
      atomic_fetch_add_explicit(&io->st_eintr_retries, 1, memory_order_relaxed);
      continue;
    }
    if (n < 0) {
      r->status = SPILL_E_IO;
      r->sys_errno = (int)-n;
      break;
    }
    if (n == 0) {
      r->status = SPILL_E_SHORT_READ;
      break;
    }
    r->done += (size_t)n;
    if (r->done < r->len) {
      if (f->direct && r->done % SPILL_IO_ALIGN != 0) {
        r->status = SPILL_E_SHORT_READ; /* unaligned tail: EOF */
        break;
      }
      atomic_fetch_add_explicit(&io->st_short_retries, 1, memory_order_relaxed);
    }
  }
  spill_io__mark_done(io, r, spill_clock_ns());
  if (r->not_before) spill_io__sleep_until(r->not_before);
}

static void *worker_main(void *arg) {
  spill_io *io = arg;
  pthread_mutex_lock(&io->mu);
  for (;;) {
    while (!io->stop && io->q_count == 0)
      pthread_cond_wait(&io->work_cv, &io->mu);
    if (io->stop) break;
    int slot = io->queue[io->q_head];
    io->q_head = (io->q_head + 1) % io->opts.depth;
    io->q_count--;
    pthread_mutex_unlock(&io->mu);

    spill_io_req *r = &io->reqs[slot];
    r->t_start = spill_clock_ns();
    spill_io__throttle_reserve(io, r);
    read_sync(io, r);

    pthread_mutex_lock(&io->mu);
    spill_io__deliver_locked(io, slot, spill_clock_ns());
  }
  pthread_mutex_unlock(&io->mu);
  return NULL;
}

static void pool_stop(spill_io *io);

static int pool_start(spill_io *io, spill_err *err) {
  io->workers = calloc((size_t)io->opts.threads, sizeof(pthread_t));
  SPILL_FAIL_IF(err, io->workers == NULL, SPILL_E_NOMEM, "io: out of memory");
  for (int i = 0; i < io->opts.threads; i++) {
    int rc = pthread_create(&io->workers[i], NULL, worker_main, io);
    if (rc != 0) {
      pool_stop(io);
      return spill_err_set(err, SPILL_E_NOMEM,
                           "io: cannot start reader thread %d of %d: %s", i,
                           io->opts.threads, strerror(rc));
    }
    io->n_workers++;
  }
  return SPILL_OK;
}

static int pool_submit(spill_io *io, const spill_io_req *proto) {
  pthread_mutex_lock(&io->mu);
  if (io->outstanding >= io->opts.max_pending) {
    pthread_mutex_unlock(&io->mu);
    return SPILL_E_RANGE;
  }
  while (io->free_top == 0) pthread_cond_wait(&io->done_cv, &io->mu);
  int slot = io->free_stack[--io->free_top];
  spill_io_req *r = &io->reqs[slot];
  *r = *proto;
  r->request_seq = io->request_seq++;
  r->t_submit = spill_clock_ns();
  io->queue[(io->q_head + io->q_count) % io->opts.depth] = slot;
  io->q_count++;
  io->in_device++;
  io->outstanding++;
  pthread_cond_signal(&io->work_cv);
  pthread_mutex_unlock(&io->mu);
  return SPILL_OK;
}

static int pool_wait(spill_io *io, spill_io_completion *out, int max,
                        int min_wait) {
  pthread_mutex_lock(&io->mu);
  /* Never wait for more than can arrive. */
  int need = min_wait < io->outstanding ? min_wait : io->outstanding;
  while (io->ring_count < need) pthread_cond_wait(&io->done_cv, &io->mu);
  int n = spill_io__pop_locked(io, out, max);
  pthread_mutex_unlock(&io->mu);
  return n;
}

static void pool_stop(spill_io *io) {
  if (io->workers == NULL) return;
  pthread_mutex_lock(&io->mu);
  /* Requests still queued are never started, so nothing writes their dst
   * after close; running ones finish first (join below). */
  io->stop = 1;
  pthread_cond_broadcast(&io->work_cv);
  pthread_mutex_unlock(&io->mu);
  for (int i = 0; i < io->n_workers; i++) pthread_join(io->workers[i], NULL);
  free(io->workers);
  io->workers = NULL;
  io->n_workers = 0;
}

const spill_io_backend_ops spill_io_pread_ops = {"pread", pool_start, pool_submit, pool_wait,
                                                 pool_stop};
