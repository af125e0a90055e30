/* engine/model/thread_pool.c: fork-join pool for the forward pass.
 *
 * One job at a time: the caller publishes (fn, ctx, n_tasks) under the mutex
 * and bumps a generation counter; workers (spinning briefly, then sleeping on
 * a condition variable) copy the job under the mutex and claim task indices
 * with an atomic counter, as does the caller (thread 0). The caller returns
 * once every task has run. Before publishing the next job the caller waits
 * until no worker still holds the previous one (busy == 0), so a late worker
 * can never run an old fn on a new task index. A short spin catches the
 * next job of a burst (attention's matvecs); each worker spins at most
 * SPIN_ITERS polls before sleeping.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine/model/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* ~2000 pauses (tens of microseconds) before sleeping: a MoE layer is one
 * job now (moe.c), so workers wait between the few jobs of attention and
 * the output matrix; a longer spin took a core the reader's threads need on
 * a 2-vCPU machine (docs/PERFORMANCE.md; was 20000). */
#define SPIN_ITERS 2000

typedef struct worker_arg {
  spill_pool *p;
  int tid;
} worker_arg;

struct spill_pool {
  int n_threads;
  pthread_t *th;
  worker_arg *args;
  int n_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_work, cv_done;
  /* current job (written under mu while busy == 0) */
  spill_pool_fn fn;
  void *ctx;
  int n_tasks;
  atomic_int next;
  atomic_int done;
  atomic_uint gen;
  int busy; /* workers holding the current job (under mu) */
  int stop;
  uint64_t dispatches; /* runs handed to the workers (caller's thread only) */
};

static void run_tasks(spill_pool_fn fn, void *ctx, int n, atomic_int *next, int tid, int *ran) {
  for (;;) {
    int t = atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
    if (t >= n) break;
    fn(ctx, t, tid);
    (*ran)++;
  }
}

static void *worker_main(void *arg) {
  worker_arg *wa = arg;
  spill_pool *p = wa->p;
  unsigned seen = 0;
  for (;;) {
    for (int i = 0; i < SPIN_ITERS; i++) {
      if (atomic_load_explicit(&p->gen, memory_order_acquire) != seen) break;
      CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->gen) == seen && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
    if (p->stop) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = atomic_load(&p->gen);
    spill_pool_fn fn = p->fn;
    void *ctx = p->ctx;
    int n = p->n_tasks;
    p->busy++;
    pthread_mutex_unlock(&p->mu);

    int ran = 0;
    run_tasks(fn, ctx, n, &p->next, wa->tid, &ran);

    int total = ran ? atomic_fetch_add(&p->done, ran) + ran : -1;
    pthread_mutex_lock(&p->mu);
    p->busy--;
    if (total == n || p->busy == 0) pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
  }
}

int spill_pool_open(int n_threads, spill_pool **out, spill_err *e) {
  SPILL_FAIL_IF(e, !out || n_threads < 1 || n_threads > 1024, SPILL_E_INVALID_ARG,
                "thread pool: n_threads %d out of range (1..1024)", n_threads);
  *out = NULL;
  spill_pool *p = calloc(1, sizeof *p);
  SPILL_FAIL_IF(e, !p, SPILL_E_NOMEM, "thread pool");
  p->n_threads = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv_work, NULL);
  pthread_cond_init(&p->cv_done, NULL);
  atomic_init(&p->next, 0);
  atomic_init(&p->done, 0);
  atomic_init(&p->gen, 0);
  if (n_threads > 1) {
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    p->args = calloc((size_t)n_threads, sizeof *p->args);
    if (!p->th || !p->args) {
      spill_pool_close(p);
      return spill_err_set(e, SPILL_E_NOMEM, "thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
      p->args[i].p = p;
      p->args[i].tid = i;
      if (pthread_create(&p->th[i], NULL, worker_main, &p->args[i]) != 0) {
        spill_pool_close(p);
        return spill_err_set(e, SPILL_E_INTERNAL, "thread pool: pthread_create failed for worker %d", i);
      }
      p->n_started = i;
    }
  }
  *out = p;
  return SPILL_OK;
}

void spill_pool_close(spill_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i <= p->n_started; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv_work);
  pthread_cond_destroy(&p->cv_done);
  free(p->th);
  free(p->args);
  free(p);
}

int spill_pool_n_threads(const spill_pool *p) { return p ? p->n_threads : 1; }

uint64_t spill_pool_dispatches(const spill_pool *p) { return p ? p->dispatches : 0; }

void spill_pool_run(spill_pool *p, spill_pool_fn fn, void *ctx, int n_tasks) {
  if (n_tasks <= 0) return;
  if (p->n_threads == 1 || n_tasks == 1) {
    for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    return;
  }
  p->dispatches++;
  pthread_mutex_lock(&p->mu);
  while (p->busy > 0) pthread_cond_wait(&p->cv_done, &p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n_tasks = n_tasks;
  atomic_store(&p->next, 0);
  atomic_store(&p->done, 0);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->cv_work);
  pthread_mutex_unlock(&p->mu);

  int ran = 0;
  run_tasks(fn, ctx, n_tasks, &p->next, 0, &ran);
  if (ran) atomic_fetch_add(&p->done, ran);
  for (int i = 0; i < SPIN_ITERS; i++) {
    if (atomic_load_explicit(&p->done, memory_order_acquire) == n_tasks) return;
    CPU_RELAX();
  }
  pthread_mutex_lock(&p->mu);
  while (atomic_load(&p->done) < n_tasks) pthread_cond_wait(&p->cv_done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
