/* engine/io/reader_uring.c: the io_uring backend (liburing).
 *
 * One ring of `depth` entries, driven entirely from the caller's thread:
 * spill_io_submit prepares one SQE and submits it at once; spill_io_wait
 * (and a submit that finds every slot busy) reaps CQEs. A CQE that leaves a
 * request short (or -EINTR/-EAGAIN) re-queues the rest in the same slot; a
 * zero or, in direct mode, unaligned count means EOF. Since at most `depth`
 * SQEs are ever in the kernel, the SQ always has room and the CQ (twice the
 * SQ) cannot overflow.
 *
 * Holds: a request whose bytes are in but whose token-bucket deadline or
 * injected delay has not passed keeps its slot in a held list; the reaper
 * waits for CQEs with a timeout set to the earliest hold, so a throttled
 * ring paces like a slower device without a timer thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/clock.h"
#include "engine/io/reader_internal.h"

typedef struct uring_state {
  struct io_uring ring;
  int in_kernel; /* SQEs submitted whose CQE was not yet seen */
  int *held;     /* slots done but held until not_before */
  int n_held;
} uring_state;

static int uring_start(spill_io *io, spill_err *err) {
  uring_state *u = calloc(1, sizeof(*u));
  SPILL_FAIL_IF(err, u == NULL, SPILL_E_NOMEM, "io: out of memory");
  u->held = calloc((size_t)io->opts.depth, sizeof(int));
  if (u->held == NULL) {
    free(u);
    return spill_err_set(err, SPILL_E_NOMEM, "io: out of memory");
  }
  int rc = io_uring_queue_init((unsigned)io->opts.depth, &u->ring, 0);
  if (rc < 0) {
    free(u->held);
    free(u);
    return spill_err_set(
        err, SPILL_E_UNSUPPORTED,
        "io: io_uring_queue_init(%d entries) failed: %s (io_uring missing "
        "from the kernel, disabled by kernel.io_uring_disabled, refused by a "
        "seccomp filter or over the memlock limit); use backend pread",
        io->opts.depth, strerror(-rc));
  }
  io->uring = u;
  return SPILL_OK;
}

/* Request finished (bytes done or failed): deliver now or hold it. */
static void finish(spill_io *io, uring_state *u, int slot) {
  spill_io_req *r = &io->reqs[slot];
  uint64_t now = spill_clock_ns();
  spill_io__mark_done(io, r, now);
  if (r->not_before > now) {
    u->held[u->n_held++] = slot;
    return;
  }
  pthread_mutex_lock(&io->mu);
  spill_io__deliver_locked(io, slot, now);
  pthread_mutex_unlock(&io->mu);
}

/* Issues the next attempt of the request in `slot` (consulting the fault
 * hook); on an injected or submission error the request finishes here. */
static void issue(spill_io *io, uring_state *u, int slot) {
  spill_io_req *r = &io->reqs[slot];
  const spill_io_file *f = &io->files[r->file_id];
  size_t want = spill_io__begin_attempt(io, r);
  if (want == 0) { /* injected error */
    finish(io, u, slot);
    return;
  }
  if (want > UINT32_MAX) want = (size_t)1 << 30; /* SQE len is 32-bit */
  r->cur_len = want;

  struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
  if (sqe == NULL) { /* cannot happen with <= depth in the kernel */
    r->status = SPILL_E_IO;
    r->sys_errno = EBUSY;
    finish(io, u, slot);
    return;
  }
  io_uring_prep_read(sqe, f->fd, r->dst + r->done, (unsigned)want,
                     r->offset + r->done);
  io_uring_sqe_set_data64(sqe, (uint64_t)slot);
  int rc;
  do rc = io_uring_submit(&u->ring); while (rc == -EINTR);
  if (rc <= 0) {
    /* The SQE sits unconsumed in the SQ ring and goes to the kernel with the
     * next successful io_uring_enter: turn it into a NOP whose CQE is
     * ignored, and fail this request. */
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, UINT64_MAX);
    r->status = SPILL_E_IO;
    r->sys_errno = rc < 0 ? -rc : EAGAIN;
    finish(io, u, slot);
    return;
  }
  u->in_kernel++;
}

