/* engine/base/safe_file.c: opening files we did not write (safe_file.h).
 *
 * Why O_NONBLOCK: open(2) of a FIFO for reading blocks until a writer
 * appears (issue 26 item 8: `spill verify` on a FIFO named experts-000.bin
 * hung forever). With O_NONBLOCK the open returns at once, fstat tells the
 * kind, and a regular file gets its blocking mode back (O_NONBLOCK means
 * nothing to regular files, but it would to a later pipe through dup).
 * Why O_NOFOLLOW on writes: a results directory may be shared or unpacked
 * from an archive; a symlink named runs.jsonl.lock must not let spill
 * truncate the file it points at (item 5). Depends on libc only. */
#define _GNU_SOURCE
#include "engine/base/safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int spill_path_vfmt(char *buf, size_t cap, spill_err *e, const char *fmt, va_list ap) {
  if (!buf || cap == 0) return spill_err_set(e, SPILL_E_INVALID_ARG, "path: no buffer");
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(buf, cap, fmt, aq);
  va_end(aq);
  size_t limit = cap - 1 < SPILL_PATH_MAX - 1 ? cap - 1 : SPILL_PATH_MAX - 1;
  if (n < 0 || (size_t)n > limit) {
    /* the start of the path names it; the whole of it would not fit a message */
    char head[81];
    snprintf(head, sizeof head, "%s", buf);
    buf[0] = '\0';
    return spill_err_set(e, SPILL_E_INVALID_ARG, "path too long (%d bytes, the limit is %zu): %s...",
                         n, limit, head);
  }
  return SPILL_OK;
}

int spill_path_fmt(char *buf, size_t cap, spill_err *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = spill_path_vfmt(buf, cap, e, fmt, ap);
  va_end(ap);
  return rc;
}

const char *spill_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
    default: return "not a file";
  }
}

static int check_path(const char *path, spill_err *e) {
  SPILL_FAIL_IF(e, !path || !path[0], SPILL_E_INVALID_ARG, "empty path");
  size_t n = strnlen(path, SPILL_PATH_MAX);
  SPILL_FAIL_IF(e, n >= SPILL_PATH_MAX, SPILL_E_INVALID_ARG,
                "path too long (%zu bytes, the limit is %d): %.80s...", strlen(path),
                SPILL_PATH_MAX - 1, path);
  return SPILL_OK;
}

/* fd must be a regular file; then blocking again. Closes fd on refusal. */
static int keep_regular(int fd, const char *path, spill_err *e) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return spill_err_set(e, SPILL_E_IO, "%s: %s", path, strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return spill_err_set(e, SPILL_E_IO, "%s: is %s, not a regular file", path,
                         spill_file_kind(st.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    int err = errno;
    close(fd);
    return spill_err_set(e, SPILL_E_IO, "%s: %s", path, strerror(err));
  }
  return SPILL_OK;
}

int spill_file_open_read(const char *path, int extra_flags, int *fd_out, spill_err *e) {
  if (fd_out) *fd_out = -1;
  SPILL_FAIL_IF(e, !fd_out, SPILL_E_INVALID_ARG, "spill_file_open_read: NULL argument");
  SPILL_TRY(check_path(path, e));
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | extra_flags);
  if (fd < 0) { /* errno kept for the caller (EINVAL: no O_DIRECT here) */
    int err = errno;
    spill_err_set(e, SPILL_E_IO, "%s: cannot open: %s", path, strerror(err));
    errno = err;
    return SPILL_E_IO;
  }
  SPILL_TRY(keep_regular(fd, path, e));
  *fd_out = fd;
  return SPILL_OK;
}

