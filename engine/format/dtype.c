/* engine/format/dtype.c: matrix byte sizes (derived from the dtype traits
 * table, engine/base/dtype_traits.h), the expert record layout,
 * architecture helpers, and the small utilities (CRC-32 combination, full
 * pread/pwrite) the other files of the module share.
 *
 * Byte sizes are the single source of truth for every reader and writer:
 * all products go through the overflow-checked spill_mul_u64, and anything
 * larger than 2^53 is rejected so that sizes survive a JSON round trip.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/alloc.h"
#include "engine/base/crc32.h"
#include "engine/format/container.h"
#include "engine/format/format_internal.h"

int spill_dtype_matrix_bytes(spill_dtype dt, uint64_t rows, uint64_t cols, uint32_t group,
                             uint64_t *out, spill_err *e) {
  const spill_dtype_traits *t = spill_dtype_traits_of((int)dt);
  SPILL_FAIL_IF(e, !t, SPILL_E_FORMAT, "unknown dtype %d", (int)dt);
  const char *name = t->name;
  uint64_t row_bytes, row_scales, per_row, total;
  SPILL_FAIL_IF(e, rows == 0 || cols == 0, SPILL_E_FORMAT, "%s (%llu, %llu): empty dimension",
                name, (unsigned long long)rows, (unsigned long long)cols);
  if (t->scales == SPILL_DT_SCALES_GROUP_F16) {
    SPILL_FAIL_IF(e, group == 0, SPILL_E_FORMAT, "%s: group size 0", name);
    SPILL_FAIL_IF(e, group % t->block_elems != 0, SPILL_E_FORMAT,
                  "%s: group size %u is not a multiple of %u%s", name, group, t->block_elems,
                  t->block_elems == 2 ? " (odd)" : "");
    SPILL_FAIL_IF(e, cols % group != 0, SPILL_E_FORMAT,
                  "%s: cols %llu not a multiple of the group size %u", name,
                  (unsigned long long)cols, group);
  }
  SPILL_FAIL_IF(e, cols % t->block_elems != 0, SPILL_E_FORMAT, "%s: cols %llu not a multiple of %u",
                name, (unsigned long long)cols, t->block_elems);
  /* rows x (value bytes + 2 bytes per scale), every product overflow-checked */
  int ovf = !spill_dtype_row_layout((int)dt, cols, group, &row_bytes, &row_scales) ||
            !spill_mul_u64(row_scales, 2, &per_row) || !spill_add_u64(row_bytes, per_row, &per_row) ||
            !spill_mul_u64(rows, per_row, &total);
  SPILL_FAIL_IF(e, ovf || total > (uint64_t)SPILL_JSON_INT_MAX, SPILL_E_FORMAT,
                "%s (%llu, %llu): byte size overflows", name, (unsigned long long)rows,
                (unsigned long long)cols);
  *out = total;
  return SPILL_OK;
}

int spill_dtype_check_values(spill_dtype dt, const void *data, uint64_t rows, uint64_t cols,
                             spill_err *e) {
  const spill_dtype_traits *t = spill_dtype_traits_of((int)dt);
  if (!t || !t->e8m0_scale || cols % t->block_elems != 0) return SPILL_OK;
  const uint8_t *p = data;
  const uint64_t nb = cols / t->block_elems;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t b = 0; b < nb; b++, p += t->block_bytes)
      SPILL_FAIL_IF(e, *p == 0xFF, SPILL_E_FORMAT,
                    "%s: row %llu block %llu: scale exponent 255 (NaN in e8m0) refused", t->name,
                    (unsigned long long)r, (unsigned long long)b);
  return SPILL_OK;
}

int spill_arch_n_moe(const spill_arch *a) {
  if (!a || a->n_layers <= a->n_dense_layers) return 0;
  return a->n_layers - a->n_dense_layers;
}

int spill_arch_is_moe(const spill_arch *a, int layer) {
  return a && layer >= a->n_dense_layers && layer < a->n_layers && layer >= 0;
}

int spill_record_layout(const spill_arch *a, spill_dtype dt, uint32_t group,
                        spill_section_info sect[SPILL_SEC_COUNT], uint32_t *payload_bytes,
                        uint64_t *record_bytes, spill_err *e) {
  const spill_dtype dts[SPILL_SEC_COUNT] = {dt, dt, dt};
  return spill_record_layout_sections(a, dts, group, sect, payload_bytes, record_bytes, e);
}

