/* engine/format/container_verify.c: the full offline audit of a container
 * (`spill verify`).
 *
 * Opens the container (manifest, file sizes, bank headers), then reads every
 * byte of every data file once, sequentially, in chunks of at most
 * CHUNK_BYTES (whole records for banks): each trunk tensor's crc32, the
 * zero padding between and after tensors, each record's header and payload
 * crc (spill_record_check with verify), the zero padding inside and after
 * records, and each file's crc32, which is assembled from the piece crcs
 * with spill_fmt_crc32_combine so no byte is hashed twice. Stops at the
 * first defect, whose message names the file, and for records the layer and
 * expert. Pages read are dropped from the cache afterwards (an audit of a
 * 500 GB container must not evict the machine's working set).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/crc32.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

#define CHUNK_BYTES (8u << 20)

typedef struct vctx {
  spill_progress_fn progress;
  void *ctx;
  uint64_t done, total;
  uint8_t *buf;
  size_t buf_bytes;
} vctx;

static void advance(vctx *v, uint64_t n) {
  v->done += n;
  if (v->progress) v->progress(v->ctx, v->done, v->total);
}

static int read_exact(int fd, const char *file, void *buf, size_t n, uint64_t off, spill_err *e) {
  ssize_t got = spill_fmt_pread_full(fd, buf, n, off);
  SPILL_FAIL_IF(e, got < 0, SPILL_E_IO, "%s: read at byte %llu failed: %s", file,
                (unsigned long long)off, strerror(errno));
  SPILL_FAIL_IF(e, (size_t)got != n, SPILL_E_SHORT_READ,
                "%s: short read at byte %llu (%zd of %zu bytes; file changed during the audit?)",
                file, (unsigned long long)off, got, n);
  return SPILL_OK;
}

/* crc32 of [off, off + n) of a file, read in chunks; with zero != 0 the bytes
 * must also be zero (padding). */
static int crc_range(vctx *v, int fd, const char *file, uint64_t off, uint64_t n, int zero,
                     uint32_t *crc, spill_err *e) {
  uint32_t c = 0;
  while (n) {
    size_t k = n < v->buf_bytes ? (size_t)n : v->buf_bytes;
    SPILL_TRY(read_exact(fd, file, v->buf, k, off, e));
    SPILL_FAIL_IF(e, zero && !spill_fmt_all_zero(v->buf, k), SPILL_E_FORMAT,
                  "%s: padding at bytes [%llu, %llu) is not zero", file, (unsigned long long)off,
                  (unsigned long long)(off + k));
    c = spill_crc32(c, v->buf, k);
    off += k;
    n -= k;
    advance(v, k);
  }
  *crc = c;
  return SPILL_OK;
}

