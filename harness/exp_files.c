/* harness/exp_files.c: atomic writes, fsynced appends, torn-line repair. */
#define _POSIX_C_SOURCE 200809L
#include "harness/exp_files.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <libgen.h>
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

static void fsync_dir_of(const char *file) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", file);
  int fd = open(dirname(buf), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

int spill_exp_write_atomic(const char *file, const void *data, size_t len, spill_err *e) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", file, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return spill_err_set(e, SPILL_E_IO, "%s: %s", tmp, strerror(errno));
  if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
    int err = errno;
    close(fd);
    unlink(tmp);
    return spill_err_set(e, SPILL_E_IO, "%s: %s", tmp, strerror(err));
  }
  close(fd);
  if (rename(tmp, file) < 0) {
    int err = errno;
    unlink(tmp);
    return spill_err_set(e, SPILL_E_IO, "rename to %s: %s", file, strerror(err));
  }
  fsync_dir_of(file);
  return SPILL_OK;
}

int spill_exp_append_line(const char *file, const char *line, spill_err *e) {
  size_t n = strlen(line);
  char *buf = malloc(n + 1);
  if (!buf) return spill_err_set(e, SPILL_E_NOMEM, "append: no memory");
  memcpy(buf, line, n);
  buf[n] = '\n';
  int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    free(buf);
    return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(errno));
  }
  struct stat st;
  off_t before = fstat(fd, &st) == 0 ? st.st_size : -1;
  int rc = write_all(fd, buf, n + 1) < 0 || fsync(fd) < 0;
  int err = errno;
  /* A write cut short (ENOSPC, EFBIG) must not leave a torn line for the
   * next append to glue onto: cut the file back to its last whole line. */
  if (rc && before >= 0 && ftruncate(fd, before) == 0) fsync(fd);
  close(fd);
  free(buf);
  if (rc) return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(err));
  return SPILL_OK;
}

int spill_exp_read_text(const char *file, size_t max, char **out, spill_err *e) {
  *out = NULL;
  struct stat st;
  if (stat(file, &st) != 0) return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return spill_err_set(e, SPILL_E_IO, "%s: %s", file,
                         S_ISDIR(st.st_mode) ? "is a directory, not a file" : "not a regular file");
  return spill_exp_read_file(file, max, out, e);
}

int spill_exp_read_file(const char *file, size_t max, char **out, spill_err *e) {
  *out = NULL;
  FILE *f = fopen(file, "rb");
  if (!f) return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > (uint64_t)max) {
    fclose(f);
    if (max >= (1u << 20))
      return spill_err_set(e, SPILL_E_IO, "%s: larger than %.2f MiB", file, max / 1048576.0);
    return spill_err_set(e, SPILL_E_IO, "%s: larger than %zu bytes", file, max);
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (len < cap) break;
    if (cap >= max) break;
    cap *= 2;
    char *nb = realloc(buf, cap + 1);
    if (!nb) {
      free(buf);
      buf = NULL;
    } else {
      buf = nb;
    }
  }
  fclose(f);
  if (!buf) return spill_err_set(e, SPILL_E_NOMEM, "%s: no memory", file);
  if (len > max) {
    free(buf);
    return spill_err_set(e, SPILL_E_IO, "%s: larger than %zu bytes", file, max);
  }
  buf[len] = 0;
  *out = buf;
  return SPILL_OK;
}

void spill_exp_lines_free(char **lines, int n) {
  if (!lines) return;
  for (int i = 0; i < n; i++) free(lines[i]);
  free(lines);
}

int spill_exp_read_lines(const char *file, int repair, char ***lines_out, int *n_out,
                         spill_err *e) {
  *lines_out = NULL;
  *n_out = 0;
  struct stat st;
  if (stat(file, &st) < 0) {
    if (errno == ENOENT) return SPILL_OK;
    return spill_err_set(e, SPILL_E_IO, "%s: %s", file, strerror(errno));
  }
  char *buf;
  SPILL_TRY(spill_exp_read_file(file, (size_t)1 << 31, &buf, e));
  size_t len = strlen(buf);
  size_t complete = len;
  while (complete > 0 && buf[complete - 1] != '\n') complete--;
  if (complete < len && repair) {
    if (truncate(file, (off_t)complete) < 0) {
      free(buf);
      return spill_err_set(e, SPILL_E_IO, "%s: truncating a torn last line: %s", file,
                           strerror(errno));
    }
  }
  buf[complete] = 0;
  int cap = 64, n = 0;
  char **lines = malloc((size_t)cap * sizeof *lines);
  for (char *p = buf; lines && *p;) {
    char *nl = strchr(p, '\n');
    *nl = 0;
    if (*p) {
      if (n == cap) {
        cap *= 2;
        char **nlns = realloc(lines, (size_t)cap * sizeof *lines);
        if (!nlns) break;
        lines = nlns;
      }
      lines[n++] = strdup(p);
    }
    p = nl + 1;
  }
  free(buf);
  if (!lines) return spill_err_set(e, SPILL_E_NOMEM, "%s: no memory", file);
  *lines_out = lines;
  *n_out = n;
  return SPILL_OK;
}

int spill_exp_mkdirs(const char *dir, spill_err *e) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
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


static int dup_keys(const cJSON *node, const char *path, int depth, const char *src, spill_err *e) {
  if (depth > 64) return spill_err_set(e, SPILL_E_CONFIG, "%s: %s: nested too deeply", src, path);
  int i = 0;
  for (const cJSON *c = node->child; c; c = c->next, i++) {
    char p[256];
    if (cJSON_IsObject(node)) {
      for (const cJSON *d = c->next; d; d = d->next)
        if (c->string && d->string && !strcmp(c->string, d->string))
          return spill_err_set(e, SPILL_E_CONFIG, "%s: %s%s%s: duplicate key", src, path,
                               path[0] ? "." : "", c->string);
      snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", c->string ? c->string : "?");
    } else {
      snprintf(p, sizeof p, "%s[%d]", path, i);
    }
    if (cJSON_IsObject(c) || cJSON_IsArray(c)) SPILL_TRY(dup_keys(c, p, depth + 1, src, e));
  }
  return SPILL_OK;
}

int spill_exp_json_check(const char *text, const void *root, const char *source, spill_err *e) {
  size_t n = strlen(text), bad = spill_utf8_check(text, n);
  if (bad < n)
    return spill_err_set(e, SPILL_E_CONFIG, "%s: byte %zu: invalid UTF-8", source, bad);
  return root ? dup_keys((const cJSON *)root, "", 0, source, e) : SPILL_OK;
}
