/* harness/refuted.h: the refuted/ log: one Markdown entry per refuted
 * hypothesis, and its index.
 *
 * Entry: NNNN-slug.md with a front-matter block (id, date, commit, machine,
 * written_by, hypothesis, metric, prediction, result with CI, verdict,
 * config, results), then the table and the plot, then a "Notes" slot for a
 * human. The runner writes written_by "spill exp"; entries measured outside
 * the runner (prototypes, tests) say "hand" and are written by people.
 * README.md is regenerated from the entries' front matter.
 */
#ifndef SPILL_HARNESS_REFUTED_H
#define SPILL_HARNESS_REFUTED_H

#include <stddef.h>

#include "engine/spill.h"
#include "harness/exp_report.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the entry for results_dir (unless one already names that results
 * directory) and regenerates the index. config_path is the config file the
 * run was started with (its "config:" line; NULL or "" = the resolved copy,
 * results_dir/config.json). entry_out gets the entry's path. */
int spill_refuted_write(const char *refuted_dir, const char *results_dir, const char *config_path,
                        const spill_exp_report_result *res, char *entry_out, size_t n,
                        spill_err *e);

typedef struct spill_refuted_entry {
  char file[256];
  char id[8], date[32], hypothesis[256], metric[32], result[512], verdict[16], results[512];
  char written_by[32]; /* "spill exp", "hand", or "" when the entry does not say */
} spill_refuted_entry;

/* Reads every entry's front matter (sorted by id). *out malloc'd. */
int spill_refuted_list(const char *refuted_dir, spill_refuted_entry **out, int *n_out,
                       spill_err *e);
/* Regenerates refuted_dir/README.md. */
int spill_refuted_index(const char *refuted_dir, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
