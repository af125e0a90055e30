/* engine/format/container_write.c: the streaming container writer.
 *
 * Data path: spill_writer_open computes the whole layout (tensor offsets,
 * record layout, bank and file sizes), validates it by a JSON round trip
 * through spill_manifest_parse (so the writer can never produce a container
 * its readers reject), creates the files and writes the bank header pages.
 * Tensors are then written with one pwrite each at their offset; a record
 * is one pwritev of header, sections, zero gaps and zero tail at its final
 * offset. No data is held beyond the caller's buffer and nothing is read
 * back: the record crc is computed from the caller's payload, and the file
 * crc32s are assembled from per-piece crcs with spill_fmt_crc32_combine.
 *
 * Throughput: writes go through the page cache in large units (a record or
 * a tensor per syscall), with no per-record fsync. Banks use write-behind:
 * every WB_WINDOW bytes the window is handed to writeback (sync_file_range)
 * and the window before it is waited for and dropped from the cache, so a
 * multi-GB container streams at the disk's speed without filling RAM with
 * dirty pages. Each file is fsynced once in spill_writer_finish, before
 * manifest.json is written atomically, so a crash never leaves a manifest
 * that points at incomplete data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/crc32.h"
#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

#define WB_WINDOW (32ull << 20)

typedef struct wbank {
  int fd;
  uint32_t next;     /* next expert to write */
  uint32_t crc;      /* running crc32 of the file so far */
  uint64_t pos;      /* bytes written so far (= next record's offset) */
  uint64_t kicked;   /* [waited, kicked) is under writeback */
  uint64_t waited;   /* [0, waited) is on disk and dropped from the cache */
} wbank;

struct spill_writer {
  int resume; /* opened by spill_writer_open_resume: files kept, not truncated */
  char *dir;
  spill_manifest m; /* final layout; file crcs filled at finish */
  int trunk_fd;
  uint8_t *tensor_done;
  wbank *bank;
};

static const uint8_t kZeroPage[SPILL_PAGE];

static int path_of(const spill_writer *w, const char *name, char *buf, size_t n, spill_err *e) {
  int k = snprintf(buf, n, "%s/%s", w->dir, name);
  SPILL_FAIL_IF(e, k < 0 || (size_t)k >= n, SPILL_E_INVALID_ARG, "%s/%s: path too long", w->dir,
                name);
  return SPILL_OK;
}

static void writer_free(spill_writer *w, int unlink_files) {
  if (!w) return;
  char path[4096];
  if (w->trunk_fd >= 0) close(w->trunk_fd);
  if (unlink_files && w->dir && path_of(w, SPILL_TRUNK_FILE, path, sizeof path, NULL) == 0)
    unlink(path);
  for (int i = 0; w->bank && i < w->m.n_banks; i++) {
    if (w->bank[i].fd >= 0) close(w->bank[i].fd);
    if (unlink_files && path_of(w, w->m.banks[i].file, path, sizeof path, NULL) == 0) unlink(path);
  }
  free(w->bank);
  free(w->tensor_done);
  spill_manifest_free(&w->m);
  free(w->dir);
  free(w);
}

void spill_writer_abort(spill_writer *w) { writer_free(w, 1); }

void spill_writer_close_keep(spill_writer *w) { writer_free(w, 0); }

/* Builds the complete manifest (offsets, layout, banks, files) from the
 * caller's description. */