/* (rows, cols) of the three sections of arch a. */
static int section_dims(const spill_arch *a, uint64_t dims[SPILL_SEC_COUNT][2], spill_err *e) {
  SPILL_FAIL_IF(e, !a, SPILL_E_INVALID_ARG, "record layout: no architecture");
  const spill_moe_cfg *moe = &a->moe;
  SPILL_FAIL_IF(e, moe->d_expert <= 0, SPILL_E_FORMAT, "record layout: d_expert %d <= 0",
                moe->d_expert);
  int64_t d_in = moe->d_latent > 0 ? moe->d_latent : a->d_model;
  SPILL_FAIL_IF(e, d_in <= 0, SPILL_E_FORMAT, "record layout: expert input width %lld <= 0",
                (long long)d_in);
  dims[0][0] = dims[1][0] = dims[2][1] = (uint64_t)moe->d_expert;
  dims[0][1] = dims[1][1] = dims[2][0] = (uint64_t)d_in;
  return SPILL_OK;
}

static const char *const kSect[SPILL_SEC_COUNT] = {"gate", "up", "down"};

/* Places sections of the given byte sizes: 64-aligned after the header. */
static int place_sections(const uint64_t dims[SPILL_SEC_COUNT][2],
                          const uint64_t bytes[SPILL_SEC_COUNT],
                          spill_section_info sect[SPILL_SEC_COUNT], uint32_t *payload_bytes,
                          uint64_t *record_bytes, spill_err *e) {
  uint64_t off = SPILL_RECORD_HEADER_BYTES;
  spill_section_info s[SPILL_SEC_COUNT];
  for (int i = 0; i < SPILL_SEC_COUNT; i++) {
    uint64_t end;
    SPILL_FAIL_IF(e, !spill_round_up_u64(off, SPILL_TENSOR_ALIGN, &off) ||
                         !spill_add_u64(off, bytes[i], &end) || end > UINT32_MAX,
                  SPILL_E_FORMAT, "expert section %s: record offsets exceed 32 bits", kSect[i]);
    s[i].rows = (uint32_t)dims[i][0];
    s[i].cols = (uint32_t)dims[i][1];
    s[i].offset = (uint32_t)off;
    s[i].bytes = (uint32_t)bytes[i];
    off = end;
  }
  uint64_t rec;
  SPILL_FAIL_IF(e, !spill_round_up_u64(off, SPILL_PAGE, &rec), SPILL_E_FORMAT,
                "record size overflows");
  memcpy(sect, s, sizeof s);
  *payload_bytes = (uint32_t)(off - SPILL_RECORD_HEADER_BYTES);
  *record_bytes = rec;
  return SPILL_OK;
}

int spill_record_layout_sections(const spill_arch *a, const spill_dtype dt[SPILL_SEC_COUNT],
                                 uint32_t group, spill_section_info sect[SPILL_SEC_COUNT],
                                 uint32_t *payload_bytes, uint64_t *record_bytes, spill_err *e) {
  uint64_t dims[SPILL_SEC_COUNT][2], bytes[SPILL_SEC_COUNT];
  SPILL_TRY(section_dims(a, dims, e));
  for (int i = 0; i < SPILL_SEC_COUNT; i++) {
    int rc = spill_dtype_matrix_bytes(dt[i], dims[i][0], dims[i][1], group, &bytes[i], e);
    if (rc < 0) {
      spill_err_prefix(e, "expert section %s", kSect[i]);
      return rc;
    }
  }
  return place_sections(dims, bytes, sect, payload_bytes, record_bytes, e);
}

