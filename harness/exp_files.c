/* harness/exp_files.c: fsynced appends of whole rows, the rows reader with
 * its torn-line repair, mkdir -p. Files are opened through engine/base's
 * safe_file (spill.h): never through a symlink, only regular files. */
#define _POSIX_C_SOURCE 200809L
#include "harness/exp_files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int spill_exp_append_line(const char *file, const char *line, spill_err *e) {
  size_t n = strlen(line);
  char *buf = malloc(n + 1);
  if (!buf) return spill_err_set(e, SPILL_E_NOMEM, "append: no memory");
  memcpy(buf, line, n);
  buf[n] = '\n';
  int fd; /* never through a symlink, only into a regular file */
  int rc = spill_file_open_write(file, O_WRONLY | O_CREAT | O_APPEND, 0644, &fd, e);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  struct stat st;
  off_t before = fstat(fd, &st) == 0 ? st.st_size : -1;
  int bad = write_all(fd, buf, n + 1) < 0 || fsync(fd) < 0;
  int err = errno;
  /* A write cut short (ENOSPC, EFBIG) must not leave a torn line for the
   * next append to glue onto: cut the file back to its last whole line. */
  if (bad && before >= 0 && ftruncate(fd, before) == 0) fsync(fd);
  close(fd);
  free(buf);
  if (bad) return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(err));
  return SPILL_OK;
}

void spill_exp_lines_free(char **lines, int n) {
  if (!lines) return;
  for (int i = 0; i < n; i++) free(lines[i]);
  free(lines);
}

/* 1-based line number of byte off of buf. */
static long line_of(const char *buf, size_t off) {
  long ln = 1;
  for (size_t i = 0; i < off; i++) ln += buf[i] == '\n';
  return ln;
}

/* The bytes after the last newline, tail[0..n): a row cut by a crash (the
 * start of a JSON object: '{' and no NUL) possibly followed by NULs, or only
 * NULs (a power loss can leave the file's new length with its data blocks
 * unwritten: zeros). Anything else is not a torn row. */
static int is_torn_tail(const char *tail, size_t n) {
  while (n > 0 && tail[n - 1] == '\0') n--;
  return n == 0 || (tail[0] == '{' && memchr(tail, '\0', n) == NULL);
}

/* Splits buf[0..complete) (whole lines, no NUL) into malloc'd strings. */
static int split_lines(const char *file, char *buf, size_t complete, char ***lines_out,
                       int *n_out, spill_err *e) {
  int cap = 64, n = 0;
  char **lines = malloc((size_t)cap * sizeof *lines);
  for (size_t i = 0; lines && i < complete;) {
    char *nl = memchr(buf + i, '\n', complete - i);
    size_t len = (size_t)(nl - (buf + i));
    if (len) {
      if (n == cap) {
        cap *= 2;
        char **nlns = realloc(lines, (size_t)cap * sizeof *lines);
        if (!nlns) {
          spill_exp_lines_free(lines, n);
          lines = NULL;
          break;
        }
        lines = nlns;
      }
      lines[n] = strndup(buf + i, len);
      if (!lines[n]) {
        spill_exp_lines_free(lines, n);
        lines = NULL;
        break;
      }
      n++;
    }
    i += len + 1;
  }
  if (!lines) return spill_err_set(e, SPILL_E_NOMEM, "%s: no memory", file);
  *lines_out = lines;
  *n_out = n;
  return SPILL_OK;
}

int spill_exp_read_lines(const char *file, int repair, char ***lines_out, int *n_out,
                         spill_err *e) {
  *lines_out = NULL;
  *n_out = 0;
  struct stat st;
  if (lstat(file, &st) < 0) {
    if (errno == ENOENT) return SPILL_OK;
    return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(errno));
  }
  /* a rows file is written here: refuse a link now, not at the first append */
  if (repair && S_ISLNK(st.st_mode))
    return spill_err_set(e, SPILL_E_IO,
                         "%s: is a symbolic link; spill does not write through links", file);
  char *buf;
  size_t len;
  SPILL_TRY(spill_read_file(file, (size_t)1 << 31, &buf, &len, e));
  /* the real length, not strlen: a NUL is damage to report, never an end */
  size_t complete = len;
  while (complete > 0 && buf[complete - 1] != '\n') complete--;
  const char *nul = memchr(buf, '\0', complete);
  if (nul) {
    long ln = line_of(buf, (size_t)(nul - buf));
    free(buf);
    return spill_err_set(e, SPILL_E_FORMAT,
                         "%s: line %ld: a NUL byte inside a row (the file is damaged; rows are "
                         "never deleted: remove or mend line %ld by hand)", file, ln, ln);
  }
  if (complete < len && !is_torn_tail(buf + complete, len - complete)) {
    long ln = line_of(buf, complete);
    free(buf);
    return spill_err_set(e, SPILL_E_FORMAT,
                         "%s: line %ld: %zu bytes without a newline that are not a row cut by "
                         "a crash (not the start of a JSON object); not deleted", file, ln,
                         len - complete);
  }
  if (complete < len && repair) {
    int fd;
    int rc = spill_file_open_write(file, O_WRONLY, 0, &fd, e);
    if (rc == SPILL_OK) {
      if (ftruncate(fd, (off_t)complete) < 0 || fsync(fd) < 0)
        rc = spill_err_set(e, SPILL_E_IO, "%s: truncating a torn last line: %s", file,
                           strerror(errno));
      close(fd);
    }
    if (rc < 0) {
      free(buf);
      return rc;
    }
  }
  int rc = split_lines(file, buf, complete, lines_out, n_out, e);
  free(buf);
  return rc;
}

FILE *spill_exp_fopen_write(const char *path, spill_err *e) {
  int fd;
  if (spill_file_open_write(path, O_WRONLY | O_CREAT | O_TRUNC, 0644, &fd, e) < 0) return NULL;
  FILE *f = fdopen(fd, "w");
  if (!f) {
    spill_err_set(e, SPILL_E_NOMEM, "%s: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

FILE *spill_exp_fopen_read(const char *path, spill_err *e) {
  int fd;
  if (spill_file_open_read(path, 0, &fd, e) < 0) return NULL;
  FILE *f = fdopen(fd, "r");
  if (!f) {
    spill_err_set(e, SPILL_E_NOMEM, "%s: %s", path, strerror(errno));
    close(fd);
  }
  return f;
}

int spill_exp_dir_check(const char *dir, spill_err *e) {
  size_t n = strlen(dir);
  SPILL_FAIL_IF(e, n >= SPILL_EXP_DIR_MAX, SPILL_E_INVALID_ARG,
                "results directory %.80s...: path too long (%zu bytes, at most %d so that the "
                "paths of its files fit PATH_MAX)", dir, n, SPILL_EXP_DIR_MAX - 1);
  return SPILL_OK;
}

int spill_exp_mkdirs(const char *dir, spill_err *e) {
  char buf[SPILL_PATH_MAX];
  SPILL_TRY(spill_path_fmt(buf, sizeof buf, e, "%s", dir));
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || *p == 0) {
      char c = *p;
      *p = 0;
      if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return spill_err_set(e, SPILL_E_IO, "mkdir %s: %s", buf, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  return SPILL_OK;
}
