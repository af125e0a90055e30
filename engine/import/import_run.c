/* engine/import/import_run.c: the import itself: dtype decisions, tensor
 * conversion, the resume journal and the container writer.
 *
 * Data path: one unit at a time (a trunk tensor, or one expert's gate, up
 * and down) is read from the source with pread into a buffer sized for the
 * largest unit, converted into a second buffer and handed to the streaming
 * writer. Nothing else grows with the model: peak memory is about
 * 2 x (largest trunk tensor, source bytes + container bytes) + 2 x (one
 * expert, source + container) + one f32 row.
 *
 * Conversion: `keep` copies bytes when the container has the source format
 * (f32/f16/bf16 as is; GGUF Q8_0 -> q8 and Q4_0 -> q4 with group 32: the
 * int8 values / nibbles and f16 scales are moved, not recomputed, so every
 * dequantised weight is bit-identical). Otherwise rows are dequantised to f32
 * (FP8 times its block's weight_scale_inv) and requantised by rounding
 * (q8: s = f16(amax / 127), q = round(x / s); q4: s = f16(amax / 7),
 * q = round(x / s) in [-8, 7]); the relative error per tensor is reported.
 * GGUF llama q/k rows are un-permuted back to the rotate-half layout.
 *
 * Journal (DST/import.journal, text, append-only): line 1 is the import's
 * identity (options; per source file its path, size, mtime, ctime, inode and
 * a crc32 of sampled content, so that a source rewritten between a kill and
 * the resume is refused by name, never mixed in); then "T i crc32" per finished
 * trunk tensor, "R layer expert" per finished record, "done". A re-run
 * with the same identity adopts every journaled unit whose bytes on disk
 * still check out (crc32 for tensors; header + payload crc32 + padding for
 * records) and redoes the rest, so kill -9 or power loss at any point ends
 * byte-identical to an uninterrupted import. A different identity is refused
 * naming the difference.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "engine/base/clock.h"
#include "engine/base/crc32.h"
#include "engine/base/half.h"
#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/import/import_checked.h"
#include "engine/import/import_internal.h"

#define JOURNAL "import.journal"

static const char *target_name(spill_import_target t) {
  switch (t) {
    case SPILL_IMPORT_KEEP: return "keep";
    case SPILL_IMPORT_Q8: return "q8";
    case SPILL_IMPORT_Q4: return "q4";
    case SPILL_IMPORT_RVQ3: return "rvq3";
  }
  return "?";
}

void spill_import_summary_free(spill_import_summary *s) {
  if (!s) return;
  free(s->errors);
  s->errors = NULL;
  s->n_errors = 0;
}

/* ---- conversion ---- */

typedef struct conv {
  uint8_t *src;   /* source bytes of one unit part */
  size_t src_cap;
  float *row;     /* (max cols) */
  size_t row_cap;
  float *scale;   /* FP8 scale grid */
  size_t scale_cap;
  uint8_t *ct;    /* compressed-tensors MXFP4: packed bytes, then scale bytes */
  size_t ct_cap;
  const float *rvq_cb; /* rvq3 target: the (layer, matrix) codebook, 768 x 8 */
  float *mat;          /* rvq3 target: the whole matrix in f32 (rows x cols) */
  size_t mat_cap;
  int threads;         /* rvq3 encoder threads (0 = online CPUs) */
} conv;

static int grow(void **p, size_t *cap, size_t need, spill_err *e) {
  if (need <= *cap) return SPILL_OK;
  void *q = realloc(*p, need);
  SPILL_FAIL_IF(e, !q, SPILL_E_NOMEM, "out of memory for %zu bytes", need);
  *p = q;
  *cap = need;
  return SPILL_OK;
}

/* The container dtype `keep` gives a source dtype, or -1. */
static int keep_dtype(spill_src_dtype s, spill_dtype *dt, uint32_t *group) {
  *group = 0;
  switch (s) {
    case SPILL_SRC_F32: *dt = SPILL_DT_F32; return 0;
    case SPILL_SRC_F16: *dt = SPILL_DT_F16; return 0;
    case SPILL_SRC_BF16: *dt = SPILL_DT_BF16; return 0;
    case SPILL_SRC_Q8_0: *dt = SPILL_DT_Q8; *group = 32; return 0;
    case SPILL_SRC_Q4_0: *dt = SPILL_DT_Q4; *group = 32; return 0;
    case SPILL_SRC_Q4_K: *dt = SPILL_DT_Q4_K; return 0; /* ggml blocks kept verbatim */
    case SPILL_SRC_Q5_K: *dt = SPILL_DT_Q5_K; return 0;
    case SPILL_SRC_Q6_K: *dt = SPILL_DT_Q6_K; return 0;
    case SPILL_SRC_MXFP4: *dt = SPILL_DT_MXFP4; return 0; /* ggml blocks kept verbatim */
    case SPILL_SRC_Q5_0: *dt = SPILL_DT_Q5_0; return 0;   /* ggml blocks kept verbatim */
    case SPILL_SRC_Q5_1: *dt = SPILL_DT_Q5_1; return 0;
    default: return -1;
  }
}

/* Which source row becomes container row r (NULL t: the same). */
static uint64_t src_row(uint64_t r, uint64_t rows, const imp_trunk *t) {
  if (t && t->unpermute_heads > 0) {
    const uint64_t hd = rows / (uint64_t)t->unpermute_heads, h = r / hd, rr = r % hd, half = hd / 2;
    return h * hd + 2 * (rr % half) + rr / half; /* inverse of llama.cpp's permute() */
  }
  if (t && t->vh_hd > 0 && !t->vh_cols && r >= t->vh_off) { /* Qwen3.5 v heads: grouped -> tiled */
    const uint64_t j = r - t->vh_off, hd = t->vh_hd, h = j / hd, v = h / t->vh_hk, g = h % t->vh_hk;
    return t->vh_off + (g * t->vh_r + v) * hd + j % hd;
  }
  if (t && t->rope_dim > 0) { /* de-interleave the rope rows of each block */
    const uint64_t b = r / t->rope_block, rr = r % t->rope_block, half = t->rope_dim / 2;
    if (rr < t->rope_off || rr >= (uint64_t)t->rope_off + t->rope_dim) return r;
    const uint64_t j = rr - t->rope_off;
    return b * t->rope_block + t->rope_off + (j < half ? 2 * j : 2 * (j - half) + 1);
  }
  return r;
}

static void quant_row(const float *x, uint64_t cols, uint32_t group, spill_dtype dt, uint8_t *q,
                      uint16_t *sc, double *num, double *den) {
  const float qmax = dt == SPILL_DT_Q8 ? 127.0f : 7.0f, qmin = dt == SPILL_DT_Q8 ? -127.0f : -8.0f;
  for (uint64_t g = 0; g < cols / group; g++) {
    const float *xg = x + g * group;
    float amax = 0;
    for (uint32_t j = 0; j < group; j++) amax = fmaxf(amax, fabsf(xg[j]));
    uint16_t s16 = spill_f32_to_f16(amax / qmax);
    float s = spill_f16_to_f32(s16), inv = s > 0 ? 1.0f / s : 0.0f;
    sc[g] = s16;
    for (uint32_t j = 0; j < group; j++) {
      float v = roundf(xg[j] * inv);
      v = v > qmax ? qmax : v < qmin ? qmin : v;
      const uint64_t c = g * group + j;
      if (dt == SPILL_DT_Q8) {
        q[c] = (uint8_t)(int8_t)v;
      } else {
        uint8_t nib = (uint8_t)((int)v + 8);
        if (c & 1) q[c / 2] = (uint8_t)((q[c / 2] & 0x0F) | (nib << 4));
        else q[c / 2] = (uint8_t)((q[c / 2] & 0xF0) | nib);
      }
      double dq = (double)s * (double)v, d = (double)xg[j] - dq;
      *num += d * d;
      *den += (double)xg[j] * xg[j];
    }
  }
}

/* Source row sr of cv->src (row bytes rb) in f32 at dst, times its FP8
 * block scale when scale is not NULL. */
static int row_f32(const conv *cv, spill_src_dtype sd, const float *scale, const uint32_t fp8b[2],
                   uint64_t sr, uint64_t rb, uint64_t cols, float *dst, spill_err *e) {
  SPILL_TRY(spill_src_dequant(sd, cv->src + sr * rb, cols, dst, e));
  if (scale) { /* the scale of the source row's block */
    const uint64_t bc = (cols + fp8b[1] - 1) / fp8b[1];
    const float *s = scale + (sr / fp8b[0]) * bc;
    for (uint64_t c = 0; c < cols; c++) dst[c] *= s[c / fp8b[1]];
  }
  return SPILL_OK;
}

/* Non-finite source weights are refused, never converted: q8/q4 rounding
 * would turn a NaN into an arbitrary int8 (fmaxf skips it in the scale), rvq3
 * would encode it to the nearest entry, keep would copy it into a container
 * verify calls clean, and the engine would generate from NaN logits. x is
 * source row sr of tensor `what` in f32; the first bad value is named by row
 * and column (for a GGUF stack of experts, within the expert). */
