/* harness/exp_files.h: crash-safe file writing for results directories.
 *
 * Invariants: a results file is either absent, its old content, or its whole
 * new content (spill_write_file_atomic, spill.h: temp file made with O_EXCL
 * in the same directory, fsync, rename, fsync of the directory); no file is
 * written through a symlink (spill_file_open_write); runs.jsonl only grows
 * by whole lines (one write + fsync per row), and a reader drops a torn last
 * line left by a crash (truncating it away before appending again). Uses
 * only the public header.
 */
#ifndef SPILL_HARNESS_EXP_FILES_H
#define SPILL_HARNESS_EXP_FILES_H

#include <stddef.h>
#include <stdio.h>

#include "engine/spill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends one line (a '\n' is added) with a single write and fsyncs. */
int spill_exp_append_line(const char *file, const char *line, spill_err *e);
/* Reads file's complete lines (a missing file is 0 lines), by its real
 * length. A last line without '\n' that a crash can leave (the start of a
 * row, NULs from a power loss, or the two) is dropped and, when repair,
 * truncated away on disk. Rows are never deleted otherwise: a NUL byte
 * before the last newline, or a tail that is not a cut row (random bytes),
 * is SPILL_E_FORMAT naming the line. With repair, a symlink as file is
 * refused (it is about to be written). *lines_out is a malloc'd array of
 * malloc'd strings; free with spill_exp_lines_free. */
int spill_exp_read_lines(const char *file, int repair, char ***lines_out, int *n_out,
                         spill_err *e);
void spill_exp_lines_free(char **lines, int n);
/* A results (or refuted/) directory's path leaves room for its files' paths:
 * every file spill writes there is DIR plus a suffix shorter than 512 bytes
 * (a run key is at most 200), so DIR is at most SPILL_EXP_DIR_MAX - 1 bytes
 * and no path under it is ever cut. */
#define SPILL_EXP_DIR_MAX (SPILL_PATH_MAX - 512)
/* SPILL_E_INVALID_ARG "results directory DIR...: path too long (N bytes, at
 * most M so that the paths of its files fit PATH_MAX)" when dir does not. */
int spill_exp_dir_check(const char *dir, spill_err *e);
/* fopen(path, "w") and (path, "r") through spill_file_open_write /
 * spill_file_open_read: never through a symlink, only a regular file, no
 * hang on a FIFO. NULL with e set on failure. */
FILE *spill_exp_fopen_write(const char *path, spill_err *e);
FILE *spill_exp_fopen_read(const char *path, spill_err *e);
/* mkdir -p. */
int spill_exp_mkdirs(const char *dir, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
