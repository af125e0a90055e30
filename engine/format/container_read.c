/* engine/format/container_read.c: opening a container directory and the
 * plain (buffered, pread-based) reads of trunk tensors and expert records.
 *
 * spill_container_open parses and validates the manifest, then checks every
 * data file's size on disk against it (a truncated or extended file is an
 * error naming the file) and every bank header page. It reads no tensor and
 * no record. The I/O layers (engine/io) open their own O_DIRECT descriptors;
 * the fds kept here serve loading, tools and tests. Reads are thread-safe
 * (pread only); open/close are not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/crc32.h"
#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

int spill_container_path(const spill_container *c, const char *name, char *buf, size_t n,
                         spill_err *e) {
  SPILL_FAIL_IF(e, !c || !c->dir || !name || !buf, SPILL_E_INVALID_ARG,
                "container path: NULL argument");
  int k = snprintf(buf, n, "%s/%s", c->dir, name);
  SPILL_FAIL_IF(e, k < 0 || (size_t)k >= n, SPILL_E_INVALID_ARG,
                "%s/%s: path longer than %zu bytes", c->dir, name, n);
  return SPILL_OK;
}

/* Opens dir/name read-only and checks its size equals the manifest's. */
static int open_sized(const spill_container *c, const char *name, uint64_t want, int *fd_out,
                      spill_err *e) {
  char path[4096];
  SPILL_TRY(spill_container_path(c, name, path, sizeof path, e));
  int fd; /* a FIFO in place of a bank is refused by kind, not waited on */
  SPILL_TRY(spill_file_open_read(path, 0, &fd, e));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return spill_err_set(e, SPILL_E_IO, "%s: stat failed: %s", path, strerror(errno));
  }
  if ((uint64_t)st.st_size != want) {
    close(fd);
    return spill_err_set(e, SPILL_E_FORMAT, "%s: %llu bytes on disk, the manifest says %llu (%s)",
                         path, (unsigned long long)st.st_size, (unsigned long long)want,
                         (uint64_t)st.st_size < want ? "truncated" : "extended");
  }
  *fd_out = fd;
  return SPILL_OK;
}

void spill_container_close(spill_container *c) {
  if (!c) return;
  if (c->bank_fd) {
    for (int i = 0; i < c->m.n_banks; i++)
      if (c->bank_fd[i] >= 0) close(c->bank_fd[i]);
    free(c->bank_fd);
  }
  if (c->trunk_fd > 0 || (c->dir && c->trunk_fd == 0)) close(c->trunk_fd);
  free(c->dir);
  spill_manifest_free(&c->m);
  memset(c, 0, sizeof *c);
  c->trunk_fd = -1;
}

static int open_impl(const char *dir, spill_container *c, spill_err *e) {
  c->dir = strdup(dir);
  SPILL_FAIL_IF(e, !c->dir, SPILL_E_NOMEM, "%s: out of memory", dir);
  char path[4096];
  SPILL_TRY(spill_container_path(c, SPILL_MANIFEST_FILE, path, sizeof path, e));
  char *json = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(path, SPILL_MANIFEST_MAX_BYTES, &json, &len, e));
  int rc = spill_manifest_parse(json, len, path, &c->m, e);
  free(json);
  SPILL_TRY(rc);
  SPILL_TRY(open_sized(c, SPILL_TRUNK_FILE, c->m.files[0].bytes, &c->trunk_fd, e));
  c->trunk_bytes = c->m.files[0].bytes;
  if (c->m.n_banks > 0) {
    c->bank_fd = malloc((size_t)c->m.n_banks * sizeof *c->bank_fd);
    SPILL_FAIL_IF(e, !c->bank_fd, SPILL_E_NOMEM, "%s: out of memory", dir);
    for (int i = 0; i < c->m.n_banks; i++) c->bank_fd[i] = -1;
  }
  uint8_t page[SPILL_BANK_HEADER_BYTES];
  for (int i = 0; i < c->m.n_banks; i++) {
    const spill_bank_info *b = &c->m.banks[i];
    SPILL_TRY(open_sized(c, b->file, c->m.files[1 + i].bytes, &c->bank_fd[i], e));
    ssize_t got = spill_fmt_pread_full(c->bank_fd[i], page, sizeof page, 0);
    SPILL_FAIL_IF(e, got < 0, SPILL_E_IO, "%s/%s: reading the bank header: %s", dir, b->file,
                  strerror(errno));
    rc = spill_bank_header_check(&c->m, b, page, (size_t)got, e);
    if (rc < 0) {
      spill_err_prefix(e, "%s", dir);
      return rc;
    }
  }
  return SPILL_OK;
}