static int check_finite(const float *x, uint64_t cols, uint64_t sr, const char *what, spill_err *e) {
  float acc = 0.0f;
  for (uint64_t c = 0; c < cols; c++) acc += x[c] * 0.0f; /* NaN iff some x is NaN or Inf */
  if (acc == 0.0f) return SPILL_OK;
  for (uint64_t c = 0; c < cols; c++)
    if (!isfinite(x[c]))
      return spill_err_set(e, SPILL_E_NONFINITE,
                           "tensor %s: value %s at (row %llu, column %llu): the source holds a "
                           "non-finite weight; refusing to import it",
                           what, isnan(x[c]) ? "nan" : x[c] > 0 ? "inf" : "-inf",
                           (unsigned long long)sr, (unsigned long long)c);
  return SPILL_OK;
}

/* check_finite over every row of a matrix that is copied without being
 * converted (keep): each source row dequantised into cv->row first. */
static int check_src_rows(conv *cv, spill_src_dtype sd, uint64_t rows, uint64_t cols, uint64_t rb,
                          const char *what, spill_err *e) {
  SPILL_TRY(grow((void **)&cv->row, &cv->row_cap, (size_t)cols * sizeof(float), e));
  for (uint64_t r = 0; r < rows; r++) {
    SPILL_TRY(spill_src_dequant(sd, cv->src + r * rb, cols, cv->row, e));
    SPILL_TRY(check_finite(cv->row, cols, r, what, e));
  }
  return SPILL_OK;
}

/* Converts a (rows, cols) matrix whose source bytes are cv->src (dtype sd,
 * rows of whole blocks) into dt/group at out. scale: FP8 grid (br x bc
 * blocks) or NULL. num/den accumulate the requantisation error. */
static int convert(conv *cv, spill_src_dtype sd, const float *scale, const uint32_t fp8b[2],
                   uint64_t rows, uint64_t cols, const imp_trunk *heads, spill_dtype dt, uint32_t group,
                   uint8_t *out, double *num, double *den, const char *what, spill_err *e) {
  uint64_t rb;
  SPILL_TRY(spill_src_bytes(sd, cols, &rb, e));
  spill_dtype kd;
  uint32_t kg;
  const int direct = scale == NULL && keep_dtype(sd, &kd, &kg) == 0 && kd == dt &&
                     (kg == 0 || kg == group);
  if (direct) SPILL_TRY(check_src_rows(cv, sd, rows, cols, rb, what, e));
  if (direct && (dt == SPILL_DT_F32 || dt == SPILL_DT_F16 || dt == SPILL_DT_BF16 ||
                 dt == SPILL_DT_Q4_K || dt == SPILL_DT_Q5_K || dt == SPILL_DT_Q6_K ||
                 dt == SPILL_DT_MXFP4 || dt == SPILL_DT_Q5_0 || dt == SPILL_DT_Q5_1)) {
    for (uint64_t r = 0; r < rows; r++)
      memcpy(out + r * rb, cv->src + src_row(r, rows, heads) * rb, (size_t)rb);
    return SPILL_OK;
  }
  if (direct) { /* Q8_0 -> q8 / Q4_0 -> q4, group 32: move values and scales */
    const uint64_t nb = cols / 32;
    uint8_t *vals = out;
    uint8_t *scales = out + (dt == SPILL_DT_Q8 ? rows * cols : rows * cols / 2);
    for (uint64_t r = 0; r < rows; r++) {
      const uint8_t *sr = cv->src + src_row(r, rows, heads) * rb;
      for (uint64_t b = 0; b < nb; b++) {
        const uint8_t *blk = sr + b * (dt == SPILL_DT_Q8 ? 34 : 18);
        memcpy(scales + 2 * (r * nb + b), blk, 2);
        if (dt == SPILL_DT_Q8) {
          memcpy(vals + r * cols + b * 32, blk + 2, 32);
        } else { /* ggml: j low, j+16 high; spill: flat element 2i low, 2i+1 high */
          uint8_t v[32];
          for (int j = 0; j < 16; j++) {
            v[j] = blk[2 + j] & 0xF;
            v[j + 16] = blk[2 + j] >> 4;
          }
          uint8_t *o = vals + (r * cols + b * 32) / 2; /* cols % 32 == 0: byte aligned */
          for (int j = 0; j < 16; j++) o[j] = (uint8_t)(v[2 * j] | (v[2 * j + 1] << 4));
        }
      }
    }
    return SPILL_OK;
  }
  SPILL_TRY(grow((void **)&cv->row, &cv->row_cap, (size_t)cols * sizeof(float), e));
  uint64_t vbytes = dt == SPILL_DT_Q8 ? rows * cols : dt == SPILL_DT_Q4 ? rows * cols / 2
                    : dt == SPILL_DT_RVQ3 ? rows * (cols / SPILL_RVQ_DIM) * SPILL_RVQ_STAGES : 0;
  SPILL_FAIL_IF(e, dt == SPILL_DT_RVQ3 && !cv->rvq_cb, SPILL_E_INTERNAL, "%s: no rvq3 codebook", what);
  if (dt == SPILL_DT_RVQ3) { /* the whole matrix in f32, then encoded on all threads */
    SPILL_TRY(grow((void **)&cv->mat, &cv->mat_cap, (size_t)(rows * cols) * sizeof(float), e));
    for (uint64_t r = 0; r < rows; r++) {
      const uint64_t sr = src_row(r, rows, heads);
      SPILL_TRY(row_f32(cv, sd, scale, fp8b, sr, rb, cols, cv->mat + r * cols, e));
      SPILL_TRY(check_finite(cv->mat + r * cols, cols, sr, what, e));
    }
    return imp_rvq_encode_rows(cv->rvq_cb, cv->mat, rows, cols, out, out + vbytes, num, den, cv->threads, e);
  }
  for (uint64_t r = 0; r < rows; r++) {
    const uint64_t sr = src_row(r, rows, heads);
    SPILL_TRY(row_f32(cv, sd, scale, fp8b, sr, rb, cols, cv->row, e));
    SPILL_TRY(check_finite(cv->row, cols, sr, what, e));
    switch (dt) {
      case SPILL_DT_F32:
        memcpy(out + r * cols * 4, cv->row, (size_t)cols * 4);
        if (scale || sd != SPILL_SRC_F32) { /* exact widening (or FP8 x scale in f32) */ }
        break;
      case SPILL_DT_Q8:
      case SPILL_DT_Q4:
        quant_row(cv->row, cols, group, dt, out + (dt == SPILL_DT_Q8 ? r * cols : r * cols / 2),
                  (uint16_t *)(void *)(out + vbytes) + r * (cols / group), num, den);
        break;
      default:
        return spill_err_set(e, SPILL_E_INTERNAL, "%s: no conversion to %s", what, spill_dtype_name(dt));
    }
  }
  return SPILL_OK;
}

/* Reads an FP8 tensor's scale grid (f32 or bf16, shape (ceil(r/br), ceil(c/bc))). */
static int read_scale(const imp_src *s, const spill_src_tensor *st, uint64_t rows, uint64_t cols,
                      conv *cv, spill_err *e) {
  const uint64_t br = (rows + s->fp8_block[0] - 1) / s->fp8_block[0],
                 bc = (cols + s->fp8_block[1] - 1) / s->fp8_block[1];
  SPILL_FAIL_IF(e, st->ndim != 2 || st->shape[0] != br || st->shape[1] != bc, SPILL_E_FORMAT,
                "tensor %s: shape is not the [%llu, %llu] block grid", st->name,
                (unsigned long long)br, (unsigned long long)bc);
  SPILL_FAIL_IF(e, st->dtype != SPILL_SRC_F32 && st->dtype != SPILL_SRC_BF16, SPILL_E_UNSUPPORTED,
                "tensor %s: scales must be F32 or BF16", st->name);
  SPILL_TRY(grow((void **)&cv->scale, &cv->scale_cap, (size_t)(br * bc) * sizeof(float), e));
  uint8_t *raw = malloc((size_t)st->bytes + 1);
  SPILL_FAIL_IF(e, !raw, SPILL_E_NOMEM, "out of memory");
  int rc = imp_src_read(s, st, 0, raw, (size_t)st->bytes, e);
  if (rc == SPILL_OK) rc = spill_src_dequant(st->dtype, raw, br * bc, cv->scale, e);
  free(raw);
  return rc;
}

/* ---- journal ---- */

typedef struct journal {
  int fd;
  int n_t;
  uint8_t *t_done;   /* (n_trunk) */
  uint32_t *t_crc;   /* (n_trunk) */
  uint8_t **r_done;  /* (n_moe)(E) */
  int done;
} journal;

static void journal_free(journal *j, int n_moe) {
  if (j->fd >= 0) close(j->fd);
  free(j->t_done);
  free(j->t_crc);
  for (int i = 0; j->r_done && i < n_moe; i++) free(j->r_done[i]);
  free(j->r_done);
}

static int jappend(journal *j, const char *line, spill_err *e) {
  size_t n = strlen(line);
  ssize_t w = write(j->fd, line, n);
  SPILL_FAIL_IF(e, w != (ssize_t)n, SPILL_E_IO, "%s: append failed: %s", JOURNAL, strerror(errno));
  return SPILL_OK;
}

/* The identity of one source file: what a same-size rewrite between a kill
 * and the resume cannot keep. Size, mtime and ctime (ns), inode and device,
 * and a crc32 of sampled content: the whole file up to SAMPLE_WHOLE bytes,
 * else its first MiB (the safetensors header / GGUF metadata), its last
 * SAMPLE_CHUNK bytes and SAMPLE_N chunks spread evenly between (about
 * 3 MiB read per file). ctime cannot be set from user space, so any write
 * (even one that restores mtime) changes the identity; the sample also
 * catches a copy that kept every time stamp. */
