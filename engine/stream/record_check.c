/* engine/stream/record_check.c: the record checker of record_check.h.
 *
 * Hand-offs are kept to the useful ones: submit only queues; the helper is
 * woken by kick, which the stream calls when the consumer is about to
 * compute (so queued checks run beside that compute), and the consumer
 * runs queued checks itself when it would otherwise wait (collect STEAL).
 * Waking a sleeping thread is not free: on this VM a futex wake costs
 * 15-22 us of the waker's time, about what checking one 256 KiB record
 * costs (docs/PERFORMANCE.md, "Verify cost"), so kick wakes the helper only
 * when at least WAKE_BYTES are queued, and signals after unlocking (the
 * woken helper then does not block on the mutex the waker still holds).
 *
 * Jobs live in an array indexed by tag (the stream's in-flight index, so it
 * stays small); a FIFO ring of queued tags feeds the helper thread and a
 * second ring returns finished tags in completion order. `mu` guards the
 * array and both rings; it is never held across a check. The helper copies
 * a job's inputs under the lock, checks without it, and writes the result
 * back under it; only the consumer grows the arrays (under the lock), so an
 * index stays valid across a realloc. A job the consumer steals leaves the
 * queue under the lock and is never seen by the helper again.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "engine/stream/record_check.h"

#include <pthread.h>
#include <stdlib.h>

#include "engine/base/clock.h"

/* Queued bytes that justify waking the helper (see above). */
#define WAKE_BYTES ((size_t)512 << 10)

typedef struct job {
  int layer;
  uint32_t id;
  const char *file;
  const void *data;
  size_t bytes;
  int rc;
  spill_err err;
} job;

struct spill_rcheck {
  const spill_manifest *m;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* queue grew, or stop */
  pthread_cond_t done_cv; /* a helper check finished */
  pthread_t th;
  int started, failed, stop;
  job *jobs;               /* cap entries, by tag */
  int cap;
  int *queue, q_head, q_n; /* queued tags (ring of cap) */
  size_t q_bytes;          /* bytes of the queued records */
  int sleeping;            /* the helper waits on work_cv */
  int *done, d_head, d_n;  /* finished tags (ring of cap) */
  int running;             /* checks the helper is running (0 or 1) */
  int pending;             /* consumer only: submitted, not collected */
  uint64_t helper_ns;      /* under mu */
  uint64_t consumer_ns;    /* consumer only */
};

static int ring_pop(int *ring, int cap, int *head, int *n) {
  int t = ring[*head];
  *head = (*head + 1) % cap;
  (*n)--;
  return t;
}

/* Grows the arrays to hold tag `need - 1`; caller holds mu. */
static int grow_locked(spill_rcheck *v, int need) {
  int nc = v->cap ? v->cap : 16;
  while (nc < need) nc *= 2;
  job *j = realloc(v->jobs, (size_t)nc * sizeof(job));
  if (!j) return -1;
  v->jobs = j;
  int *q = malloc((size_t)nc * sizeof(int));
  int *d = malloc((size_t)nc * sizeof(int));
  if (!q || !d) {
    free(q);
    free(d);
    return -1; /* jobs grew; cap unchanged, still consistent */
  }
  for (int i = 0; i < v->q_n; i++) q[i] = v->queue[(v->q_head + i) % v->cap];
  for (int i = 0; i < v->d_n; i++) d[i] = v->done[(v->d_head + i) % v->cap];
  free(v->queue);
  free(v->done);
  v->queue = q;
  v->done = d;
  v->q_head = 0;
  v->d_head = 0;
  v->cap = nc;
  return 0;
}

static void *helper_main(void *arg) {
  spill_rcheck *v = arg;
  pthread_setname_np(pthread_self(), "spill-rcheck"); /* for profilers; failure is harmless */
  pthread_mutex_lock(&v->mu);
  for (;;) {
    while (!v->stop && v->q_n == 0) {
      v->sleeping = 1;
      pthread_cond_wait(&v->work_cv, &v->mu);
      v->sleeping = 0;
    }
    if (v->stop) break;
    int tag = ring_pop(v->queue, v->cap, &v->q_head, &v->q_n);
    job j = v->jobs[tag];
    v->q_bytes -= j.bytes;
    v->running++;
    pthread_mutex_unlock(&v->mu);

    spill_err err;
    err.code = 0;
    err.msg[0] = '\0';
    uint64_t t0 = spill_clock_ns();
    int rc = spill_record_check(v->m, j.file, j.layer, j.id, j.data, j.bytes, 1, &err);
    uint64_t dt = spill_clock_ns() - t0;

    pthread_mutex_lock(&v->mu);
    job *d = &v->jobs[tag];
    d->rc = rc;
    if (rc < 0) d->err = err;
    v->done[(v->d_head + v->d_n) % v->cap] = tag;
    v->d_n++;
    v->running--;
    v->helper_ns += dt;
    pthread_cond_signal(&v->done_cv);
  }
  pthread_mutex_unlock(&v->mu);
  return NULL;
}