static int build_layout(spill_writer *w, const spill_manifest *src, spill_err *e) {
  spill_manifest *m = &w->m;
  m->version = SPILL_FORMAT_WRITE;
  memcpy(m->name, src->name, sizeof m->name);
  m->name[sizeof m->name - 1] = 0;
  m->arch = src->arch;
  m->arch.family[sizeof m->arch.family - 1] = 0;
  if (src->generator_json) {
    m->generator_json = strdup(src->generator_json);
    SPILL_FAIL_IF(e, !m->generator_json, SPILL_E_NOMEM, "writer: out of memory");
  }
  SPILL_FAIL_IF(e, src->n_tensors < 0 || (src->n_tensors > 0 && !src->tensors),
                SPILL_E_INVALID_ARG, "writer: bad tensor list");
  m->n_tensors = src->n_tensors;
  uint64_t pos = 0;
  if (m->n_tensors > 0) {
    m->tensors = calloc((size_t)m->n_tensors, sizeof *m->tensors);
    SPILL_FAIL_IF(e, !m->tensors, SPILL_E_NOMEM, "writer: out of memory");
  }
  for (int i = 0; i < m->n_tensors; i++) {
    spill_tensor_info *t = &m->tensors[i];
    *t = src->tensors[i];
    t->name[sizeof t->name - 1] = 0;
    SPILL_FAIL_IF(e, t->ndim != 1 && t->ndim != 2, SPILL_E_INVALID_ARG,
                  "writer: tensor %s: ndim %d", t->name, t->ndim);
    if (t->ndim == 1) t->shape[1] = 1;
    int rc = spill_dtype_matrix_bytes(t->dtype, t->ndim == 1 ? 1 : t->shape[0],
                                      t->ndim == 1 ? t->shape[0] : t->shape[1], t->group,
                                      &t->bytes, e);
    if (rc < 0) {
      spill_err_prefix(e, "writer: tensor %s", t->name);
      return rc;
    }
    if (t->dtype != SPILL_DT_Q8 && t->dtype != SPILL_DT_Q4) t->group = 0;
    SPILL_FAIL_IF(e, !spill_round_up_u64(pos, SPILL_TENSOR_ALIGN, &t->offset) ||
                         !spill_add_u64(t->offset, t->bytes, &pos),
                  SPILL_E_FORMAT, "writer: trunk size overflows at tensor %s", t->name);
    t->crc32 = 0;
  }
  uint64_t trunk_bytes;
  SPILL_FAIL_IF(e, !spill_round_up_u64(pos, SPILL_PAGE, &trunk_bytes), SPILL_E_FORMAT,
                "writer: trunk size overflows");
  int n_moe = spill_arch_n_moe(&m->arch);
  SPILL_FAIL_IF(e, m->arch.n_layers < 1 || m->arch.n_layers > SPILL_MAX_LAYERS ||
                       m->arch.n_dense_layers < 0,
                SPILL_E_INVALID_ARG, "writer: n_layers %d / n_dense_layers %d out of range",
                m->arch.n_layers, m->arch.n_dense_layers);
  if (n_moe > 0) {
    m->expert_dtype = src->expert_dtype;
    m->expert_group =
        (src->expert_dtype == SPILL_DT_Q8 || src->expert_dtype == SPILL_DT_Q4) ? src->expert_group : 0;
    SPILL_FAIL_IF(e, m->arch.moe.n_experts < 1 || m->arch.moe.n_experts > SPILL_MAX_EXPERTS,
                  SPILL_E_INVALID_ARG, "writer: n_experts %d out of range", m->arch.moe.n_experts);
    SPILL_FAIL_IF(e, src->sect_mixed && (src->n_banks != n_moe || !src->banks),
                  SPILL_E_INVALID_ARG, "writer: mixed section dtypes need %d banks, got %d",
                  n_moe, src->n_banks);
    m->banks = calloc((size_t)n_moe, sizeof *m->banks);
    SPILL_FAIL_IF(e, !m->banks, SPILL_E_NOMEM, "writer: out of memory");
    m->n_banks = n_moe;
    for (int i = 0; i < n_moe; i++)
      for (int s = 0; s < SPILL_SEC_COUNT; s++) {
        spill_dtype dt = src->sect_mixed ? src->banks[i].sect_dtype[s] : m->expert_dtype;
        m->banks[i].sect_dtype[s] = dt;
        if (dt != m->expert_dtype) m->sect_mixed = 1;
      }
    if (m->sect_mixed) {
      m->version = SPILL_FORMAT_MIXED;
      SPILL_TRY(spill_manifest_mixed_layout(m, m->sect, &m->payload_bytes, &m->record_bytes, e));
    } else {
      SPILL_TRY(spill_record_layout(&m->arch, m->expert_dtype, m->expert_group, m->sect,
                                    &m->payload_bytes, &m->record_bytes, e));
    }
    for (int i = 0; i < n_moe; i++) {
      spill_bank_info *b = &m->banks[i];
      b->layer = m->arch.n_dense_layers + i;
      spill_fmt_bank_name(b->layer, b->file);
      b->n_experts = (uint32_t)m->arch.moe.n_experts;
      b->record_bytes = m->record_bytes;
      b->data_offset = SPILL_BANK_HEADER_BYTES;
    }
  }
  m->files = calloc((size_t)(1 + n_moe), sizeof *m->files);
  SPILL_FAIL_IF(e, !m->files, SPILL_E_NOMEM, "writer: out of memory");
  m->n_files = 1 + n_moe;
  snprintf(m->files[0].name, sizeof m->files[0].name, "%s", SPILL_TRUNK_FILE);
  m->files[0].bytes = trunk_bytes;
  for (int i = 0; i < n_moe; i++) {
    spill_file_info *f = &m->files[1 + i];
    memcpy(f->name, m->banks[i].file, sizeof f->name);
    SPILL_FAIL_IF(e, !spill_mul_u64(m->banks[i].n_experts, m->record_bytes, &f->bytes) ||
                         !spill_add_u64(f->bytes, SPILL_BANK_HEADER_BYTES, &f->bytes),
                  SPILL_E_FORMAT, "writer: bank size overflows");
  }
  return SPILL_OK;
}