#define SAMPLE_WHOLE (4u << 20)
#define SAMPLE_HEAD (1u << 20)
#define SAMPLE_CHUNK (64u << 10)
#define SAMPLE_N 32

static int sample_region(int fd, uint64_t off, uint64_t n, uint8_t *buf, uint32_t *crc,
                         const char *p, spill_err *e) {
  while (n > 0) {
    size_t want = n > SAMPLE_CHUNK ? SAMPLE_CHUNK : (size_t)n;
    ssize_t got = pread(fd, buf, want, (off_t)off);
    SPILL_FAIL_IF(e, got <= 0, SPILL_E_IO, "%s: reading at %llu: %s", p, (unsigned long long)off,
                  got < 0 ? strerror(errno) : "unexpected end of file");
    *crc = spill_crc32(*crc, buf, (size_t)got);
    off += (uint64_t)got;
    n -= (uint64_t)got;
  }
  return SPILL_OK;
}

static int file_sample(const char *p, uint64_t size, uint32_t *out, spill_err *e) {
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SPILL_FAIL_IF(e, fd < 0, SPILL_E_IO, "%s: %s", p, strerror(errno));
  uint8_t *buf = malloc(SAMPLE_CHUNK);
  uint32_t crc = 0;
  int rc = buf ? SPILL_OK : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  if (rc == SPILL_OK && size <= SAMPLE_WHOLE) {
    rc = sample_region(fd, 0, size, buf, &crc, p, e);
  } else if (rc == SPILL_OK) {
    rc = sample_region(fd, 0, SAMPLE_HEAD, buf, &crc, p, e);
    const uint64_t span = size - SAMPLE_HEAD - SAMPLE_CHUNK; /* > 2 MiB */
    for (int k = 0; rc == SPILL_OK && k < SAMPLE_N; k++)
      rc = sample_region(fd, SAMPLE_HEAD + span / SAMPLE_N * (uint64_t)k, SAMPLE_CHUNK, buf, &crc, p, e);
    if (rc == SPILL_OK) rc = sample_region(fd, size - SAMPLE_CHUNK, SAMPLE_CHUNK, buf, &crc, p, e);
  }
  free(buf);
  close(fd);
  *out = crc;
  return rc;
}

/* Appends s to the growing line *b, resizing it. */
static int put_text(char **b, size_t *len, size_t *cap, const char *s, spill_err *e) {
  size_t n = strlen(s);
  if (*len + n + 2 > *cap) {
    size_t c = (*len + n + 2) * 2;
    char *nb = realloc(*b, c);
    SPILL_FAIL_IF(e, !nb, SPILL_E_NOMEM, "out of memory");
    *b = nb;
    *cap = c;
  }
  memcpy(*b + *len, s, n + 1);
  *len += n;
  return SPILL_OK;
}

/* The identity line: options, then per source file its real path (',' ':'
 * '%' ' ' and bytes outside 0x21-0x7e as %XX, so the fields split
 * unambiguously) and the fields of file_sample's comment. */