int spill_container_open(const char *dir, spill_container *c, spill_err *e) {
  SPILL_FAIL_IF(e, !dir || !c, SPILL_E_INVALID_ARG, "container open: NULL argument");
  memset(c, 0, sizeof *c);
  c->trunk_fd = -1;
  int rc = open_impl(dir, c, e);
  if (rc < 0) spill_container_close(c);
  return rc;
}

const spill_bank_info *spill_container_bank(const spill_container *c, int layer) {
  if (!c || !spill_arch_is_moe(&c->m.arch, layer)) return NULL;
  int i = layer - c->m.arch.n_dense_layers;
  return i < c->m.n_banks ? &c->m.banks[i] : NULL;
}

int spill_container_read_tensor(const spill_container *c, const spill_tensor_info *t, void *dst,
                                size_t dst_bytes, spill_err *e) {
  SPILL_FAIL_IF(e, !c || !t || !dst, SPILL_E_INVALID_ARG, "read tensor: NULL argument");
  SPILL_FAIL_IF(e, dst_bytes < t->bytes, SPILL_E_INVALID_ARG,
                "trunk.bin: tensor %s: %llu bytes do not fit a %zu-byte buffer", t->name,
                (unsigned long long)t->bytes, dst_bytes);
  SPILL_FAIL_IF(e, t->offset > c->trunk_bytes || t->bytes > c->trunk_bytes - t->offset,
                SPILL_E_FORMAT, "trunk.bin: tensor %s: [%llu, +%llu) outside the %llu-byte file",
                t->name, (unsigned long long)t->offset, (unsigned long long)t->bytes,
                (unsigned long long)c->trunk_bytes);
  ssize_t got = spill_fmt_pread_full(c->trunk_fd, dst, (size_t)t->bytes, t->offset);
  SPILL_FAIL_IF(e, got < 0, SPILL_E_IO, "trunk.bin: tensor %s: read failed: %s", t->name,
                strerror(errno));
  SPILL_FAIL_IF(e, (uint64_t)got != t->bytes, SPILL_E_SHORT_READ,
                "trunk.bin: tensor %s: short read (%zd of %llu bytes)", t->name, got,
                (unsigned long long)t->bytes);
  uint32_t crc = spill_crc32(0, dst, (size_t)t->bytes);
  SPILL_FAIL_IF(e, crc != t->crc32, SPILL_E_CHECKSUM,
                "trunk.bin: tensor %s: checksum mismatch (stored 0x%08x, computed 0x%08x)",
                t->name, t->crc32, crc);
  return SPILL_OK;
}

int spill_container_read_record(const spill_container *c, int layer, uint32_t expert, void *rec,
                                int verify, spill_err *e) {
  SPILL_FAIL_IF(e, !c || !rec, SPILL_E_INVALID_ARG, "read record: NULL argument");
  const spill_bank_info *b = spill_container_bank(c, layer);
  SPILL_FAIL_IF(e, !b, SPILL_E_RANGE, "layer %d is not a MoE layer of this model", layer);
  SPILL_FAIL_IF(e, expert >= b->n_experts, SPILL_E_RANGE, "%s: expert %u out of range [0, %u)",
                b->file, expert, b->n_experts);
  int fd = c->bank_fd[layer - c->m.arch.n_dense_layers];
  /* Sizes were checked at open: this cannot overflow. */
  uint64_t off = b->data_offset + (uint64_t)expert * b->record_bytes;
  ssize_t got = spill_fmt_pread_full(fd, rec, (size_t)b->record_bytes, off);
  SPILL_FAIL_IF(e, got < 0, SPILL_E_IO, "%s: layer %d expert %u: read failed: %s", b->file, layer,
                expert, strerror(errno));
  SPILL_FAIL_IF(e, (uint64_t)got != b->record_bytes, SPILL_E_SHORT_READ,
                "%s: layer %d expert %u: short read (%zd of %llu bytes)", b->file, layer, expert,
                got, (unsigned long long)b->record_bytes);
  return spill_record_check(&c->m, b->file, layer, expert, rec, (size_t)b->record_bytes, verify,
                            e);
}