static void on_cqe(spill_io *io, uring_state *u, uint64_t data, int res) {
  if (data == UINT64_MAX) return; /* neutralised SQE, never counted */
  u->in_kernel--;
  int slot = (int)data;
  spill_io_req *r = &io->reqs[slot];
  const spill_io_file *f = &io->files[r->file_id];
  if (res == -EINTR || res == -EAGAIN) {
    atomic_fetch_add_explicit(&io->st_eintr_retries, 1, memory_order_relaxed);
    issue(io, u, slot);
    return;
  }
  if (res < 0) {
    r->status = SPILL_E_IO;
    r->sys_errno = -res;
    finish(io, u, slot);
    return;
  }
  if (res == 0) {
    r->status = SPILL_E_SHORT_READ;
    finish(io, u, slot);
    return;
  }
  r->done += (size_t)res;
  if (r->done == r->len) {
    r->status = SPILL_OK;
    finish(io, u, slot);
    return;
  }
  if (f->direct && r->done % SPILL_IO_ALIGN != 0) {
    r->status = SPILL_E_SHORT_READ; /* unaligned tail: EOF */
    finish(io, u, slot);
    return;
  }
  atomic_fetch_add_explicit(&io->st_short_retries, 1, memory_order_relaxed);
  issue(io, u, slot);
}

/* Delivers held requests whose time has come; returns how many, and the
 * earliest remaining deadline in *next (0 if none). */
static int release_held(spill_io *io, uring_state *u, uint64_t *next) {
  uint64_t now = spill_clock_ns();
  int n = 0;
  *next = 0;
  for (int i = 0; i < u->n_held;) {
    int slot = u->held[i];
    uint64_t nb = io->reqs[slot].not_before;
    if (nb <= now) {
      pthread_mutex_lock(&io->mu);
      spill_io__deliver_locked(io, slot, now);
      pthread_mutex_unlock(&io->mu);
      u->held[i] = u->held[--u->n_held];
      n++;
    } else {
      if (*next == 0 || nb < *next) *next = nb;
      i++;
    }
  }
  return n;
}

/* Makes progress: drains ready CQEs and due holds; with `block`, waits until
 * at least one of them happened (or nothing is left to wait for). */
static void progress(spill_io *io, uring_state *u, int block) {
  for (;;) {
    int got = 0;
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
      uint64_t data = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(&u->ring, cqe);
      on_cqe(io, u, data, res);
      got++;
    }
    uint64_t next;
    got += release_held(io, u, &next);
    if (got > 0 || !block) return;
    if (u->in_kernel > 0) {
      struct __kernel_timespec ts, *tsp = NULL;
      if (next) {
        uint64_t now = spill_clock_ns();
        uint64_t d = next > now ? next - now : 0;
        ts.tv_sec = (long long)(d / 1000000000ull);
        ts.tv_nsec = (long long)(d % 1000000000ull);
        tsp = &ts;
      }
      int rc = io_uring_wait_cqe_timeout(&u->ring, &cqe, tsp);
      (void)rc; /* -ETIME / -EINTR: loop re-checks everything */
    } else if (next) {
      spill_io__sleep_until(next);
    } else {
      return; /* nothing in flight */
    }
  }
}

static int uring_submit(spill_io *io, const spill_io_req *proto) {
  uring_state *u = io->uring;
  if (io->outstanding >= io->opts.max_pending) return SPILL_E_RANGE;
  while (io->free_top == 0) progress(io, u, 1);
  pthread_mutex_lock(&io->mu);
  int slot = io->free_stack[--io->free_top];
  spill_io_req *r = &io->reqs[slot];
  *r = *proto;
  r->request_seq = io->request_seq++;
  r->t_submit = spill_clock_ns();
  r->t_start = r->t_submit;
  io->in_device++;
  io->outstanding++;
  pthread_mutex_unlock(&io->mu);
  spill_io__throttle_reserve(io, r);
  issue(io, u, slot);
  return SPILL_OK;
}

static int uring_wait(spill_io *io, spill_io_completion *out, int max,
                         int min_wait) {
  uring_state *u = io->uring;
  progress(io, u, 0);
  int need = min_wait < io->outstanding ? min_wait : io->outstanding;
  while (io->ring_count < need) progress(io, u, 1);
  pthread_mutex_lock(&io->mu);
  int n = spill_io__pop_locked(io, out, max);
  pthread_mutex_unlock(&io->mu);
  return n;
}

static void uring_stop(spill_io *io) {
  uring_state *u = io->uring;
  if (u == NULL) return;
  /* Drain the kernel so nothing writes a caller buffer after close. */
  struct io_uring_cqe *cqe;
  while (u->in_kernel > 0) {
    int rc = io_uring_wait_cqe(&u->ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break; /* ring unusable; nothing more will arrive */
    if (io_uring_cqe_get_data64(cqe) != UINT64_MAX) u->in_kernel--;
    io_uring_cqe_seen(&u->ring, cqe);
  }
  io_uring_queue_exit(&u->ring);
  free(u->held);
  free(u);
  io->uring = NULL;
}

const spill_io_backend_ops spill_io_uring_ops = {"uring", uring_start, uring_submit, uring_wait,
                                                 uring_stop};