static int cmp_offset(const void *a, const void *b) {
  const spill_tensor_info *x = *(const spill_tensor_info *const *)a;
  const spill_tensor_info *y = *(const spill_tensor_info *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int verify_trunk(vctx *v, const spill_container *c, spill_err *e) {
  const spill_manifest *m = &c->m;
  const char *file = SPILL_TRUNK_FILE;
  const spill_tensor_info **t = NULL;
  uint32_t crc = 0, piece;
  uint64_t pos = 0;
  int rc = SPILL_OK;
  if (m->n_tensors > 0) {
    t = malloc((size_t)m->n_tensors * sizeof *t);
    SPILL_FAIL_IF(e, !t, SPILL_E_NOMEM, "verify: out of memory");
    for (int i = 0; i < m->n_tensors; i++) t[i] = &m->tensors[i];
    qsort(t, (size_t)m->n_tensors, sizeof *t, cmp_offset);
  }
  for (int i = 0; i < m->n_tensors && rc == SPILL_OK; i++) {
    rc = crc_range(v, c->trunk_fd, file, pos, t[i]->offset - pos, 1, &piece, e);
    if (rc < 0) break;
    crc = spill_fmt_crc32_combine(crc, piece, t[i]->offset - pos);
    rc = crc_range(v, c->trunk_fd, file, t[i]->offset, t[i]->bytes, 0, &piece, e);
    if (rc < 0) break;
    if (piece != t[i]->crc32) {
      rc = spill_err_set(e, SPILL_E_CHECKSUM,
                         "%s: tensor %s: checksum mismatch (stored 0x%08x, computed 0x%08x)", file,
                         t[i]->name, t[i]->crc32, piece);
      break;
    }
    crc = spill_fmt_crc32_combine(crc, piece, t[i]->bytes);
    pos = t[i]->offset + t[i]->bytes;
  }
  free(t);
  SPILL_TRY(rc);
  SPILL_TRY(crc_range(v, c->trunk_fd, file, pos, c->trunk_bytes - pos, 1, &piece, e));
  crc = spill_fmt_crc32_combine(crc, piece, c->trunk_bytes - pos);
  SPILL_FAIL_IF(e, crc != m->files[0].crc32, SPILL_E_CHECKSUM,
                "%s: file checksum mismatch (manifest 0x%08x, computed 0x%08x)", file,
                m->files[0].crc32, crc);
  (void)posix_fadvise(c->trunk_fd, 0, 0, POSIX_FADV_DONTNEED);
  return SPILL_OK;
}

/* Zero gaps between sections and after down inside one record. */
static int check_record_padding(const spill_manifest *m, const spill_bank_info *b, uint32_t expert,
                                const uint8_t *rec, spill_err *e) {
  uint32_t pos = SPILL_RECORD_HEADER_BYTES;
  for (int s = 0; s < SPILL_SEC_COUNT; s++) {
    SPILL_FAIL_IF(e, !spill_fmt_all_zero(rec + pos, m->sect[s].offset - pos), SPILL_E_FORMAT,
                  "%s: layer %d expert %u: padding before section %d is not zero", b->file,
                  b->layer, expert, s);
    pos = m->sect[s].offset + m->sect[s].bytes;
  }
  SPILL_FAIL_IF(e, !spill_fmt_all_zero(rec + pos, (size_t)(b->record_bytes - pos)), SPILL_E_FORMAT,
                "%s: layer %d expert %u: padding after the payload is not zero", b->file,
                b->layer, expert);
  return SPILL_OK;
}

static int verify_bank(vctx *v, const spill_container *c, int bi, spill_err *e) {
  const spill_manifest *m = &c->m;
  const spill_bank_info *b = &m->banks[bi];
  int fd = c->bank_fd[bi];
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  SPILL_TRY(read_exact(fd, b->file, v->buf, SPILL_BANK_HEADER_BYTES, 0, e));
  SPILL_TRY(spill_bank_header_check(m, b, v->buf, SPILL_BANK_HEADER_BYTES, e));
  uint32_t crc = spill_crc32(0, v->buf, SPILL_BANK_HEADER_BYTES);
  advance(v, SPILL_BANK_HEADER_BYTES);
  uint64_t per = v->buf_bytes / b->record_bytes; /* >= 1: buf holds a record */
  uint32_t tail = (uint32_t)(b->record_bytes - SPILL_RECORD_HEADER_BYTES - m->payload_bytes);
  for (uint32_t x = 0; x < b->n_experts;) {
    uint32_t k = (uint32_t)(b->n_experts - x < per ? b->n_experts - x : per);
    uint64_t off = b->data_offset + (uint64_t)x * b->record_bytes;
    SPILL_TRY(read_exact(fd, b->file, v->buf, (size_t)(k * b->record_bytes), off, e));
    for (uint32_t j = 0; j < k; j++) {
      const uint8_t *rec = v->buf + j * b->record_bytes;
      SPILL_TRY(spill_record_check(m, b->file, b->layer, x + j, rec, (size_t)b->record_bytes, 1,
                                   e));
      SPILL_TRY(check_record_padding(m, b, x + j, rec, e));
      spill_record_header h;
      spill_record_header_decode(rec, &h);
      crc = spill_crc32(crc, rec, SPILL_RECORD_HEADER_BYTES);
      crc = spill_fmt_crc32_combine(crc, h.payload_crc32, m->payload_bytes);
      crc = spill_crc32(crc, rec + SPILL_RECORD_HEADER_BYTES + m->payload_bytes, tail);
    }
    x += k;
    advance(v, k * b->record_bytes);
  }
  SPILL_FAIL_IF(e, crc != m->files[1 + bi].crc32, SPILL_E_CHECKSUM,
                "%s: file checksum mismatch (manifest 0x%08x, computed 0x%08x)", b->file,
                m->files[1 + bi].crc32, crc);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  return SPILL_OK;
}

int spill_container_verify(const char *dir, spill_progress_fn progress, void *ctx,
                           spill_err *e) {
  spill_container c;
  SPILL_TRY(spill_container_open(dir, &c, e));
  vctx v = {progress, ctx, 0, 0, NULL, 0};
  for (int i = 0; i < c.m.n_files; i++) v.total += c.m.files[i].bytes;
  v.buf_bytes = CHUNK_BYTES;
  if (c.m.record_bytes > v.buf_bytes) v.buf_bytes = (size_t)c.m.record_bytes;
  v.buf = spill_alloc_nozero(v.buf_bytes, SPILL_PAGE);
  int rc = v.buf ? SPILL_OK
                 : spill_err_set(e, SPILL_E_NOMEM, "verify: cannot allocate %zu bytes",
                                 v.buf_bytes);
  if (rc == SPILL_OK) {
    if (v.progress) v.progress(v.ctx, 0, v.total);
    rc = verify_trunk(&v, &c, e);
  }
  for (int i = 0; i < c.m.n_banks && rc == SPILL_OK; i++) rc = verify_bank(&v, &c, i, e);
  if (rc < 0) spill_err_prefix(e, "%s", dir);
  spill_free(v.buf, v.buf_bytes);
  spill_container_close(&c);
  return rc;
}