int spill_file_open_write(const char *path, int flags, unsigned mode, int *fd_out,
                          spill_err *e) {
  if (fd_out) *fd_out = -1;
  SPILL_FAIL_IF(e, !fd_out, SPILL_E_INVALID_ARG, "spill_file_open_write: NULL argument");
  SPILL_TRY(check_path(path, e));
  int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, (mode_t)mode);
  if (fd < 0) {
    int err = errno;
    struct stat st;
    if (err == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
      return spill_err_set(e, SPILL_E_IO,
                           "%s: is a symbolic link; spill does not write through links", path);
    /* ENXIO: a FIFO with no reader (non-blocking open for writing) */
    if (err == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
      return spill_err_set(e, SPILL_E_IO, "%s: is %s, not a regular file", path,
                           spill_file_kind(st.st_mode));
    return spill_err_set(e, SPILL_E_IO, "%s: cannot open: %s", path, strerror(err));
  }
  SPILL_TRY(keep_regular(fd, path, e));
  *fd_out = fd;
  return SPILL_OK;
}

static void size_msg(char *buf, size_t n, size_t max) {
  if (max >= ((size_t)1 << 20) && max % ((size_t)1 << 20) == 0)
    snprintf(buf, n, "%.2f MiB", (double)max / 1048576.0);
  else
    snprintf(buf, n, "%zu bytes", max);
}

int spill_read_file(const char *path, size_t max_bytes, char **out, size_t *len_out,
                    spill_err *e) {
  if (out) *out = NULL;
  if (len_out) *len_out = 0;
  SPILL_FAIL_IF(e, !out, SPILL_E_INVALID_ARG, "spill_read_file: NULL argument");
  int fd;
  SPILL_TRY(spill_file_open_read(path, 0, &fd, e));
  struct stat st;
  char lim[48];
  size_msg(lim, sizeof lim, max_bytes);
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size > (uint64_t)max_bytes) {
    close(fd);
    return spill_err_set(e, SPILL_E_IO, "%s: larger than %s", path, lim);
  }
  /* the size is a hint: the file may change while it is read; read to EOF,
   * never past max_bytes */
  size_t cap = (size_t)st.st_size + 1, got = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (!buf) {
      close(fd);
      return spill_err_set(e, SPILL_E_NOMEM, "%s: cannot allocate %zu bytes", path, cap + 1);
    }
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      free(buf);
      close(fd);
      return spill_err_set(e, SPILL_E_IO, "%s: read failed at byte %zu: %s", path, got,
                           strerror(err));
    }
    if (r == 0) break;
    got += (size_t)r;
    if (got > max_bytes) {
      free(buf);
      close(fd);
      return spill_err_set(e, SPILL_E_IO, "%s: larger than %s", path, lim);
    }
    if (got == cap) {
      size_t ncap = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
      if (ncap <= cap) ncap = cap + 1;
      char *nb = realloc(buf, ncap + 1);
      if (!nb) free(buf);
      buf = nb;
      cap = ncap;
    }
  }
  close(fd);
  buf[got] = '\0';
  *out = buf;
  if (len_out) *len_out = got;
  return SPILL_OK;
}

static int write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

static void fsync_dir_of(const char *path) {
  char dir[SPILL_PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path); /* check_path bounded it */
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) slash[1] = '\0';
  else *slash = '\0';
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

int spill_write_file_atomic(const char *path, const void *data, size_t len, spill_err *e) {
  static unsigned long counter; /* distinct temps for threads of one process */
  SPILL_TRY(check_path(path, e));
  char tmp[SPILL_PATH_MAX];
  unsigned long k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
  SPILL_TRY(spill_path_fmt(tmp, sizeof tmp, e, "%s.tmp.%ld.%lu", path, (long)getpid(), k));
  int fd;
  int rc = spill_file_open_write(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644, &fd, e);
  if (rc < 0) {
    spill_err_prefix(e, "%s: cannot create its temp file", path);
    return rc;
  }
  if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
    int err = errno;
    close(fd);
    unlink(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: write failed: %s", path, strerror(err));
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: close failed: %s", path, strerror(err));
  }
  if (rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: rename failed: %s", path, strerror(err));
  }
  fsync_dir_of(path);
  return SPILL_OK;
}
