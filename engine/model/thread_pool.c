/* engine/model/thread_pool.c: fork-join pool for the forward pass.
 *
 * One job at a time: the caller publishes (fn, ctx, n_tasks) under the mutex
 * and bumps a generation counter; workers (spinning briefly, then sleeping on
 * a condition variable) copy the job under the mutex and claim task indices
 * with an atomic counter, as does the caller (thread 0). The caller returns
 * once every task has run. Before publishing the next job the caller waits
 * until no worker still holds the previous one (busy == 0), so a late worker
 * can never run an old fn on a new task index. A short spin catches the
 * next job of a burst; each worker spins at most SPIN_ITERS polls before
 * sleeping. spill_pool_run_steps runs several dependent steps (an
 * attention layer's) as one job with barriers inside it (below).
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
  /* spill_pool_run_steps: threads waiting for a step's last task sleep on
   * step_cv (under step_mu) after their spin */
  pthread_mutex_t step_mu;
  pthread_cond_t step_cv;
  atomic_int step_waiters;
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
  pthread_mutex_init(&p->step_mu, NULL);
  pthread_cond_init(&p->step_cv, NULL);
  atomic_init(&p->step_waiters, 0);
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
  pthread_mutex_destroy(&p->step_mu);
  pthread_cond_destroy(&p->step_cv);
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

/* ---- steps: several barrier-separated steps as one job ----
 *
 * The job is n_threads copies of one runner (spill_pool_run's tasks), each
 * walking the steps in order: claim the step's tasks from its counter until
 * none is left, add what it ran to the step's done count, and wait until
 * that count is the step's n_tasks before going on. A runner that starts
 * late (a worker still waking) finds the earlier steps done and joins
 * where the others are; one thread alone runs every task, so nothing waits
 * on a thread that never comes. The wait spins STEP_SPIN polls, then
 * sleeps on step_cv; the thread finishing a step's last task broadcasts
 * when someone sleeps (done and step_waiters are both seq_cst, so either
 * the sleeper sees the count or the finisher sees the sleeper). */

/* ~1000 pauses (~20-40 us): attention's steps wait for a few heads or a
 * short serial step; longer waits (a descheduled thread) sleep */
#define STEP_SPIN 1000

typedef struct steps_job {
  spill_pool *p;
  const spill_pool_step *steps;
  int n;
  atomic_int next[SPILL_POOL_STEPS_MAX];
  atomic_int done[SPILL_POOL_STEPS_MAX];
} steps_job;

static void steps_runner(void *ctx, int task, int thread) {
  (void)task;
  steps_job *j = ctx;
  spill_pool *p = j->p;
  for (int s = 0; s < j->n; s++) {
    const spill_pool_step *st = &j->steps[s];
    const int n = st->n_tasks;
    if (n <= 0) continue;
    int ran = 0;
    for (;;) {
      const int t = atomic_fetch_add_explicit(&j->next[s], 1, memory_order_relaxed);
      if (t >= n) break;
      st->fn(st->ctx, t, thread);
      ran++;
    }
    if (ran && atomic_fetch_add(&j->done[s], ran) + ran == n) {
      if (atomic_load(&p->step_waiters) > 0) {
        pthread_mutex_lock(&p->step_mu);
        pthread_cond_broadcast(&p->step_cv);
        pthread_mutex_unlock(&p->step_mu);
      }
      continue;
    }
    int i = 0;
    while (atomic_load_explicit(&j->done[s], memory_order_acquire) < n && i < STEP_SPIN) {
      CPU_RELAX();
      i++;
    }
    if (atomic_load(&j->done[s]) < n) {
      pthread_mutex_lock(&p->step_mu);
      atomic_fetch_add(&p->step_waiters, 1);
      while (atomic_load(&j->done[s]) < n) pthread_cond_wait(&p->step_cv, &p->step_mu);
      atomic_fetch_sub(&p->step_waiters, 1);
      pthread_mutex_unlock(&p->step_mu);
    }
  }
}

void spill_pool_run_steps(spill_pool *p, const spill_pool_step *steps, int n_steps) {
  if (n_steps <= 0) return;
  int split = 0;
  for (int s = 0; s < n_steps; s++) split |= steps[s].n_tasks > 1;
  if (n_steps > SPILL_POOL_STEPS_MAX) { /* a caller's bug: still right, one run per step */
    for (int s = 0; s < n_steps; s++) spill_pool_run(p, steps[s].fn, steps[s].ctx, steps[s].n_tasks);
    return;
  }
  if (p->n_threads == 1 || !split) {
    for (int s = 0; s < n_steps; s++)
      for (int t = 0; t < steps[s].n_tasks; t++) steps[s].fn(steps[s].ctx, t, 0);
    return;
  }
  steps_job j;
  j.p = p;
  j.steps = steps;
  j.n = n_steps;
  for (int s = 0; s < n_steps; s++) {
    atomic_init(&j.next[s], 0);
    atomic_init(&j.done[s], 0);
  }
  spill_pool_run(p, steps_runner, &j, p->n_threads);
}
