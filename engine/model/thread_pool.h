/* engine/model/thread_pool.h: the small pthread pool of the forward pass.
 *
 * spill_pool_run(fn, ctx, n_tasks) runs fn(ctx, task, thread) for every task
 * in [0, n_tasks) on n_threads threads (the caller is thread 0) and returns
 * when all are done. Tasks are claimed dynamically, so callers must make
 * each task's result independent of which thread runs it (the forward pass
 * splits matvecs by rows; kernels are row-deterministic), which keeps logits
 * bit-identical for any thread count. Workers spin briefly, then sleep.
 * One caller at a time (not re-entrant); depends on engine/base only.
 */
#ifndef SPILL_MODEL_THREAD_POOL_H
#define SPILL_MODEL_THREAD_POOL_H

#include <stdint.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_pool spill_pool;
typedef void (*spill_pool_fn)(void *ctx, int task, int thread);

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started.
 * On success *out owns the threads; close with spill_pool_close. */
int spill_pool_open(int n_threads, spill_pool **out, spill_err *e);
void spill_pool_close(spill_pool *p); /* joins the workers; NULL fine */
int spill_pool_n_threads(const spill_pool *p);
/* Runs handed to the workers since open (tasks split across threads; runs
 * done inline, with one thread or one task, do not count). Deterministic for
 * a given workload and thread count. Read from the caller's thread. */
uint64_t spill_pool_dispatches(const spill_pool *p);
/* Runs all tasks; fn must not call spill_pool_run on the same pool. */
void spill_pool_run(spill_pool *p, spill_pool_fn fn, void *ctx, int n_tasks);

/* One step of a spill_pool_run_steps job: n_tasks (0: none) of fn(ctx, task,
 * thread), independent of each other. */
typedef struct spill_pool_step {
  spill_pool_fn fn;
  void *ctx;
  int n_tasks;
} spill_pool_step;
#define SPILL_POOL_STEPS_MAX 12
/* Runs n_steps (<= SPILL_POOL_STEPS_MAX) steps in order as one job, one
 * dispatch (one fork-join) instead of one per step: no task of step s + 1
 * starts before every task of step s has returned (a barrier inside the
 * job: a thread with no task left to claim spins briefly on the step's
 * count, then sleeps until its last task is done). A step's tasks may read
 * what earlier steps wrote. Inline (no dispatch) with one thread or when
 * no step has more than one task. The thread argument is unique to one
 * thread within the job, as in spill_pool_run. */
void spill_pool_run_steps(spill_pool *p, const spill_pool_step *steps, int n_steps);

#ifdef __cplusplus
}
#endif
#endif
