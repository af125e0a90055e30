/* harness/exp_env.h: what a results directory records about the machine
 * and the tree a run came from (env.json, the git commit); defined in
 * harness/exp_env.c. Used by the runner; knows nothing of runs or reports. */
#ifndef SPILL_HARNESS_EXP_ENV_H
#define SPILL_HARNESS_EXP_ENV_H

#include <stddef.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* env.json for a run on model_dir: CPU, cores, RAM, kernel, filesystem and
 * device of model_dir, an O_DIRECT read bandwidth probe (skipped when quick),
 * compiler, git commit and dirty flag, manifest hash. *json_out malloc'd. */
int spill_exp_env_json(const char *model_dir, int quick, char **json_out, spill_err *e);
/* Short git commit of the working directory ("nogit" outside git) and
 * whether tracked files differ from it. */
void spill_exp_git_commit(char *buf, size_t n, int *dirty);

#ifdef __cplusplus
}
#endif
#endif