int spill_manifest_mixed_layout(const spill_manifest *m, spill_section_info sect[SPILL_SEC_COUNT],
                                uint32_t *payload_bytes, uint64_t *record_bytes, spill_err *e) {
  uint64_t dims[SPILL_SEC_COUNT][2], bytes[SPILL_SEC_COUNT] = {0, 0, 0};
  SPILL_TRY(section_dims(&m->arch, dims, e));
  const int grouped = m->expert_dtype == SPILL_DT_Q8 || m->expert_dtype == SPILL_DT_Q4;
  for (int b = 0; b < m->n_banks; b++) {
    for (int i = 0; i < SPILL_SEC_COUNT; i++) {
      spill_dtype dt = m->banks[b].sect_dtype[i];
      uint64_t n;
      SPILL_FAIL_IF(e, (unsigned)dt >= SPILL_DT_COUNT, SPILL_E_FORMAT,
                    "banks[%d]: section %s: dtype code %d unknown", b, kSect[i], (int)dt);
      SPILL_FAIL_IF(e, (dt == SPILL_DT_RVQ3) != (m->expert_dtype == SPILL_DT_RVQ3),
                    SPILL_E_FORMAT,
                    "banks[%d]: section %s: %s with experts.dtype %s (rvq3 records are never "
                    "mixed with other dtypes)", b, kSect[i], spill_dtype_name(dt),
                    spill_dtype_name(m->expert_dtype));
      SPILL_FAIL_IF(e, (dt == SPILL_DT_Q8 || dt == SPILL_DT_Q4) && !grouped, SPILL_E_FORMAT,
                    "banks[%d]: section %s: %s needs experts.group, which only a q8/q4 "
                    "experts.dtype has", b, kSect[i], spill_dtype_name(dt));
      int rc = spill_dtype_matrix_bytes(dt, dims[i][0], dims[i][1], m->expert_group, &n, e);
      if (rc < 0) {
        spill_err_prefix(e, "banks[%d]: expert section %s", b, kSect[i]);
        return rc;
      }
      if (n > bytes[i]) bytes[i] = n;
    }
  }
  return place_sections(dims, bytes, sect, payload_bytes, record_bytes, e);
}

static const spill_bank_info *bank_of(const spill_manifest *m, int layer) {
  int i = layer - m->arch.n_dense_layers;
  return m->banks && i >= 0 && i < m->n_banks ? &m->banks[i] : NULL;
}

spill_dtype spill_manifest_sect_dtype(const spill_manifest *m, int layer, int sec) {
  const spill_bank_info *b = bank_of(m, layer);
  return b && m->sect_mixed ? b->sect_dtype[sec] : m->expert_dtype;
}

uint32_t spill_manifest_sect_bytes(const spill_manifest *m, int layer, int sec) {
  const spill_section_info *s = &m->sect[sec];
  uint64_t n = s->bytes;
  if (spill_dtype_matrix_bytes(spill_manifest_sect_dtype(m, layer, sec), s->rows, s->cols,
                               m->expert_group, &n, NULL) < 0 || n > s->bytes)
    n = s->bytes; /* validated at parse time; never reached for a parsed manifest */
  return (uint32_t)n;
}

/* ---- shared utilities ---- */

/* CRC-32 combination by multiplication modulo the CRC polynomial (the method
 * of zlib >= 1.2.12): crc(A||B) = crc(A) * x^(8 len(B)) mod P  xor  crc(B).
 * Lets the writer and the verifier derive a file's CRC from per-piece CRCs
 * without hashing the bytes twice. */
#define SPILL_CRC_POLY 0xEDB88320u

static uint32_t multmodp(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ SPILL_CRC_POLY : b >> 1;
  }
  return p;
}

/* x^(n * 2^k) mod P. x^(2^j) repeats with period 32 in j because the order
 * of x divides 2^32 - 1. */
static uint32_t x2nmodp(uint64_t n, unsigned k) {
  uint32_t tab[32];
  uint32_t p = 1u << 30; /* x^1 */
  tab[0] = p;
  for (int i = 1; i < 32; i++) tab[i] = p = multmodp(p, p);
  p = 1u << 31; /* x^0 */
  while (n) {
    if (n & 1) p = multmodp(tab[k & 31], p);
    n >>= 1;
    k++;
  }
  return p;
}

uint32_t spill_fmt_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return multmodp(x2nmodp(len_b, 3), crc_a) ^ crc_b;
}

static const uint8_t kZeros[4096];

uint32_t spill_fmt_crc32_zeros(uint32_t crc, uint64_t n) {
  while (n) {
    size_t k = n < sizeof kZeros ? (size_t)n : sizeof kZeros;
    crc = spill_crc32(crc, kZeros, k);
    n -= k;
  }
  return crc;
}

int spill_fmt_all_zero(const void *p, size_t n) {
  const uint8_t *b = p;
  while (n >= sizeof kZeros) {
    if (memcmp(b, kZeros, sizeof kZeros) != 0) return 0;
    b += sizeof kZeros;
    n -= sizeof kZeros;
  }
  return memcmp(b, kZeros, n) == 0;
}

ssize_t spill_fmt_pread_full(int fd, void *buf, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

int spill_fmt_pwrite_full(int fd, const void *buf, size_t n, uint64_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return -1;
    }
    done += (size_t)w;
  }
  return 0;
}

void spill_fmt_bank_name(int layer, char buf[SPILL_NAME_MAX]) {
  snprintf(buf, SPILL_NAME_MAX, "experts-%03d.bin", layer);
}
