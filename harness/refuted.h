/* harness/refuted.h: the refuted/ log: one Markdown entry per refuted
 * hypothesis (written by the runner, never by hand), and its index.
 *
 * Entry: refuted/NNNN-slug.md with a front-matter block (id, date, commit,
 * machine, hypothesis, metric, prediction, result with CI, verdict, config,
 * results), then the table and the plot, then a "Notes" slot for a human.
 * refuted/README.md is regenerated from the entries' front matter.
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
 * directory) and regenerates the index. entry_out gets the entry's path. */
int spill_refuted_write(const char *refuted_dir, const char *results_dir,
                        const spill_exp_report_result *res, char *entry_out, size_t n,
                        spill_err *e);

typedef struct spill_refuted_entry {
  char file[256];
  char id[8], date[32], hypothesis[256], metric[32], result[512], verdict[16], results[512];
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