static int identity(const spill_import_request *r, const imp_src *s, uint32_t group, char **out,
                    spill_err *e) {
  size_t cap = 0, len = 0;
  char *b = NULL, tmp[PATH_MAX * 3 + 200];
  snprintf(tmp, sizeof tmp, "spill-import 2 experts=%s trunk=%s group=%u files=",
           target_name(r->experts), target_name(r->trunk), group);
  int rc = put_text(&b, &len, &cap, tmp, e);
  const int nf = s->is_gguf ? s->gg.n_files : s->st.n_files;
  for (int i = 0; rc == SPILL_OK && i < nf; i++) {
    const char *p = s->is_gguf ? s->gg.paths[i] : s->st.paths[i];
    struct stat st;
    char rp[PATH_MAX];
    if (stat(p, &st) != 0) { rc = spill_err_set(e, SPILL_E_IO, "%s: %s", p, strerror(errno)); break; }
    if (!realpath(p, rp)) snprintf(rp, sizeof rp, "%s", p);
    uint32_t crc = 0;
    rc = file_sample(p, (uint64_t)st.st_size, &crc, e);
    if (rc != SPILL_OK) break;
    size_t o = 0;
    if (i) tmp[o++] = ',';
    for (const unsigned char *c = (const unsigned char *)rp; *c; c++) {
      if (*c > 0x20 && *c < 0x7f && *c != ',' && *c != ':' && *c != '%') tmp[o++] = (char)*c;
      else o += (size_t)snprintf(tmp + o, 4, "%%%02X", *c);
    }
    snprintf(tmp + o, sizeof tmp - o, ":size=%llu:mtime=%lld:ctime=%lld:ino=%llu:dev=%llu:sample=%08x",
             (unsigned long long)st.st_size,
             (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
             (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec,
             (unsigned long long)st.st_ino, (unsigned long long)st.st_dev, crc);
    rc = put_text(&b, &len, &cap, tmp, e);
  }
  if (rc == SPILL_OK) rc = put_text(&b, &len, &cap, "\n", e);
  if (rc != SPILL_OK) {
    free(b);
    return rc;
  }
  *out = b;
  return SPILL_OK;
}

/* The value of key (e.g. "files=") in an identity line, up to ' ' or '\n'. */
static const char *id_field(const char *line, const char *key, size_t *n) {
  const char *end = strchr(line, '\n'), *a = strstr(line, key);
  if (!a || (end && a > end)) { *n = 0; return NULL; }
  *n = strcspn(a, " \n");
  return a;
}

/* Names the difference of two identity lines: a changed option, another set
 * of source files, or (same paths) the first file that changed and how. */
static int identity_diff(const char *old, const char *now, spill_err *e) {
  const char *keys[] = {"experts=", "trunk=", "group=", "files="};
  SPILL_FAIL_IF(e, strncmp(old, "spill-import 2 ", 15), SPILL_E_INVALID_ARG,
                "DST's %s is from another import version: remove DST to start again", JOURNAL);
  size_t la, lb;
  for (int i = 0; i < 3; i++) {
    const char *a = id_field(old, keys[i], &la), *b = id_field(now, keys[i], &lb);
    if (!a || !b || la != lb || memcmp(a, b, la))
      return spill_err_set(e, SPILL_E_INVALID_ARG,
                           "DST holds an import made with %.*s; this run asks %.*s: refusing to "
                           "mix them (remove DST or repeat the original command)",
                           (int)(la > 300 ? 300 : la), a ? a : "(none)", (int)(lb > 300 ? 300 : lb),
                           b ? b : "(none)");
  }
  const char *a = id_field(old, "files=", &la), *b = id_field(now, "files=", &lb);
  SPILL_FAIL_IF(e, !a || !b, SPILL_E_INVALID_ARG, "%s: no files= in the identity line", JOURNAL);
  const char *ae = a + la, *be = b + lb;
  a += 6;
  b += 6;
  int same_paths = 1;
  const char *bad = NULL, *bad_b = NULL;
  while (a < ae && b < be) { /* entries: PATH:size=..:...:sample=.. separated by ',' */
    size_t ea = strcspn(a, ", \n"), eb = strcspn(b, ", \n");
    size_t pa = strcspn(a, ":"), pb = strcspn(b, ":");
    if (pa > ea) pa = ea;
    if (pb > eb) pb = eb;
    if (pa != pb || memcmp(a, b, pa)) { same_paths = 0; break; }
    if (!bad && (ea != eb || memcmp(a, b, ea))) { bad = a; bad_b = b; }
    a += ea + (a[ea] == ',');
    b += eb + (b[eb] == ',');
  }
  if (!same_paths || (a < ae) != (b < be))
    return spill_err_set(e, SPILL_E_INVALID_ARG,
                         "DST holds an import of other source files (%.*s; this run reads %.*s): "
                         "refusing to mix them (remove DST or repeat the original command)",
                         (int)(la > 300 ? 300 : la), ae - la, (int)(lb > 300 ? 300 : lb), be - lb);
  if (!bad) return spill_err_set(e, SPILL_E_INVALID_ARG, "DST's %s differs from this run", JOURNAL);
  /* the path (%XX decoded) and the first field that differs */
  char path[PATH_MAX];
  size_t o = 0, pl = strcspn(bad, ":");
  for (size_t k = 0; k < pl && o + 1 < sizeof path; k++) {
    unsigned v;
    if (bad[k] == '%' && k + 2 < pl && sscanf(bad + k + 1, "%2x", &v) == 1) {
      path[o++] = (char)v;
      k += 2;
    } else {
      path[o++] = bad[k];
    }
  }
  path[o] = 0;
  const char *fa = bad + pl, *fb = bad_b + pl;
  while (*fa == ':' && *fb == ':') {
    size_t na = strcspn(fa + 1, ":, \n"), nb = strcspn(fb + 1, ":, \n");
    if (na != nb || memcmp(fa, fb, na + 1)) {
      return spill_err_set(e, SPILL_E_INVALID_ARG,
                           "source file %s changed since the interrupted import (%s %.*s, now %.*s): "
                           "refusing to mix two versions of the source; remove DST to start again",
                           path, strncmp(fa + 1, "sample=", 7) ? "stat" : "content crc32",
                           (int)na, fa + 1, (int)nb, fb + 1);
    }
    fa += na + 1;
    fb += nb + 1;
  }
  return spill_err_set(e, SPILL_E_INVALID_ARG,
                       "source file %s changed since the interrupted import: remove DST to start again",
                       path);
}

static int journal_open(const char *dst, const char *id, const imp_plan *p, journal *j,
                        int *resume, spill_err *e) {
  memset(j, 0, sizeof *j);
  j->fd = -1;
  const int n_moe = spill_arch_n_moe(&p->arch), E = p->arch.moe.n_experts;
  j->t_done = calloc((size_t)p->n_trunk + 1, 1);
  j->t_crc = calloc((size_t)p->n_trunk + 1, sizeof *j->t_crc);
  j->r_done = calloc((size_t)n_moe + 1, sizeof *j->r_done);
  SPILL_FAIL_IF(e, !j->t_done || !j->t_crc || !j->r_done, SPILL_E_NOMEM, "out of memory");
  for (int i = 0; i < n_moe; i++) {
    j->r_done[i] = calloc((size_t)E, 1);
    SPILL_FAIL_IF(e, !j->r_done[i], SPILL_E_NOMEM, "out of memory");
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dst, JOURNAL);
  *resume = 0;
  struct stat st;
  if (stat(dst, &st) == 0) {
    SPILL_FAIL_IF(e, !S_ISDIR(st.st_mode), SPILL_E_INVALID_ARG, "%s exists and is not a directory", dst);
    if (stat(path, &st) == 0) {
      *resume = 1;
    } else {
      DIR *d = opendir(dst);
      int n = 0;
      for (struct dirent *de; d && (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
      if (d) closedir(d);
      SPILL_FAIL_IF(e, n > 0, SPILL_E_INVALID_ARG,
                    "%s exists, is not empty and holds no %s: not overwriting it", dst, JOURNAL);
    }
  } else {
    SPILL_FAIL_IF(e, mkdir(dst, 0755) != 0, SPILL_E_IO, "%s: cannot create: %s", dst, strerror(errno));
  }
  if (!*resume) {
    /* never through a symlink (docs/RELIABILITY.md, "Opening files") */
    SPILL_TRY(spill_file_open_write(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644, &j->fd, e));
    SPILL_TRY(jappend(j, id, e));
    SPILL_FAIL_IF(e, fsync(j->fd) != 0, SPILL_E_IO, "%s: fsync failed", path);
    return SPILL_OK;
  }
  /* opened for appending first: a journal that is a symlink (another
   * import's, a copied directory's) is refused before it is read or written */
  SPILL_TRY(spill_file_open_write(path, O_WRONLY | O_APPEND, 0, &j->fd, e));
  char *txt = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(path, 1u << 30, &txt, &len, e));
  const char *nl = memchr(txt, '\n', len);
  if (!nl || (size_t)(nl - txt + 1) != strlen(id) || memcmp(txt, id, strlen(id))) {
    int rc = nl ? identity_diff(txt, id, e)
                : spill_err_set(e, SPILL_E_INVALID_ARG, "%s: no identity line", path);
    free(txt);
    return rc;
  }
  /* complete lines only: the last one may be torn */
  for (const char *l = nl + 1; l < txt + len;) {
    const char *end = memchr(l, '\n', (size_t)(txt + len - l));
    if (!end) break;
    int a, b;
    unsigned c;
    if (sscanf(l, "T %d %x", &a, &c) == 2 && a >= 0 && a < p->n_trunk) {
      j->t_done[a] = 1;
      j->t_crc[a] = c;
    } else if (sscanf(l, "R %d %d", &a, &b) == 2 && a >= p->arch.n_dense_layers &&
               a < p->arch.n_layers && b >= 0 && b < E) {
      j->r_done[a - p->arch.n_dense_layers][b] = 1;
    } else if (!strncmp(l, "done", 4)) {
      j->done = 1;
    }
    l = end + 1;
  }
  free(txt);
  /* a torn last line: terminate it so the next entry starts on its own line */
  SPILL_TRY(jappend(j, "\n", e));
  return SPILL_OK;
}

/* ---- the run ---- */

/* --experts keep: every section keeps its source's numbers. Each (layer,
 * section) has one dtype (a GGUF's stacked tensor; a checkpoint's experts must
 * agree); sections and layers may differ (Q4_K_M mixes Q4_K and Q6_K), which
 * makes a v3 container with per-bank section dtypes (docs/FORMAT.md). The
 * experts.dtype is a q8/q4 one if any section has it (its group is shared),
 * else the first section's. */
static int choose_keep_experts(const imp_src *s, const imp_plan *p, spill_manifest *m,
                               spill_err *e) {
  const int n_moe = spill_arch_n_moe(&p->arch);
  m->banks = calloc((size_t)n_moe, sizeof *m->banks);
  SPILL_FAIL_IF(e, n_moe > 0 && !m->banks, SPILL_E_NOMEM, "import: out of memory");
  m->n_banks = n_moe;
  int have = 0;
  for (int l = 0; l < n_moe; l++)
    for (int k = 0; k < SPILL_SEC_COUNT; k++)
      for (int x = 0; x < (s->is_gguf ? 1 : p->arch.moe.n_experts); x++) {
        const spill_src_tensor *t = s->is_gguf ? p->moe[l].stacked[k] : p->moe[l].per[k][x];
        spill_dtype dt;
        uint32_t g;
        /* compressed-tensors MXFP4 reads as ggml MXFP4 (the repack in read_section) */
        const spill_src_dtype sd = !s->is_gguf && p->moe[l].mx_scale[k] ? SPILL_SRC_MXFP4 : t->dtype;
        SPILL_FAIL_IF(e, keep_dtype(sd, &dt, &g) != 0, SPILL_E_UNSUPPORTED,
                      "expert tensor %s: source type %s has no container format with the same "
                      "numbers; name a target (--experts q8|q4|rvq3)",
                      t->name, spill_src_dtype_traits(t->dtype)->name);
        SPILL_FAIL_IF(e, x > 0 && dt != m->banks[l].sect_dtype[k], SPILL_E_UNSUPPORTED,
                      "experts of one layer mix source types (%s is %s, expert 0 maps to %s); "
                      "name a target (--experts q8|q4|rvq3)", t->name,
                      spill_src_dtype_traits(sd)->name,
                      spill_dtype_name(m->banks[l].sect_dtype[k]));
        m->banks[l].sect_dtype[k] = dt;
        if (!have || (g && !m->expert_group)) {
          m->expert_dtype = dt;
          m->expert_group = g;
          have = 1;
        }
      }
  for (int l = 0; l < n_moe; l++)
    for (int k = 0; k < SPILL_SEC_COUNT; k++)
      if (m->banks[l].sect_dtype[k] != m->expert_dtype) m->sect_mixed = 1;
  return SPILL_OK;
}

/* --experts rvq3: the records and, per MoE layer, the three f32 (768, 8)
 * codebook tensors the format requires (appended to the trunk table; the
 * caller allocated room for them). */
static int choose_rvq3_experts(const imp_plan *p, spill_manifest *m, spill_err *e) {
  static const char *const mats[SPILL_SEC_COUNT] = {"gate", "up", "down"};
  const int d_in = p->arch.moe.d_latent > 0 ? p->arch.moe.d_latent : p->arch.d_model;
  SPILL_FAIL_IF(e, d_in % SPILL_RVQ_DIM || p->arch.moe.d_expert % SPILL_RVQ_DIM,
                SPILL_E_UNSUPPORTED, "--experts rvq3: d_in %d / d_expert %d not multiples of %d",
                d_in, p->arch.moe.d_expert, SPILL_RVQ_DIM);
  m->expert_dtype = SPILL_DT_RVQ3;
  m->expert_group = 0;
  for (int l = p->arch.n_dense_layers; l < p->arch.n_layers; l++)
    for (int k = 0; k < SPILL_SEC_COUNT; k++) {
      spill_tensor_info *ti = &m->tensors[m->n_tensors++];
      memset(ti, 0, sizeof *ti);
      snprintf(ti->name, sizeof ti->name, "blk.%d.ffn_%s_exps.codebook", l, mats[k]);
      ti->dtype = SPILL_DT_F32;
      ti->ndim = 2;
      ti->shape[0] = SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
      ti->shape[1] = SPILL_RVQ_DIM;
    }
  return SPILL_OK;
}

static int choose(const spill_import_request *r, const imp_src *s, const imp_plan *p,
                  uint32_t group, spill_manifest *m, spill_err *e) {
  for (int i = 0; i < p->n_trunk; i++) {
    const imp_trunk *t = &p->trunk[i];
    spill_tensor_info *ti = &m->tensors[i];
    snprintf(ti->name, sizeof ti->name, "%s", t->name);
    ti->ndim = t->ndim;
    ti->shape[0] = t->rows;
    ti->shape[1] = t->ndim == 1 ? 1 : t->cols;
    if (t->ndim == 1 || t->f32) {
      ti->dtype = SPILL_DT_F32;
      SPILL_FAIL_IF(e, t->src->dtype == SPILL_SRC_OTHER, SPILL_E_UNSUPPORTED,
                    "tensor %s: source type %s is not supported", t->src->name, t->src->other_name);
      continue;
    }
    if (r->trunk == SPILL_IMPORT_KEEP && t->v_b) {
      ti->dtype = SPILL_DT_F32; /* k_b transposed: the source's values, exactly, as f32 */
      ti->group = 0;
    } else if (r->trunk == SPILL_IMPORT_KEEP) {
      SPILL_FAIL_IF(e, t->scale || keep_dtype(t->src->dtype, &ti->dtype, &ti->group) != 0,
                    SPILL_E_UNSUPPORTED,
                    "tensor %s: source type %s has no container format with the same numbers; "
                    "name a target (--trunk q8|q4)",
                    t->src->name, t->scale ? "F8_E4M3" : spill_src_dtype_traits(t->src->dtype)->name);
    } else {
      ti->dtype = r->trunk == SPILL_IMPORT_Q8 ? SPILL_DT_Q8 : SPILL_DT_Q4;
      ti->group = group;
      SPILL_FAIL_IF(e, t->cols % group, SPILL_E_UNSUPPORTED,
                    "tensor %s: %llu columns are not a multiple of --group %u", t->name,
                    (unsigned long long)t->cols, group);
    }
    SPILL_FAIL_IF(e, t->src->dtype == SPILL_SRC_OTHER, SPILL_E_UNSUPPORTED,
                  "tensor %s: source type %s is not supported", t->src->name, t->src->other_name);
  }
  if (r->experts == SPILL_IMPORT_KEEP) return choose_keep_experts(s, p, m, e);
  if (r->experts == SPILL_IMPORT_RVQ3) return choose_rvq3_experts(p, m, e);
  {
    m->expert_dtype = r->experts == SPILL_IMPORT_Q8 ? SPILL_DT_Q8 : SPILL_DT_Q4;
    m->expert_group = group;
    SPILL_FAIL_IF(e, p->arch.d_model % (int)group || p->arch.moe.d_expert % (int)group,
                  SPILL_E_UNSUPPORTED, "experts: d_model %d / d_expert %d not multiples of --group %u",
                  p->arch.d_model, p->arch.moe.d_expert, group);
  }
  return SPILL_OK;
}

typedef struct run {
  const spill_import_request *r;
  imp_src s;
  imp_plan p;
  spill_manifest m;
  spill_writer *w;
  journal j;
  conv cv;
  imp_rvq_sample *rvq;                                           /* --experts rvq3 */
  float rvq_cb[SPILL_SEC_COUNT][SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES * SPILL_RVQ_DIM];
  float *rvq_f32;                                                /* one expert section */
  size_t rvq_f32_cap;
  uint8_t *out;
  size_t out_cap;
  spill_import_progress pr;
  spill_import_summary *sum;
  double *exp_num, *exp_den; /* (n_moe * 3) */
  spill_import_check_fn check; /* the tokenizer DST carries, before the manifest; or NULL */
} run;

static void note_err(run *R, const char *name, double num, double den) {
  spill_import_summary *s = R->sum;
  spill_import_tensor_error *ne = realloc(s->errors, ((size_t)s->n_errors + 1) * sizeof *ne);
  if (!ne) return;
  s->errors = ne;
  spill_import_tensor_error *x = &s->errors[s->n_errors++];
  snprintf(x->name, sizeof x->name, "%s", name);
  x->rel_err = den > 0 ? sqrt(num / den) : 0.0;
  if (x->rel_err > s->max_rel_err) s->max_rel_err = x->rel_err;
}

static void progress(run *R, const char *unit, uint64_t bytes, int adopted) {
  R->pr.bytes_done += bytes;
  R->pr.units_done++;
  R->pr.units_adopted += adopted;
  R->pr.unit = unit;
  if (R->r->progress) R->r->progress(R->r->user, &R->pr);
}

/* Dequantises a whole source tensor of n rows of `cols` values to f32. */
static int read_f32(run *R, const spill_src_tensor *st, uint64_t nrows, uint64_t cols, float **out,
                    spill_err *e) {
  uint64_t rb;
  SPILL_TRY(spill_src_bytes(st->dtype, cols, &rb, e));
  SPILL_FAIL_IF(e, rb * nrows != st->bytes, SPILL_E_FORMAT, "tensor %s: %llu bytes, expected %llu",
                st->name, (unsigned long long)st->bytes, (unsigned long long)(rb * nrows));
  SPILL_TRY(grow((void **)&R->cv.src, &R->cv.src_cap, (size_t)st->bytes, e));
  SPILL_TRY(imp_src_read(&R->s, st, 0, R->cv.src, (size_t)st->bytes, e));
  *out = malloc((size_t)(nrows * cols) * sizeof(float) + 1);
  SPILL_FAIL_IF(e, !*out, SPILL_E_NOMEM, "out of memory");
  for (uint64_t r = 0; r < nrows; r++) {
    int rc = spill_src_dequant(st->dtype, R->cv.src + r * rb, cols, *out + r * cols, e);
    if (rc == SPILL_OK) rc = check_finite(*out + r * cols, cols, r, st->name, e);
    if (rc != SPILL_OK) {
      free(*out);
      *out = NULL;
      return rc;
    }
  }
  return SPILL_OK;
}

/* GGUF deepseek2 attn_k_b (H, dc, dn) + attn_v_b (H, dv, dc) -> attn_kv_b
 * rows [head j: dn rows Wuk_j = k_b[j]^T, dv rows Wuv_j = v_b[j]], each of dc
 * values, then into the container dtype (f32 keeps every value exactly). */
static int compose_kv_b(run *R, const imp_trunk *t, const spill_tensor_info *ti, double *num,
                        double *den, spill_err *e) {
  const uint64_t H = t->kvb_heads, dn = t->kvb_dn, dv = t->kvb_dv, dc = t->cols;
  float *kb = NULL, *vb = NULL, *kv = NULL;
  int rc = read_f32(R, t->src, H * dc, dn, &kb, e);
  if (rc == SPILL_OK) rc = read_f32(R, t->v_b, H * dv, dc, &vb, e);
  if (rc == SPILL_OK) {
    kv = malloc((size_t)(H * (dn + dv) * dc) * sizeof(float) + 1);
    if (!kv) rc = spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  }
  if (rc == SPILL_OK) {
    for (uint64_t j = 0; j < H; j++) {
      float *o = kv + j * (dn + dv) * dc;
      for (uint64_t i = 0; i < dn; i++)
        for (uint64_t c = 0; c < dc; c++) o[i * dc + c] = kb[(j * dc + c) * dn + i];
      memcpy(o + dn * dc, vb + j * dv * dc, (size_t)(dv * dc) * sizeof(float));
    }
    /* the f32 rows are a source of f32 values for convert */
    uint8_t *save = R->cv.src;
    size_t save_cap = R->cv.src_cap;
    R->cv.src = (uint8_t *)kv;
    R->cv.src_cap = (size_t)(H * (dn + dv) * dc) * sizeof(float);
    rc = convert(&R->cv, SPILL_SRC_F32, NULL, R->s.fp8_block, t->rows, t->cols, NULL, ti->dtype,
                 ti->group, R->out, num, den, t->name, e);
    R->cv.src = save;
    R->cv.src_cap = save_cap;
  }
  free(kb);
  free(vb);
  free(kv);
  return rc;
}

/* HF gpt-oss gate_up_proj_bias (E, 2F): columns col_first, col_first +
 * col_stride, ... as the (rows, cols) tensor, exactly (f32 values moved). */
static int take_columns(run *R, const imp_trunk *t, const spill_tensor_info *ti, double *num, double *den,
                        spill_err *e) {
  const uint64_t st = t->col_stride, wide = t->cols * st;
  float *all = NULL, *sel = NULL;
  int rc = read_f32(R, t->src, t->rows, wide, &all, e);
  if (rc == SPILL_OK) {
    sel = malloc((size_t)(t->rows * t->cols) * sizeof(float) + 1);
    if (!sel) rc = spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  }
  if (rc == SPILL_OK) {
    for (uint64_t r = 0; r < t->rows; r++)
      for (uint64_t c = 0; c < t->cols; c++) sel[r * t->cols + c] = all[r * wide + c * st + t->col_first];
    uint8_t *save = R->cv.src;
    size_t save_cap = R->cv.src_cap;
    R->cv.src = (uint8_t *)sel;
    R->cv.src_cap = (size_t)(t->rows * t->cols) * sizeof(float);
    rc = convert(&R->cv, SPILL_SRC_F32, NULL, R->s.fp8_block, t->rows, t->cols, NULL, ti->dtype, ti->group,
                 R->out, num, den, t->name, e);
    R->cv.src = save;
    R->cv.src_cap = save_cap;
  }
  free(all);
  free(sel);
  return rc;
}

/* GGUF kimi-linear ssm_a holds A = -exp(A_log) (llama.cpp's converter):
 * the container's attn_a_log gets log(-A), so that the engine's -exp(A_log)
 * gives A back (to 1-2 ulp); A must be finite and < 0. */
static int log_neg_f32(const imp_trunk *t, uint8_t *out, spill_err *e) {
  for (uint64_t i = 0; i < t->rows; i++) {
    float a;
    memcpy(&a, out + i * sizeof a, sizeof a);
    SPILL_FAIL_IF(e, !(a < 0.0f) || !isfinite(a), SPILL_E_FORMAT,
                  "tensor %s: value %g at %llu is not finite and negative (llama.cpp stores A = -exp(A_log))",
                  t->src->name, (double)a, (unsigned long long)i);
    a = logf(-a);
    memcpy(out + i * sizeof a, &a, sizeof a);
  }
  return SPILL_OK;
}

/* HF Qwen3.5 out_proj: the columns of each source row (f32/f16/bf16 in
 * R->cv.src, moved exactly) from the grouped v-head order to the tiled one
 * (src_row's mapping, applied to columns). */
static int vh_permute_cols(run *R, const imp_trunk *t, spill_err *e) {
  const spill_src_dtype sd = t->src->dtype;
  SPILL_FAIL_IF(e, sd != SPILL_SRC_F32 && sd != SPILL_SRC_F16 && sd != SPILL_SRC_BF16, SPILL_E_UNSUPPORTED,
                "tensor %s: its columns are reordered (v heads), which needs f32, f16 or bf16", t->src->name);
  const size_t es = sd == SPILL_SRC_F32 ? 4 : 2, rb = (size_t)t->cols * es;
  uint8_t *tmp = malloc(rb + 1);
  SPILL_FAIL_IF(e, !tmp, SPILL_E_NOMEM, "out of memory");
  imp_trunk as_rows = *t; /* the column map is src_row's row map */
  as_rows.vh_cols = 0;
  for (uint64_t r = 0; r < t->rows; r++) {
    uint8_t *row = R->cv.src + r * rb;
    memcpy(tmp, row, rb);
    for (uint64_t c = 0; c < t->cols; c++) memcpy(row + c * es, tmp + src_row(c, t->cols, &as_rows) * es, es);
  }
  free(tmp);
  return SPILL_OK;
}

/* HF Qwen3.5: the f32 vector in R->out plus 1 (zero-centred norms) or as
 * -exp(A_log) (in double, rounded once to f32). */
static void vec_f32_map(run *R, const imp_trunk *t) {
  for (uint64_t i = 0; i < t->rows; i++) {
    float a;
    memcpy(&a, R->out + i * sizeof a, sizeof a);
    a = t->add_one ? a + 1.0f : (float)-exp((double)a);
    memcpy(R->out + i * sizeof a, &a, sizeof a);
  }
}

/* HF Kimi K3 AttnRes: the f32 vector in R->out times t->mul elementwise in
 * f32 (llama.cpp's converter fuses res_norm * res_proj the same way). */
static int mul_f32(run *R, const imp_trunk *t, spill_err *e) {
  float *m = NULL;
  SPILL_FAIL_IF(e, spill_src_numel(t->mul) != t->rows, SPILL_E_FORMAT, "tensor %s: %llu values, expected %llu",
                t->mul->name, (unsigned long long)spill_src_numel(t->mul), (unsigned long long)t->rows);
  SPILL_TRY(read_f32(R, t->mul, 1, t->rows, &m, e));
  for (uint64_t i = 0; i < t->rows; i++) {
    float a;
    memcpy(&a, R->out + i * sizeof a, sizeof a);
    a *= m[i];
    memcpy(R->out + i * sizeof a, &a, sizeof a);
  }
  free(m);
  return SPILL_OK;
}

static int do_trunk(run *R, int i, spill_err *e) {
  const imp_trunk *t = &R->p.trunk[i];
  const spill_tensor_info *ti = &spill_writer_manifest(R->w)->tensors[i];
  SPILL_TRY(grow((void **)&R->out, &R->out_cap, (size_t)ti->bytes, e));
  if (R->j.t_done[i]) {
    spill_err ig = {0};
    if (spill_writer_adopt_tensor(R->w, t->name, R->j.t_crc[i], R->out, R->out_cap, &ig) == SPILL_OK) {
      progress(R, t->name, t->src->bytes, 1);
      return SPILL_OK;
    }
    SPILL_FAIL_IF(e, ig.code != SPILL_E_CHECKSUM, ig.code, "%s", ig.msg);
  }
  double num = 0, den = 0;
  if (t->v_b) {
    SPILL_TRY(compose_kv_b(R, t, ti, &num, &den, e));
  } else if (t->col_stride) {
    SPILL_TRY(take_columns(R, t, ti, &num, &den, e));
  } else {
    SPILL_TRY(grow((void **)&R->cv.src, &R->cv.src_cap, (size_t)t->src->bytes, e));
    SPILL_TRY(imp_src_read(&R->s, t->src, 0, R->cv.src, (size_t)t->src->bytes, e));
    if (t->vh_hd && t->vh_cols) SPILL_TRY(vh_permute_cols(R, t, e));
    if (t->scale) SPILL_TRY(read_scale(&R->s, t->scale, t->rows, t->cols, &R->cv, e));
    SPILL_TRY(convert(&R->cv, t->src->dtype, t->scale ? R->cv.scale : NULL, R->s.fp8_block, t->rows,
                      t->cols, t, ti->dtype, ti->group, R->out, &num, &den, t->src->name, e));
  }
  if (t->log_neg) SPILL_TRY(log_neg_f32(t, R->out, e));
  if (t->add_one || t->neg_exp) {
    SPILL_FAIL_IF(e, ti->dtype != SPILL_DT_F32 || t->ndim != 1, SPILL_E_INTERNAL, "%s: not an f32 vector", t->name);
    vec_f32_map(R, t);
  }
  if (t->mul) SPILL_TRY(mul_f32(R, t, e));
  if (ti->dtype == SPILL_DT_Q8 || ti->dtype == SPILL_DT_Q4) {
    spill_dtype kd;
    uint32_t kg;
    if (!(keep_dtype(t->src->dtype, &kd, &kg) == 0 && kd == ti->dtype && kg == ti->group))
      note_err(R, t->name, num, den);
  }
  SPILL_TRY(spill_writer_tensor(R->w, t->name, R->out, (size_t)ti->bytes, e));
  char line[64];
  snprintf(line, sizeof line, "T %d %08x\n", i, spill_crc32(0, R->out, (size_t)ti->bytes));
  SPILL_TRY(jappend(&R->j, line, e));
  progress(R, t->name, t->src->bytes, 0);
  return SPILL_OK;
}

/* The dtype of the bytes read_section leaves in R->cv.src for section k of
 * MoE layer bi (source tensor t): ggml MXFP4 for compressed-tensors experts. */
static spill_src_dtype sect_src_dtype(const run *R, int bi, int k, const spill_src_tensor *t) {
  return !R->s.is_gguf && R->p.moe[bi].mx_scale[k] ? SPILL_SRC_MXFP4 : t->dtype;
}

/* Source bytes of expert x's section k of MoE layer bi (packed + scale for
 * compressed-tensors MXFP4). */
static uint64_t sect_src_bytes(const run *R, int bi, int k, int x) {
  const imp_moe_layer *ml = &R->p.moe[bi];
  if (R->s.is_gguf) return ml->stacked[k]->bytes / (uint64_t)R->p.arch.moe.n_experts;
  if (ml->fused_rows[k]) /* the section's rows of expert x */
    return ml->per[k][x]->bytes / ((uint64_t)R->p.arch.moe.n_experts * ml->fused_rows[k]) *
           (uint64_t)(k == SPILL_SEC_DOWN ? R->p.arch.d_model : R->p.arch.moe.d_expert);
  if (ml->oss_stride[k]) /* one expert's share of the stacked blocks and scales */
    return (ml->per[k][x]->bytes + ml->mx_scale[k][x]->bytes) / (uint64_t)R->p.arch.moe.n_experts;
  return ml->per[k][x]->bytes + (ml->mx_scale[k] ? ml->mx_scale[k][x]->bytes : 0);
}

/* Reads expert x's section k of MoE layer bi into R->cv.src (and its FP8
 * scale grid into R->cv.scale); *sc is the scale tensor or NULL. */
static int read_section(run *R, int bi, int k, int x, const spill_src_tensor **tp,
                        const spill_src_tensor **sc, char *what, size_t wn, spill_err *e) {
  const spill_manifest *wm = spill_writer_manifest(R->w);
  const imp_moe_layer *ml = &R->p.moe[bi];
  const spill_section_info *sec = &wm->sect[k];
  const spill_src_tensor *t = R->s.is_gguf ? ml->stacked[k] : ml->per[k][x];
  uint64_t n = R->s.is_gguf ? t->bytes / (uint64_t)R->p.arch.moe.n_experts : t->bytes;
  uint64_t off = R->s.is_gguf ? n * (uint64_t)x : 0;
  *tp = t;
  if (!R->s.is_gguf && ml->oss_stride[k]) { /* HF gpt-oss MXFP4: rows of expert x -> ggml blocks */
    const spill_src_tensor *ms = ml->mx_scale[k][x];
    const uint64_t nb = sec->cols / 32, st = ml->oss_stride[k], E = (uint64_t)R->p.arch.moe.n_experts;
    const uint64_t eb = t->bytes / E, es = ms->bytes / E; /* expert x's blocks and scales */
    SPILL_TRY(grow((void **)&R->cv.ct, &R->cv.ct_cap, (size_t)(2 * (eb + es)), e));
    uint8_t *raw = R->cv.ct, *pk = raw + eb + es; /* pk: the section's rows, packed [rows, cols/2] + scales */
    SPILL_TRY(imp_src_read(&R->s, t, eb * (uint64_t)x, raw, (size_t)eb, e));
    SPILL_TRY(imp_src_read(&R->s, ms, es * (uint64_t)x, raw + eb, (size_t)es, e));
    uint8_t *pks = pk + sec->rows * nb * 16;
    for (uint64_t r = 0; r < sec->rows; r++) {
      const uint64_t sr = r * st + ml->oss_first[k];
      memcpy(pk + r * nb * 16, raw + sr * nb * 16, (size_t)(nb * 16));
      memcpy(pks + r * nb, raw + eb + sr * nb, (size_t)nb);
    }
    SPILL_TRY(grow((void **)&R->cv.src, &R->cv.src_cap, (size_t)(sec->rows * nb * 17), e));
    snprintf(what, wn, "%s expert %d", ms->name, x);
    SPILL_TRY(spill_src_mxfp4_from_ct(pk, pks, sec->rows, sec->cols, R->cv.src, what, e));
    *sc = NULL;
    snprintf(what, wn, "%s expert %d", t->name, x);
    return SPILL_OK;
  }
  if (!R->s.is_gguf && ml->fused_rows[k]) { /* HF fused experts: expert x's rows of the stacked tensor */
    const uint64_t E = (uint64_t)R->p.arch.moe.n_experts, rb = t->bytes / (E * ml->fused_rows[k]);
    n = sec->rows * rb;
    off = ((uint64_t)x * ml->fused_rows[k] + ml->fused_first[k]) * rb;
    SPILL_TRY(grow((void **)&R->cv.src, &R->cv.src_cap, (size_t)n, e));
    SPILL_TRY(imp_src_read(&R->s, t, off, R->cv.src, (size_t)n, e));
    *sc = NULL;
    snprintf(what, wn, "%s expert %d", t->name, x);
    return SPILL_OK;
  }
  if (!R->s.is_gguf && ml->mx_scale[k]) { /* compressed-tensors MXFP4 -> ggml blocks */
    const spill_src_tensor *ms = ml->mx_scale[k][x];
    const uint64_t blk = sec->rows * (sec->cols / 32) * 17;
    SPILL_TRY(grow((void **)&R->cv.ct, &R->cv.ct_cap, (size_t)(t->bytes + ms->bytes), e));
    SPILL_TRY(imp_src_read(&R->s, t, 0, R->cv.ct, (size_t)t->bytes, e));
    SPILL_TRY(imp_src_read(&R->s, ms, 0, R->cv.ct + t->bytes, (size_t)ms->bytes, e));
    SPILL_TRY(grow((void **)&R->cv.src, &R->cv.src_cap, (size_t)blk, e));
    SPILL_TRY(spill_src_mxfp4_from_ct(R->cv.ct, R->cv.ct + t->bytes, sec->rows, sec->cols, R->cv.src, ms->name, e));
    *sc = NULL;
    snprintf(what, wn, "%s", t->name);
    return SPILL_OK;
  }
  SPILL_TRY(grow((void **)&R->cv.src, &R->cv.src_cap, (size_t)n, e));
  SPILL_TRY(imp_src_read(&R->s, t, off, R->cv.src, (size_t)n, e));
  *sc = R->s.is_gguf ? NULL : ml->scale[k][x];
  if (*sc) {
    SPILL_FAIL_IF(e, !R->s.fp8_block[0], SPILL_E_FORMAT,
                  "tensor %s is FP8 but config.json has no weight_block_size", t->name);
    SPILL_TRY(read_scale(&R->s, *sc, sec->rows, sec->cols, &R->cv, e));
  }
  if (R->s.is_gguf) snprintf(what, wn, "%s expert %d", t->name, x); /* rows within the expert */
  else snprintf(what, wn, "%s", t->name);
  return SPILL_OK;
}

/* --experts rvq3, MoE layer bi: trains the gate, up and down codebooks from
 * a seeded sample of every expert's rows (one expert section in f32 at a
 * time) and writes them as trunk tensors. Deterministic, so a resumed import
 * re-trains the same codebooks for the records it still has to encode. */
static int rvq_layer(run *R, int bi, spill_err *e) {
  static const char *const mats[SPILL_SEC_COUNT] = {"gate", "up", "down"};
  const spill_manifest *wm = spill_writer_manifest(R->w);
  const int layer = R->p.arch.n_dense_layers + bi, E = R->p.arch.moe.n_experts;
  if (!R->rvq) R->rvq = malloc(sizeof *R->rvq);
  SPILL_FAIL_IF(e, !R->rvq, SPILL_E_NOMEM, "rvq3: out of memory");
  for (int k = 0; k < SPILL_SEC_COUNT; k++) {
    const spill_section_info *sec = &wm->sect[k];
    const size_t fbytes = (size_t)sec->rows * sec->cols * sizeof(float);
    SPILL_TRY(grow((void **)&R->rvq_f32, &R->rvq_f32_cap, fbytes, e));
    imp_rvq_sample_init(R->rvq, 0x5350494C4C525651ull ^ ((uint64_t)layer * 3 + (uint64_t)k));
    for (int x = 0; x < E; x++) {
      const spill_src_tensor *t, *sc;
      double ig0 = 0, ig1 = 0;
      char what[SPILL_NAME_MAX + 32];
      SPILL_TRY(read_section(R, bi, k, x, &t, &sc, what, sizeof what, e));
      SPILL_TRY(convert(&R->cv, sect_src_dtype(R, bi, k, t), sc ? R->cv.scale : NULL, R->s.fp8_block, sec->rows,
                        sec->cols, 0, SPILL_DT_F32, 0, (uint8_t *)R->rvq_f32, &ig0, &ig1, what, e));
      for (uint32_t r = 0; r < sec->rows; r++)
        imp_rvq_sample_row(R->rvq, R->rvq_f32 + (size_t)r * sec->cols, sec->cols);
    }
    SPILL_TRY(imp_rvq_train(R->rvq, R->rvq_cb[k], R->cv.threads, e));
    char name[SPILL_NAME_MAX];
    snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.codebook", layer, mats[k]);
    SPILL_TRY(spill_writer_tensor(R->w, name, R->rvq_cb[k], sizeof R->rvq_cb[k], e));
  }
  return SPILL_OK;
}

static int do_record(run *R, int bi, int x, spill_err *e) {
  const spill_manifest *wm = spill_writer_manifest(R->w);
  const int layer = R->p.arch.n_dense_layers + bi;
  char unit[64];
  snprintf(unit, sizeof unit, "blk.%d expert %d", layer, x);
  uint64_t sbytes = 0;
  for (int k = 0; k < SPILL_SEC_COUNT; k++) sbytes += sect_src_bytes(R, bi, k, x);
  SPILL_TRY(grow((void **)&R->out, &R->out_cap, (size_t)wm->record_bytes, e));
  if (R->j.r_done[bi][x]) {
    spill_err ig = {0};
    if (spill_writer_adopt_record(R->w, layer, (uint32_t)x, R->out, &ig) == SPILL_OK) {
      progress(R, unit, sbytes, 1);
      return SPILL_OK;
    }
    SPILL_FAIL_IF(e, ig.code != SPILL_E_CHECKSUM && ig.code != SPILL_E_FORMAT, ig.code, "%s", ig.msg);
  }
  memset(R->out, 0, (size_t)wm->record_bytes);
  for (int k = 0; k < SPILL_SEC_COUNT; k++) {
    const spill_section_info *sec = &wm->sect[k];
    const spill_src_tensor *t, *sc;
    char what[SPILL_NAME_MAX + 32];
    SPILL_TRY(read_section(R, bi, k, x, &t, &sc, what, sizeof what, e));
    R->cv.rvq_cb = wm->expert_dtype == SPILL_DT_RVQ3 ? R->rvq_cb[k] : NULL;
    SPILL_TRY(convert(&R->cv, sect_src_dtype(R, bi, k, t), sc ? R->cv.scale : NULL, R->s.fp8_block, sec->rows,
                      sec->cols, NULL, spill_manifest_sect_dtype(wm, layer, k), wm->expert_group,
                      R->out + (sec->offset - SPILL_RECORD_HEADER_BYTES),
                      &R->exp_num[bi * 3 + k], &R->exp_den[bi * 3 + k], what, e));
  }
  SPILL_TRY(spill_writer_record(R->w, layer, (uint32_t)x, R->out, e));
  char line[64];
  snprintf(line, sizeof line, "R %d %d\n", layer, x);
  SPILL_TRY(jappend(&R->j, line, e));
  progress(R, unit, sbytes, 0);
  return SPILL_OK;
}

/* The checkpoint's tokenizer files travel with the container (the engine
 * loads them from the model directory: engine/tok, docs/TOKENIZER.md):
 * tokenizer.json, tokenizer_config.json, tiktoken.model, chat_template.jinja beside an HF
 * checkpoint are copied (atomically) into dst. GGUF sources: their
 * tokenizer.* metadata becomes dst/tokenizer.gguf (import_tok.c). */
static int copy_tokenizer_files(const char *src, const char *dst, spill_err *e) {
  char dir[PATH_MAX];
  struct stat st;
  if (stat(src, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(dir, sizeof dir, "%s", src);
  } else {
    snprintf(dir, sizeof dir, "%s", src);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
  }
  static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "tiktoken.model",
                                      "chat_template.jinja"};
  /* read by the one reader (a FIFO is refused by kind), written as a whole
   * file: an O_EXCL temp, fsync, rename (a symlink at DST/NAME is replaced,
   * never written through; docs/RELIABILITY.md, "Opening files") */
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char from[PATH_MAX + 64], to[PATH_MAX + 64];
    SPILL_TRY(spill_path_fmt(from, sizeof from, e, "%s/%s", dir, names[i]));
    SPILL_TRY(spill_path_fmt(to, sizeof to, e, "%s/%s", dst, names[i]));
    if (stat(from, &st) != 0 && errno == ENOENT) continue;
    char *b = NULL;
    size_t n = 0;
    SPILL_TRY(spill_read_file(from, (size_t)1 << 31, &b, &n, e));
    int rc = spill_write_file_atomic(to, b, n, e);
    free(b);
    SPILL_TRY(rc);
  }
  return SPILL_OK;
}

static int run_impl(run *R, spill_err *e) {
  const spill_import_request *r = R->r;
  SPILL_FAIL_IF(e, !r->src || !r->dst, SPILL_E_INVALID_ARG, "import: SRC and DST are required");
  SPILL_FAIL_IF(e, r->trunk == SPILL_IMPORT_RVQ3, SPILL_E_INVALID_ARG,
                "--trunk rvq3: rvq3 is for experts only (trunk: keep, q8, q4)");
  SPILL_FAIL_IF(e, (unsigned)r->experts > SPILL_IMPORT_RVQ3 || (unsigned)r->trunk > SPILL_IMPORT_RVQ3,
                SPILL_E_INVALID_ARG, "import: bad target");
  uint32_t group = r->group ? r->group : 32;
  const int requant = r->experts != SPILL_IMPORT_KEEP || r->trunk != SPILL_IMPORT_KEEP;
  SPILL_FAIL_IF(e, group > 1048576 || (group % 2 && (r->experts == SPILL_IMPORT_Q4 || r->trunk == SPILL_IMPORT_Q4)),
                SPILL_E_INVALID_ARG, "--group %u: expected [1, 1048576], even for q4", group);
  SPILL_FAIL_IF(e, r->group && !requant, SPILL_E_INVALID_ARG,
                "--group applies to q8/q4 requantisation; with keep the source decides (GGUF Q8_0/Q4_0: 32)");
  SPILL_FAIL_IF(e, r->threads < 0 || r->threads > 64, SPILL_E_INVALID_ARG,
                "--threads %d: expected 0 (every CPU) to 64", r->threads);
  R->cv.threads = r->threads;
  const uint64_t t0 = spill_clock_ns();
  SPILL_TRY(imp_src_open(&R->s, r->src, e));
  SPILL_TRY(imp_plan_build(&R->s, &R->p, e));
  spill_import_summary *sum = R->sum;
  snprintf(sum->arch, sizeof sum->arch, "%s", R->s.arch_name);
  snprintf(sum->source, sizeof sum->source, "%s", R->s.is_gguf ? "gguf" : "safetensors");
  snprintf(sum->skipped, sizeof sum->skipped, "%s", R->p.skipped);
  /* the manifest the writer lays out */
  spill_manifest *m = &R->m;
  m->arch = R->p.arch;
  const char *base = strrchr(r->src, '/');
  base = base && base[1] ? base + 1 : r->src;
  snprintf(m->name, sizeof m->name, "%.63s", base);
  for (char *c = m->name; *c; c++)
    if (*c < 0x20 || *c > 0x7e || *c == '"' || *c == '\\') *c = '_';
  if (!m->name[0]) snprintf(m->name, sizeof m->name, "import");
  m->n_tensors = R->p.n_trunk;
  m->tensors = calloc((size_t)m->n_tensors + 3 * (size_t)spill_arch_n_moe(&R->p.arch) + 1,
                      sizeof *m->tensors);
  SPILL_FAIL_IF(e, !m->tensors, SPILL_E_NOMEM, "out of memory");
  SPILL_TRY(choose(r, &R->s, &R->p, group, m, e));
  char gen[512];
  snprintf(gen, sizeof gen,
           "{\"tool\":\"spill import\",\"source_format\":\"%s\",\"source_arch\":\"%s\",\"experts\":\"%s\","
           "\"trunk\":\"%s\",\"group\":%u}",
           sum->source, sum->arch, target_name(r->experts), target_name(r->trunk), requant ? group : 0);
  m->generator_json = strdup(gen);
  SPILL_FAIL_IF(e, !m->generator_json, SPILL_E_NOMEM, "out of memory");
  char *id = NULL;
  SPILL_TRY(identity(r, &R->s, requant ? group : 0, &id, e));
  int resume = 0;
  int rc = journal_open(r->dst, id, &R->p, &R->j, &resume, e);
  free(id);
  SPILL_TRY(rc);
  SPILL_TRY(resume ? spill_writer_open_resume(r->dst, m, &R->w, e) : spill_writer_open(r->dst, m, &R->w, e));
  const int n_moe = spill_arch_n_moe(&R->p.arch), E = R->p.arch.moe.n_experts;
  R->exp_num = calloc((size_t)n_moe * 3 + 1, sizeof(double));
  R->exp_den = calloc((size_t)n_moe * 3 + 1, sizeof(double));
  SPILL_FAIL_IF(e, !R->exp_num || !R->exp_den, SPILL_E_NOMEM, "out of memory");
  R->pr.units_total = R->p.n_trunk + n_moe * E;
  for (int i = 0; i < R->p.n_trunk; i++) R->pr.bytes_total += R->p.trunk[i].src->bytes;
  for (int l = 0; l < n_moe; l++)
    for (int k = 0; k < SPILL_SEC_COUNT; k++)
      for (int x = 0; x < E; x++) R->pr.bytes_total += sect_src_bytes(R, l, k, x);
  for (int i = 0; i < R->p.n_trunk; i++) SPILL_TRY(do_trunk(R, i, e));
  for (int l = 0; l < n_moe; l++) {
    if (m->expert_dtype == SPILL_DT_RVQ3) SPILL_TRY(rvq_layer(R, l, e));
    for (int x = 0; x < E; x++) SPILL_TRY(do_record(R, l, x, e));
  }
  if (m->expert_dtype == SPILL_DT_Q8 || m->expert_dtype == SPILL_DT_Q4 ||
      m->expert_dtype == SPILL_DT_RVQ3) {
    int conv_experts = 0;
    for (int l = 0; l < n_moe; l++)
      for (int k = 0; k < 3; k++) conv_experts |= R->exp_den[l * 3 + k] > 0;
    static const char *const sec[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int l = 0; conv_experts && l < n_moe; l++)
      for (int k = 0; k < 3; k++) {
        char nm[96];
        snprintf(nm, sizeof nm, "blk.%d.%s", R->p.arch.n_dense_layers + l, sec[k]);
        note_err(R, nm, R->exp_num[l * 3 + k], R->exp_den[l * 3 + k]);
      }
  }
  const spill_manifest *wm = spill_writer_manifest(R->w);
  sum->dst_bytes = 0;
  for (int i = 0; i < wm->n_files; i++) sum->dst_bytes += wm->files[i].bytes;
  /* the tokenizer files first, checked as the engine will load them: an
   * unusable tokenizer leaves no manifest (nothing verify calls clean) */
  if (!R->s.is_gguf) SPILL_TRY(copy_tokenizer_files(r->src, r->dst, e));
  else SPILL_TRY(imp_gguf_tokenizer(&R->s, r->dst, e));
  if (R->check) SPILL_TRY(R->check(r->dst, R->p.arch.vocab_size, e));
  spill_writer *w = R->w;
  R->w = NULL;
  SPILL_TRY(spill_writer_finish(w, e));
  SPILL_TRY(jappend(&R->j, "done\n", e));
  (void)fsync(R->j.fd);
  sum->n_tensors = R->p.n_trunk;
  sum->n_records = n_moe * E;
  sum->n_adopted = R->pr.units_adopted;
  if (R->s.n_skipped) { /* Kimi K3's vision tower and projector */
    size_t n = (size_t)snprintf(sum->skipped, sizeof sum->skipped, "%d tensors outside the text model (",
                                R->s.n_skipped);
    for (const char *const *sp = R->s.skip_prefixes; sp && *sp && n < sizeof sum->skipped; sp++)
      n += (size_t)snprintf(sum->skipped + n, sizeof sum->skipped - n, "%s%s*", sp == R->s.skip_prefixes ? "" : ", ",
                            *sp);
    if (n < sizeof sum->skipped) snprintf(sum->skipped + n, sizeof sum->skipped - n, ")");
  }
  sum->src_bytes = R->pr.bytes_total;
  sum->seconds = spill_clock_ms(t0, spill_clock_ns()) / 1000.0;
  return SPILL_OK;
}

int spill_import_run_checked(const spill_import_request *r, spill_import_summary *s,
                             spill_import_check_fn check, spill_err *e) {
  SPILL_FAIL_IF(e, !r || !s, SPILL_E_INVALID_ARG, "import: NULL argument");
  memset(s, 0, sizeof *s);
  run *R = calloc(1, sizeof *R);
  SPILL_FAIL_IF(e, !R, SPILL_E_NOMEM, "out of memory");
  R->r = r;
  R->check = check;
  R->sum = s;
  R->j.fd = -1;
  int rc = run_impl(R, e);
  if (R->w) spill_writer_close_keep(R->w);
  journal_free(&R->j, spill_arch_n_moe(&R->p.arch));
  R->m.arch = R->p.arch;
  spill_manifest_free(&R->m);
  imp_plan_free(&R->p);
  imp_src_close(&R->s);
  free(R->cv.src);
  free(R->cv.row);
  free(R->cv.mat);
  free(R->cv.scale);
  free(R->cv.ct);
  free(R->out);
  free(R->rvq);
  free(R->rvq_f32);
  free(R->exp_num);
  free(R->exp_den);
  free(R);
  if (rc != SPILL_OK) spill_import_summary_free(s);
  return rc;
}
