/* engine/base/safe_file.h: the one way spill opens files it did not write.
 *
 * Rules (docs/RELIABILITY.md, "Opening files"):
 *  - Reading: open with O_NONBLOCK, fstat, refuse anything but a regular file
 *    by its kind ("is a FIFO"), then clear O_NONBLOCK. A FIFO, socket or
 *    device in place of a container, config, trace or checkpoint is a named
 *    error, never a hang in open() or read(). Symlinks are followed (model
 *    caches are links into blob stores).
 *  - Writing: never through a symlink (O_NOFOLLOW: "is a symbolic link"), only
 *    into a regular file; locks are created with O_CREAT|O_NOFOLLOW, new
 *    files with O_EXCL; a whole-file write is a temp file made with O_EXCL in
 *    the same directory, fsync, rename, fsync of the directory.
 *  - Paths: formatted with spill_path_fmt, which refuses a path that does not
 *    fit (or is longer than SPILL_PATH_MAX) instead of cutting it.
 * Public: re-exported by engine/spill.h for its clients (CLI, harness,
 * server). Depends on libc only. Thread-safe (no shared state). */
#ifndef SPILL_BASE_SAFE_FILE_H
#define SPILL_BASE_SAFE_FILE_H

#include <stdarg.h>
#include <stddef.h>

#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest path spill accepts, in bytes including the terminating NUL
 * (Linux's PATH_MAX). */
#define SPILL_PATH_MAX 4096

/* Formats a path into buf (cap bytes). A result that does not fit in cap, or
 * is longer than SPILL_PATH_MAX - 1, is SPILL_E_INVALID_ARG "path too long
 * (N bytes, the limit is M): <its start>..." and buf is set to "". Never
 * returns a truncated path. */
int spill_path_fmt(char *buf, size_t cap, spill_err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int spill_path_vfmt(char *buf, size_t cap, spill_err *e, const char *fmt, va_list ap);

/* "a regular file", "a directory", "a FIFO", "a socket", "a character
 * device", "a block device", "a symbolic link" for st_mode. Static. */
const char *spill_file_kind(unsigned mode);

/* Opens path for reading (O_RDONLY | O_CLOEXEC | extra_flags, e.g. O_DIRECT)
 * without blocking, and only if it is a regular file: otherwise SPILL_E_IO
 * "PATH: is a FIFO, not a regular file" (nothing is left open). The fd
 * returned is blocking; the caller closes it. A path too long is
 * SPILL_E_INVALID_ARG. When open(2) itself fails, errno is its errno. */
int spill_file_open_read(const char *path, int extra_flags, int *fd_out, spill_err *e);

/* Opens path for writing: flags are O_WRONLY or O_RDWR plus any of O_CREAT,
 * O_EXCL, O_TRUNC, O_APPEND; O_NOFOLLOW | O_CLOEXEC are always added. A
 * symlink as the last component is SPILL_E_IO "PATH: is a symbolic link;
 * spill does not write through links"; anything but a regular file is
 * refused like spill_file_open_read (the check runs before any byte is
 * written; O_TRUNC on a FIFO truncates nothing). The caller closes the fd. */
int spill_file_open_write(const char *path, int flags, unsigned mode, int *fd_out,
                          spill_err *e);

/* Reads a whole regular file (at most max_bytes; more is SPILL_E_IO "PATH:
 * larger than N bytes") into a NUL-terminated malloc'd buffer the caller
 * frees with free(); *len_out (may be NULL) is its real length, which may
 * include NUL bytes: callers that need text check it (strlen != length). */
int spill_read_file(const char *path, size_t max_bytes, char **out, size_t *len_out,
                    spill_err *e);

/* Writes data to path atomically: a temp file "PATH.tmp.<pid>.<n>" created
 * with O_EXCL in the same directory, fsync, rename over path (a symlink at
 * path is replaced, never followed), fsync of the directory. On failure the
 * old file (if any) is intact and the temp removed. */
int spill_write_file_atomic(const char *path, const void *data, size_t len, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