/* The container identity (docs/FORMAT.md, container_id): the caller's, or
 * FNV-1a-64 of the layout manifest (name, generator, arch, tensor table,
 * written with id 0), so equal inputs give equal containers. */
static int assign_id(spill_manifest *m, uint64_t given, spill_err *e) {
  if (given) {
    m->container_id = given;
    return SPILL_OK;
  }
  char *json = NULL;
  m->container_id = 0;
  SPILL_TRY(spill_manifest_to_json(m, &json, e));
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *p = json; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  free(json);
  m->container_id = h ? h : 1;
  return SPILL_OK;
}

/* Round trip through the reader's validation. */
static int self_check(const spill_manifest *m, char **json_out, spill_err *e) {
  char *json = NULL;
  SPILL_TRY(spill_manifest_to_json(m, &json, e));
  spill_manifest back;
  int rc = spill_manifest_parse(json, strlen(json), "writer manifest", &back, e);
  spill_manifest_free(&back);
  if (rc < 0 || !json_out)
    free(json);
  else
    *json_out = json;
  return rc;
}

static int create_file(spill_writer *w, const char *name, int *fd, spill_err *e) {
  char path[4096];
  SPILL_TRY(path_of(w, name, path, sizeof path, e));
  /* never through a symlink, only into a regular file (docs/RELIABILITY.md) */
  return spill_file_open_write(path, (w->resume ? O_RDWR : O_WRONLY | O_TRUNC) | O_CREAT, 0644, fd, e);
}

static int open_impl(spill_writer *w, const char *dir, const spill_manifest *src, spill_err *e) {
  char path[4096];
  w->dir = strdup(dir);
  SPILL_FAIL_IF(e, !w->dir, SPILL_E_NOMEM, "writer: out of memory");
  SPILL_TRY(build_layout(w, src, e));
  SPILL_TRY(assign_id(&w->m, src->container_id, e));
  SPILL_TRY(self_check(&w->m, NULL, e));
  SPILL_FAIL_IF(e, mkdir(dir, 0755) != 0 && errno != EEXIST, SPILL_E_IO, "%s: cannot create: %s",
                dir, strerror(errno));
  /* An old manifest must not describe the files we are about to replace. */
  SPILL_TRY(path_of(w, SPILL_MANIFEST_FILE, path, sizeof path, e));
  SPILL_FAIL_IF(e, unlink(path) != 0 && errno != ENOENT, SPILL_E_IO, "%s: cannot remove: %s",
                path, strerror(errno));
  if (w->m.n_tensors > 0) {
    w->tensor_done = calloc((size_t)w->m.n_tensors, 1);
    SPILL_FAIL_IF(e, !w->tensor_done, SPILL_E_NOMEM, "writer: out of memory");
  }
  if (w->m.n_banks > 0) {
    w->bank = calloc((size_t)w->m.n_banks, sizeof *w->bank);
    SPILL_FAIL_IF(e, !w->bank, SPILL_E_NOMEM, "writer: out of memory");
    for (int i = 0; i < w->m.n_banks; i++) w->bank[i].fd = -1;
  }
  SPILL_TRY(create_file(w, SPILL_TRUNK_FILE, &w->trunk_fd, e));
  SPILL_FAIL_IF(e, ftruncate(w->trunk_fd, (off_t)w->m.files[0].bytes) != 0, SPILL_E_IO,
                "%s/trunk.bin: cannot set size: %s", dir, strerror(errno));
  uint8_t page[SPILL_BANK_HEADER_BYTES];
  for (int i = 0; i < w->m.n_banks; i++) {
    const spill_bank_info *b = &w->m.banks[i];
    wbank *k = &w->bank[i];
    SPILL_TRY(create_file(w, b->file, &k->fd, e));
    spill_bank_header h = {(uint32_t)w->m.version, (uint32_t)b->layer, b->n_experts,
                           (uint32_t)w->m.expert_dtype, b->record_bytes, b->data_offset,
                           w->m.container_id, {0, 0, 0}};
    for (int s = 0; w->m.version >= SPILL_FORMAT_MIXED && s < SPILL_SEC_COUNT; s++)
      h.sect_dtype[s] = (uint8_t)b->sect_dtype[s];
    spill_bank_header_encode(&h, page);
    SPILL_FAIL_IF(e, spill_fmt_pwrite_full(k->fd, page, sizeof page, 0) != 0, SPILL_E_IO,
                  "%s/%s: write failed: %s", dir, b->file, strerror(errno));
    k->crc = spill_crc32(0, page, sizeof page);
    k->pos = sizeof page;
  }
  return SPILL_OK;
}

