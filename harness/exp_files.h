/* harness/exp_files.h: crash-safe file writing for results directories.
 *
 * Invariants: a results file is either absent, its old content, or its whole
 * new content (temp file in the same directory, fsync, rename, fsync of the
 * directory); runs.jsonl only grows by whole lines (one write + fsync per
 * row), and a reader drops a torn last line left by a crash (truncating it
 * away before appending again). No engine dependency.
 */
#ifndef SPILL_HARNESS_EXP_FILES_H
#define SPILL_HARNESS_EXP_FILES_H

#include <stddef.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes data to file atomically (see above). */
int spill_exp_write_atomic(const char *file, const void *data, size_t len, spill_err *e);
/* Appends one line (a '\n' is added) with a single write and fsyncs. */
int spill_exp_append_line(const char *file, const char *line, spill_err *e);
/* Reads file's complete lines (a missing file is 0 lines). A last line
 * without '\n' (torn by a crash) is dropped and, when repair, truncated away
 * on disk. *lines_out is a malloc'd array of malloc'd strings; free with
 * spill_exp_lines_free. */
int spill_exp_read_lines(const char *file, int repair, char ***lines_out, int *n_out,
                         spill_err *e);
void spill_exp_lines_free(char **lines, int n);
/* mkdir -p. */
int spill_exp_mkdirs(const char *dir, spill_err *e);
/* Reads a whole file (at most max bytes) into a NUL-terminated malloc'd
 * buffer. A read error and a file over max are SPILL_E_IO saying which
 * ("larger than 1.00 MiB"). */
int spill_exp_read_file(const char *file, size_t max, char **out, spill_err *e);
/* The same for a file a user names (config, prompt_file): a directory or
 * other non-regular file is refused as such ("is a directory, not a file"),
 * never reported as too large or empty. */
int spill_exp_read_text(const char *file, size_t max, char **out, spill_err *e);
/* Checks JSON text the parsers take (configs, results rows): valid UTF-8
 * (RFC 3629: no overlongs, surrogates or code points past U+10FFFF) and no
 * object with a repeated key anywhere in root (JSON libraries disagree on
 * which copy wins). SPILL_E_CONFIG "<source>: byte N: invalid UTF-8" or
 * "<source>: <json path>: duplicate key". */
int spill_exp_json_check(const char *text, const void *root, const char *source, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
