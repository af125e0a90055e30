/* harness/tune.h: `spill tune MODEL`: this machine's best knobs for a model
 * (issue 28 item 2).
 *
 * Coordinate search through the experiment runner: for each axis in turn
 * (threads, io_backend, io_threads, io_depth, lookahead, policy) an
 * experiment whose control arm is the best setting so far and whose other
 * arms are the axis's candidates, run in ABBA order (`pairs` pairs per arm)
 * on a short greedy decode from an empty expert cache (cold: the container
 * evicted from the page cache before every run). Every arm is `exact` (these
 * knobs never change numerics; the runner checks the tokens). A candidate
 * replaces the control only when it is faster with evidence: its decode
 * tok/s ratio to the control has a 95% bootstrap interval above 1 and a
 * Mann-Whitney p below 0.05; among such candidates the largest median ratio
 * wins. An axis whose experiment fails (io_uring missing, say) keeps its
 * control and says why. The chosen knobs become a profile
 * (tune_profile.h); the evidence (each axis's ratios, intervals, p and
 * results directory) is saved with it.
 */
#ifndef SPILL_HARNESS_TUNE_H
#define SPILL_HARNESS_TUNE_H

#include <limits.h>
#include <stddef.h>

#include "engine/spill.h"
#include "harness/exp_runner.h"
#include "harness/tune_profile.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_TUNE_AXES 6

typedef struct spill_tune_opts {
  const char *model_dir;    /* the container */
  const char *budget;       /* the budget runs use ("default" or NULL: the engine's rule) */
  const char *prompt;       /* NULL: a built-in paragraph */
  int decode_tokens;        /* <= 0: 16 */
  int pairs;                /* ABBA pairs per arm; <= 0: 2 */
  const char *axes;         /* comma-separated subset of the axes; NULL: all */
  const char *results_root; /* the experiments' results (NULL: "results") */
  int quick_env;            /* skip the runner's O_DIRECT probe (tests) */
  volatile int *stop;
  spill_exp_progress_cb progress;
  void *user;
} spill_tune_opts;

typedef struct spill_tune_axis {
  char axis[32];
  char control[64];    /* the setting before this axis */
  char chosen[64];     /* after it */
  char best[64];       /* the fastest candidate by median ratio ("" when none ran) */
  double ratio, ci_lo, ci_hi, p; /* of `best` over the control (0 when none ran) */
  int pairs;           /* measured pairs behind the ratio */
  char results_dir[PATH_MAX];
  char note[512];      /* why the control was kept, or an axis's failure */
} spill_tune_axis;

typedef struct spill_tune_result {
  int n_axes;
  spill_tune_axis axes[SPILL_TUNE_AXES];
  spill_tune_profile profile; /* the chosen knobs, bound to this model and machine */
} spill_tune_result;

/* The axes' names in search order, comma-separated (for usage text). */
const char *spill_tune_axis_names(void);

/* Runs the search; fills r. SPILL_E_INTERRUPTED when *stop was set (r holds
 * the axes finished). The caller saves r->profile (spill_tune_profile_save,
 * with spill_tune_evidence). */
int spill_tune_run(const spill_tune_opts *o, spill_tune_result *r, spill_err *e);

/* r's axes as a JSON array (the caller cJSON_Deletes it); NULL on no memory. */
struct cJSON *spill_tune_evidence(const spill_tune_result *r);

#ifdef __cplusplus
}
#endif
#endif