static int open_mode(const char *dir, const spill_manifest *m, spill_writer **out, int resume,
                     spill_err *e) {
  SPILL_FAIL_IF(e, !dir || !m || !out, SPILL_E_INVALID_ARG, "writer open: NULL argument");
  *out = NULL;
  spill_writer *w = calloc(1, sizeof *w);
  SPILL_FAIL_IF(e, !w, SPILL_E_NOMEM, "writer: out of memory");
  w->trunk_fd = -1;
  w->resume = resume;
  int rc = open_impl(w, dir, m, e);
  if (rc < 0) {
    writer_free(w, w->trunk_fd >= 0 && !resume);
    return rc;
  }
  *out = w;
  return SPILL_OK;
}

int spill_writer_open(const char *dir, const spill_manifest *m, spill_writer **out,
                      spill_err *e) {
  return open_mode(dir, m, out, 0, e);
}

int spill_writer_open_resume(const char *dir, const spill_manifest *m, spill_writer **out,
                             spill_err *e) {
  return open_mode(dir, m, out, 1, e);
}

/* pread exactly n bytes (0 on success). */
static int pread_full(int fd, void *buf, size_t n, uint64_t off) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int spill_writer_adopt_tensor(spill_writer *w, const char *name, uint32_t crc32, void *buf,
                              size_t buf_bytes, spill_err *e) {
  SPILL_FAIL_IF(e, !w || !name || !w->resume, SPILL_E_INVALID_ARG,
                "writer adopt: not a resumed writer");
  int i = 0;
  while (i < w->m.n_tensors && strcmp(w->m.tensors[i].name, name) != 0) i++;
  SPILL_FAIL_IF(e, i == w->m.n_tensors, SPILL_E_INVALID_ARG,
                "writer: tensor %s is not in the manifest", name);
  spill_tensor_info *t = &w->m.tensors[i];
  SPILL_FAIL_IF(e, w->tensor_done[i], SPILL_E_INVALID_ARG, "writer: tensor %s written twice", name);
  SPILL_FAIL_IF(e, buf_bytes < t->bytes, SPILL_E_INVALID_ARG, "writer adopt: buffer too small");
  SPILL_FAIL_IF(e, pread_full(w->trunk_fd, buf, (size_t)t->bytes, t->offset) != 0, SPILL_E_CHECKSUM,
                "%s/trunk.bin: tensor %s is not on disk", w->dir, name);
  uint32_t got = spill_crc32(0, buf, (size_t)t->bytes);
  SPILL_FAIL_IF(e, got != crc32, SPILL_E_CHECKSUM,
                "%s/trunk.bin: tensor %s on disk has crc32 %08x, journal says %08x", w->dir, name,
                got, crc32);
  t->crc32 = got;
  w->tensor_done[i] = 1;
  return SPILL_OK;
}