int spill_rcheck_init(const spill_manifest *m, spill_rcheck **out, spill_err *e) {
  spill_rcheck *v = calloc(1, sizeof *v);
  SPILL_FAIL_IF(e, !v, SPILL_E_NOMEM, "stream: out of memory (record checker)");
  v->m = m;
  pthread_mutex_init(&v->mu, NULL);
  pthread_cond_init(&v->work_cv, NULL);
  pthread_cond_init(&v->done_cv, NULL);
  *out = v;
  return SPILL_OK;
}

void spill_rcheck_free(spill_rcheck *v) {
  if (!v) return;
  if (v->started) {
    /* A check in progress finishes before the join returns, so no record
     * buffer is read after this call. */
    pthread_mutex_lock(&v->mu);
    v->stop = 1;
    pthread_cond_broadcast(&v->work_cv);
    pthread_mutex_unlock(&v->mu);
    pthread_join(v->th, NULL);
  }
  pthread_cond_destroy(&v->done_cv);
  pthread_cond_destroy(&v->work_cv);
  pthread_mutex_destroy(&v->mu);
  free(v->jobs);
  free(v->queue);
  free(v->done);
  free(v);
}

int spill_rcheck_submit(spill_rcheck *v, int tag, const char *file, int layer, uint32_t id,
                        const void *data, size_t bytes) {
  if (v->failed || tag < 0) return 0;
  pthread_mutex_lock(&v->mu);
  if (tag >= v->cap && grow_locked(v, tag + 1) < 0) {
    pthread_mutex_unlock(&v->mu);
    return 0;
  }
  job *j = &v->jobs[tag];
  j->layer = layer;
  j->id = id;
  j->file = file;
  j->data = data;
  j->bytes = bytes;
  j->rc = SPILL_OK;
  v->queue[(v->q_head + v->q_n) % v->cap] = tag;
  v->q_n++;
  v->q_bytes += bytes;
  pthread_mutex_unlock(&v->mu);
  v->pending++;
  return 1;
}

void spill_rcheck_kick(spill_rcheck *v) {
  if (v->failed) return;
  if (!v->started) {
    /* Started on first use, so a stream without verify has no thread. If it
     * cannot start, queued checks are stolen by the consumer (collect) and
     * later records are checked inline (submit returns 0). */
    if (pthread_create(&v->th, NULL, helper_main, v) != 0) {
      v->failed = 1;
      return;
    }
    v->started = 1;
  }
  uint64_t t0 = spill_clock_ns();
  pthread_mutex_lock(&v->mu);
  int wake = v->sleeping && v->q_n > 0 && v->q_bytes >= WAKE_BYTES;
  pthread_mutex_unlock(&v->mu);
  if (wake) pthread_cond_signal(&v->work_cv);
  v->consumer_ns += spill_clock_ns() - t0; /* a wake-up is a cost of verify too */
}

int spill_rcheck_collect(spill_rcheck *v, spill_rcheck_result *out, int max, int mode) {
  if (max < 1 || v->pending == 0) return 0;
  uint64_t t_wait = 0;
  pthread_mutex_lock(&v->mu);
  for (;;) {
    if (v->d_n > 0) {
      int n = 0;
      while (n < max && v->d_n > 0) {
        int tag = ring_pop(v->done, v->cap, &v->d_head, &v->d_n);
        const job *j = &v->jobs[tag];
        out[n].tag = tag;
        out[n].rc = j->rc;
        out[n].err.code = 0;
        out[n].err.msg[0] = '\0';
        if (j->rc < 0) out[n].err = j->err;
        n++;
      }
      pthread_mutex_unlock(&v->mu);
      v->pending -= n;
      if (t_wait) v->consumer_ns += spill_clock_ns() - t_wait;
      return n;
    }
    if (mode >= SPILL_RCHECK_STEAL && v->q_n > 0) {
      int tag = ring_pop(v->queue, v->cap, &v->q_head, &v->q_n);
      job j = v->jobs[tag];
      v->q_bytes -= j.bytes;
      pthread_mutex_unlock(&v->mu);
      uint64_t t0 = spill_clock_ns();
      out[0].tag = tag;
      out[0].err.code = 0;
      out[0].err.msg[0] = '\0';
      out[0].rc = spill_record_check(v->m, j.file, j.layer, j.id, j.data, j.bytes, 1, &out[0].err);
      uint64_t t1 = spill_clock_ns();
      v->consumer_ns += t1 - (t_wait ? t_wait : t0);
      v->pending--;
      return 1;
    }
    if (mode >= SPILL_RCHECK_BLOCK && v->running > 0) {
      if (!t_wait) t_wait = spill_clock_ns();
      pthread_cond_wait(&v->done_cv, &v->mu);
      continue;
    }
    pthread_mutex_unlock(&v->mu);
    return 0;
  }
}

int spill_rcheck_pending(const spill_rcheck *v) { return v ? v->pending : 0; }

void spill_rcheck_times(spill_rcheck *v, uint64_t *helper_ns, uint64_t *consumer_ns) {
  pthread_mutex_lock(&v->mu);
  *helper_ns = v->helper_ns;
  pthread_mutex_unlock(&v->mu);
  *consumer_ns = v->consumer_ns;
}

void spill_rcheck_reset_times(spill_rcheck *v) {
  pthread_mutex_lock(&v->mu);
  v->helper_ns = 0;
  pthread_mutex_unlock(&v->mu);
  v->consumer_ns = 0;
}