int spill_writer_adopt_record(spill_writer *w, int layer, uint32_t expert, void *buf,
                              spill_err *e) {
  SPILL_FAIL_IF(e, !w || !buf || !w->resume, SPILL_E_INVALID_ARG,
                "writer adopt: not a resumed writer");
  const spill_manifest *m = &w->m;
  SPILL_FAIL_IF(e, !spill_arch_is_moe(&m->arch, layer), SPILL_E_RANGE,
                "writer: layer %d is not a MoE layer", layer);
  int bi = layer - m->arch.n_dense_layers;
  wbank *k = &w->bank[bi];
  const spill_bank_info *b = &m->banks[bi];
  SPILL_FAIL_IF(e, expert != k->next, SPILL_E_INVALID_ARG,
                "writer: layer %d: expert %u adopted out of order (expected %u)", layer, expert,
                k->next);
  uint64_t off = b->data_offset + (uint64_t)expert * b->record_bytes;
  SPILL_FAIL_IF(e, pread_full(k->fd, buf, (size_t)b->record_bytes, off) != 0, SPILL_E_CHECKSUM,
                "%s/%s: layer %d expert %u is not on disk", w->dir, b->file, layer, expert);
  /* header, ids, layout and payload crc; plus zero gaps and tail */
  SPILL_TRY(spill_record_check(m, b->file, layer, expert, buf, (size_t)b->record_bytes, 1, e));
  const uint8_t *r = buf;
  uint32_t pos = SPILL_RECORD_HEADER_BYTES;
  for (int s = 0; s <= SPILL_SEC_COUNT; s++) {
    uint64_t end = s < SPILL_SEC_COUNT ? m->sect[s].offset : b->record_bytes;
    for (uint64_t i = pos; i < end; i++)
      SPILL_FAIL_IF(e, r[i] != 0, SPILL_E_CHECKSUM, "%s/%s: layer %d expert %u: non-zero padding",
                    w->dir, b->file, layer, expert);
    if (s < SPILL_SEC_COUNT) pos = m->sect[s].offset + m->sect[s].bytes;
  }
  k->crc = spill_crc32(k->crc, buf, (size_t)b->record_bytes);
  k->pos = off + b->record_bytes;
  k->next++;
  return SPILL_OK;
}

const spill_manifest *spill_writer_manifest(const spill_writer *w) { return w ? &w->m : NULL; }

int spill_writer_tensor(spill_writer *w, const char *name, const void *data, size_t bytes,
                        spill_err *e) {
  SPILL_FAIL_IF(e, !w || !name || (!data && bytes), SPILL_E_INVALID_ARG,
                "writer tensor: NULL argument");
  int i = 0;
  while (i < w->m.n_tensors && strcmp(w->m.tensors[i].name, name) != 0) i++;
  SPILL_FAIL_IF(e, i == w->m.n_tensors, SPILL_E_INVALID_ARG,
                "writer: tensor %s is not in the manifest", name);
  spill_tensor_info *t = &w->m.tensors[i];
  SPILL_FAIL_IF(e, w->tensor_done[i], SPILL_E_INVALID_ARG, "writer: tensor %s written twice",
                name);
  SPILL_FAIL_IF(e, bytes != t->bytes, SPILL_E_INVALID_ARG,
                "writer: tensor %s: %zu bytes given, its %s shape takes %llu", name, bytes,
                spill_dtype_name(t->dtype), (unsigned long long)t->bytes);
  SPILL_FAIL_IF(e, spill_fmt_pwrite_full(w->trunk_fd, data, bytes, t->offset) != 0, SPILL_E_IO,
                "%s/trunk.bin: writing tensor %s: %s", w->dir, name, strerror(errno));
  t->crc32 = spill_crc32(0, data, bytes);
  w->tensor_done[i] = 1;
  return SPILL_OK;
}

/* pwritev until every iovec is written (short writes are legal). */
static int pwritev_full(int fd, struct iovec *iov, int cnt, uint64_t off) {
  while (cnt > 0) {
    ssize_t n = pwritev(fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return -1;
    }
    off += (uint64_t)n;
    while (cnt > 0 && (size_t)n >= iov->iov_len) {
      n -= (ssize_t)iov->iov_len;
      iov++;
      cnt--;
    }
    if (cnt > 0) {
      iov->iov_base = (char *)iov->iov_base + n;
      iov->iov_len -= (size_t)n;
    }
  }
  return 0;
}

/* Write-behind (see the file comment). Advisory: errors surface at fsync. */
static void write_behind(wbank *k) {
  if (k->pos - k->kicked < WB_WINDOW) return;
  (void)sync_file_range(k->fd, (off_t)k->kicked, (off_t)(k->pos - k->kicked),
                        SYNC_FILE_RANGE_WRITE);
  if (k->kicked > k->waited) {
    (void)sync_file_range(k->fd, (off_t)k->waited, (off_t)(k->kicked - k->waited),
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER);
    (void)posix_fadvise(k->fd, (off_t)k->waited, (off_t)(k->kicked - k->waited),
                        POSIX_FADV_DONTNEED);
    k->waited = k->kicked;
  }
  k->kicked = k->pos;
}

int spill_writer_record(spill_writer *w, int layer, uint32_t expert, const void *payload,
                        spill_err *e) {
  SPILL_FAIL_IF(e, !w || !payload, SPILL_E_INVALID_ARG, "writer record: NULL argument");
  const spill_manifest *m = &w->m;
  SPILL_FAIL_IF(e, !spill_arch_is_moe(&m->arch, layer), SPILL_E_RANGE,
                "writer: layer %d is not a MoE layer", layer);
  int bi = layer - m->arch.n_dense_layers;
  wbank *k = &w->bank[bi];
  const spill_bank_info *b = &m->banks[bi];
  SPILL_FAIL_IF(e, expert >= b->n_experts, SPILL_E_RANGE,
                "writer: layer %d expert %u out of range [0, %u)", layer, expert, b->n_experts);
  SPILL_FAIL_IF(e, expert != k->next, SPILL_E_INVALID_ARG,
                "writer: layer %d: expert %u written out of order (expected %u)", layer, expert,
                k->next);

  /* Section bytes come from the caller; gaps and tail are zeros we supply.
   * A section smaller than its slot (v3: this bank's dtype is smaller than
   * the largest one) must come with zeros after its own bytes. */
  const uint8_t *pl = payload;
  for (int s = 0; m->sect_mixed && s < SPILL_SEC_COUNT; s++) {
    const uint32_t used = spill_manifest_sect_bytes(m, layer, s);
    const uint8_t *sp = pl + (m->sect[s].offset - SPILL_RECORD_HEADER_BYTES);
    SPILL_FAIL_IF(e, !spill_fmt_all_zero(sp + used, m->sect[s].bytes - used),
                  SPILL_E_INVALID_ARG,
                  "writer: layer %d expert %u: section %d has non-zero bytes after its %u "
                  "bytes of %s", layer, expert, s, used,
                  spill_dtype_name(spill_manifest_sect_dtype(m, layer, s)));
  }
  for (int s = 0; s < SPILL_SEC_COUNT; s++) { /* values no reader accepts (mxfp4 e = 255) */
    const spill_section_info *si = &m->sect[s];
    int rc = spill_dtype_check_values(spill_manifest_sect_dtype(m, layer, s),
                                      pl + (si->offset - SPILL_RECORD_HEADER_BYTES), si->rows,
                                      si->cols, e);
    if (rc < 0) {
      spill_err_prefix(e, "writer: layer %d expert %u: section %d", layer, expert, s);
      return rc;
    }
  }
  struct iovec iov[2 + 2 * SPILL_SEC_COUNT];
  uint8_t hdr[SPILL_RECORD_HEADER_BYTES];
  int n = 0;
  uint32_t pcrc = 0, pos = SPILL_RECORD_HEADER_BYTES;
  iov[n++] = (struct iovec){hdr, sizeof hdr};
  for (int s = 0; s < SPILL_SEC_COUNT; s++) {
    uint32_t gap = m->sect[s].offset - pos;
    if (gap) {
      iov[n++] = (struct iovec){(void *)kZeroPage, gap};
      pcrc = spill_crc32(pcrc, kZeroPage, gap);
    }
    const uint8_t *sp = pl + (m->sect[s].offset - SPILL_RECORD_HEADER_BYTES);
    iov[n++] = (struct iovec){(void *)sp, m->sect[s].bytes};
    pcrc = spill_crc32(pcrc, sp, m->sect[s].bytes);
    pos = m->sect[s].offset + m->sect[s].bytes;
  }
  uint64_t tail = m->record_bytes - pos; /* < SPILL_PAGE by construction */
  if (tail) iov[n++] = (struct iovec){(void *)kZeroPage, (size_t)tail};

  spill_record_header h = {0};
  h.magic = SPILL_RECORD_MAGIC;
  h.version = (uint16_t)m->version;
  for (int s = 0; m->version >= SPILL_FORMAT_MIXED && s < SPILL_SEC_COUNT; s++)
    h.sect_dtype[s] = (uint8_t)spill_manifest_sect_dtype(m, layer, s);
  h.dtype = (uint16_t)m->expert_dtype;
  h.layer = (uint32_t)layer;
  h.expert = expert;
  h.payload_offset = SPILL_RECORD_HEADER_BYTES;
  h.payload_bytes = m->payload_bytes;
  h.payload_crc32 = pcrc;
  for (int s = 0; s < SPILL_SEC_COUNT; s++) h.sect_offset[s] = m->sect[s].offset;
  h.n_sections = SPILL_SEC_COUNT;
  h.container_id = m->container_id;
  spill_record_header_encode(&h, hdr);

  uint64_t off = b->data_offset + (uint64_t)expert * b->record_bytes;
  SPILL_FAIL_IF(e, pwritev_full(k->fd, iov, n, off) != 0, SPILL_E_IO,
                "%s/%s: layer %d expert %u: write failed: %s", w->dir, b->file, layer, expert,
                strerror(errno));
  k->crc = spill_crc32(k->crc, hdr, sizeof hdr);
  k->crc = spill_fmt_crc32_combine(k->crc, pcrc, m->payload_bytes);
  k->crc = spill_fmt_crc32_zeros(k->crc, tail);
  k->pos = off + b->record_bytes;
  k->next++;
  write_behind(k);
  return SPILL_OK;
}

static int cmp_tensor_offset(const void *a, const void *b) {
  const spill_tensor_info *x = *(const spill_tensor_info *const *)a;
  const spill_tensor_info *y = *(const spill_tensor_info *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The trunk's file crc from the tensor crcs and the zero gaps between them. */
static int trunk_crc(const spill_manifest *m, uint32_t *out, spill_err *e) {
  uint32_t crc = 0;
  uint64_t pos = 0;
  if (m->n_tensors > 0) {
    const spill_tensor_info **v = malloc((size_t)m->n_tensors * sizeof *v);
    SPILL_FAIL_IF(e, !v, SPILL_E_NOMEM, "writer: out of memory");
    for (int i = 0; i < m->n_tensors; i++) v[i] = &m->tensors[i];
    qsort(v, (size_t)m->n_tensors, sizeof *v, cmp_tensor_offset);
    for (int i = 0; i < m->n_tensors; i++) {
      crc = spill_fmt_crc32_zeros(crc, v[i]->offset - pos);
      crc = spill_fmt_crc32_combine(crc, v[i]->crc32, v[i]->bytes);
      pos = v[i]->offset + v[i]->bytes;
    }
    free(v);
  }
  *out = spill_fmt_crc32_zeros(crc, m->files[0].bytes - pos);
  return SPILL_OK;
}

static int finish_impl(spill_writer *w, spill_err *e) {
  spill_manifest *m = &w->m;
  char path[4096];
  for (int i = 0; i < m->n_tensors; i++)
    SPILL_FAIL_IF(e, !w->tensor_done[i], SPILL_E_INVALID_ARG,
                  "writer: tensor %s was never written", m->tensors[i].name);
  for (int i = 0; i < m->n_banks; i++)
    SPILL_FAIL_IF(e, w->bank[i].next != m->banks[i].n_experts, SPILL_E_INVALID_ARG,
                  "writer: layer %d: %u of %u records written", m->banks[i].layer,
                  w->bank[i].next, m->banks[i].n_experts);
  SPILL_TRY(trunk_crc(m, &m->files[0].crc32, e));
  SPILL_FAIL_IF(e, fsync(w->trunk_fd) != 0, SPILL_E_IO, "%s/trunk.bin: fsync failed: %s", w->dir,
                strerror(errno));
  for (int i = 0; i < m->n_banks; i++) {
    m->files[1 + i].crc32 = w->bank[i].crc;
    SPILL_FAIL_IF(e, fsync(w->bank[i].fd) != 0, SPILL_E_IO, "%s/%s: fsync failed: %s", w->dir,
                  m->banks[i].file, strerror(errno));
    (void)posix_fadvise(w->bank[i].fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  char *json = NULL;
  SPILL_TRY(self_check(m, &json, e));
  int rc = path_of(w, SPILL_MANIFEST_FILE, path, sizeof path, e);
  if (rc == SPILL_OK) rc = spill_write_file_atomic(path, json, strlen(json), e);
  free(json);
  return rc;
}

int spill_writer_finish(spill_writer *w, spill_err *e) {
  SPILL_FAIL_IF(e, !w, SPILL_E_INVALID_ARG, "writer finish: NULL writer");
  int rc = finish_impl(w, e);
  writer_free(w, rc < 0);
  return rc;
}
