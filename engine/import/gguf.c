/* engine/import/gguf.c: GGUF parsing (see gguf.h for the checks).
 *
 * The parser reads through a small window buffer over either a file (pread)
 * or a memory image, tracking the absolute position; every length read from
 * the file is compared with the bytes left before it is used for an
 * allocation, so memory is bounded by the file's real size.
 */
#define _GNU_SOURCE
#include "engine/import/gguf.h"

#include "engine/base/safe_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" */
#define GGUF_DEFAULT_ALIGN 32u

typedef struct rd {
  int fd;               /* or -1 */
  const uint8_t *mem;   /* or NULL */
  uint64_t size, pos;
  const char *src;
  uint8_t win[1 << 16];
  uint64_t win_off;
  size_t win_len;
} rd;

static uint64_t left(const rd *r) { return r->size - r->pos; }

static int rd_bytes(rd *r, void *dst, uint64_t n, const char *what, spill_err *e) {
  SPILL_FAIL_IF(e, n > left(r), SPILL_E_FORMAT,
                "%s: %s: %llu bytes needed at offset %llu, only %llu left (truncated?)", r->src,
                what, (unsigned long long)n, (unsigned long long)r->pos,
                (unsigned long long)left(r));
  uint8_t *d = dst;
  if (r->mem) {
    memcpy(d, r->mem + r->pos, (size_t)n);
    r->pos += n;
    return SPILL_OK;
  }
  while (n > 0) {
    if (r->pos < r->win_off || r->pos >= r->win_off + r->win_len) {
      uint64_t want = r->size - r->pos < sizeof r->win ? r->size - r->pos : sizeof r->win;
      SPILL_TRY(spill_src_pread(r->fd, r->win, (size_t)want, r->pos, r->src, e));
      r->win_off = r->pos;
      r->win_len = (size_t)want;
    }
    uint64_t in = r->win_off + r->win_len - r->pos;
    uint64_t k = n < in ? n : in;
    memcpy(d, r->win + (r->pos - r->win_off), (size_t)k);
    d += k;
    n -= k;
    r->pos += k;
  }
  return SPILL_OK;
}

static int rd_u32(rd *r, uint32_t *v, const char *what, spill_err *e) {
  uint8_t b[4];
  SPILL_TRY(rd_bytes(r, b, 4, what, e));
  *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return SPILL_OK;
}

static int rd_u64(rd *r, uint64_t *v, const char *what, spill_err *e) {
  uint8_t b[8];
  SPILL_TRY(rd_bytes(r, b, 8, what, e));
  *v = 0;
  for (int i = 7; i >= 0; i--) *v = (*v << 8) | b[i];
  return SPILL_OK;
}

/* A GGUF string (u64 length + bytes) into a malloc'd NUL-terminated copy. */
static int rd_str(rd *r, uint64_t max, char **out, uint64_t *len, const char *what, spill_err *e) {
  uint64_t n;
  SPILL_TRY(rd_u64(r, &n, what, e));
  SPILL_FAIL_IF(e, n > left(r), SPILL_E_FORMAT,
                "%s: %s: string of %llu bytes at offset %llu runs past the end of the file", r->src,
                what, (unsigned long long)n, (unsigned long long)(r->pos - 8));
  SPILL_FAIL_IF(e, n > max, SPILL_E_FORMAT, "%s: %s: string of %llu bytes (at most %llu)", r->src,
                what, (unsigned long long)n, (unsigned long long)max);
  char *s = malloc((size_t)n + 1);
  SPILL_FAIL_IF(e, !s, SPILL_E_NOMEM, "%s: out of memory for a %llu-byte string", r->src,
                (unsigned long long)n);
  int rc = rd_bytes(r, s, n, what, e);
  if (rc != SPILL_OK) {
    free(s);
    return rc;
  }
  s[n] = 0;
  *out = s;
  if (len) *len = n;
  return SPILL_OK;
}

static const uint32_t k_vsize[SPILL_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const k_vname[SPILL_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

static void kv_free(spill_gguf_kv *kv) {
  if (kv->str)
    for (uint64_t i = 0; i < kv->n; i++) free(kv->str[i]);
  free(kv->str);
  free(kv->str_len);
  free(kv->data);
  free(kv->key);
  memset(kv, 0, sizeof *kv);
}

static int rd_values(rd *r, spill_gguf_kv *kv, spill_gguf_type t, uint64_t n, spill_err *e) {
  kv->elem = t;
  kv->n = n;
  if (t == SPILL_GGUF_STRING) {
    SPILL_FAIL_IF(e, n > left(r) / 8, SPILL_E_FORMAT,
                  "%s: key %.200s: %llu strings cannot fit in the %llu bytes left", r->src, kv->key,
                  (unsigned long long)n, (unsigned long long)left(r));
    kv->str = calloc((size_t)n + 1, sizeof *kv->str);
    kv->str_len = calloc((size_t)n + 1, sizeof *kv->str_len);
    SPILL_FAIL_IF(e, !kv->str || !kv->str_len, SPILL_E_NOMEM, "%s: out of memory", r->src);
    for (uint64_t i = 0; i < n; i++)
      SPILL_TRY(rd_str(r, UINT64_MAX, &kv->str[i], &kv->str_len[i], kv->key, e));
    /* A string value is used as a C string (the architecture, the
     * pre-tokenizer, the chat template): a NUL inside would cut it into
     * another value. Array elements (token texts, merges) are used by their
     * length and may hold any byte. */
    const char *nul = kv->type == SPILL_GGUF_STRING ? memchr(kv->str[0], 0, kv->str_len[0]) : NULL;
    SPILL_FAIL_IF(e, nul, SPILL_E_FORMAT, "%s: key %.200s: a NUL byte at byte %llu of its string",
                  r->src, kv->key, (unsigned long long)(nul - kv->str[0]));
    return SPILL_OK;
  }
  const uint32_t sz = k_vsize[t];
  SPILL_FAIL_IF(e, n > left(r) / sz, SPILL_E_FORMAT,
                "%s: key %.200s: %llu values of %s cannot fit in the %llu bytes left", r->src,
                kv->key, (unsigned long long)n, k_vname[t], (unsigned long long)left(r));
  kv->data = malloc((size_t)(n * sz) + 1);
  SPILL_FAIL_IF(e, !kv->data, SPILL_E_NOMEM, "%s: out of memory", r->src);
  SPILL_TRY(rd_bytes(r, kv->data, n * sz, kv->key, e)); /* little-endian host (x86-64) */
  if (t == SPILL_GGUF_BOOL)
    for (uint64_t i = 0; i < n; i++)
      SPILL_FAIL_IF(e, ((uint8_t *)kv->data)[i] > 1, SPILL_E_FORMAT,
                    "%s: key %.200s: bool value %u", r->src, kv->key, ((uint8_t *)kv->data)[i]);
  return SPILL_OK;
}

static int rd_kv(rd *r, spill_gguf_kv *kv, spill_err *e) {
  uint64_t kl;
  SPILL_TRY(rd_str(r, SPILL_GGUF_KEY_MAX, &kv->key, &kl, "metadata key", e));
  SPILL_FAIL_IF(e, kl == 0 || strlen(kv->key) != kl, SPILL_E_FORMAT,
                "%s: metadata key empty or with a NUL byte", r->src);
  uint32_t t;
  SPILL_TRY(rd_u32(r, &t, kv->key, e));
  SPILL_FAIL_IF(e, t >= SPILL_GGUF_TYPE_COUNT, SPILL_E_FORMAT,
                "%s: key %.200s: unknown value type %u", r->src, kv->key, t);
  kv->type = (spill_gguf_type)t;
  if (t != SPILL_GGUF_ARRAY) return rd_values(r, kv, (spill_gguf_type)t, 1, e);
  uint32_t et;
  uint64_t n;
  SPILL_TRY(rd_u32(r, &et, kv->key, e));
  SPILL_FAIL_IF(e, et >= SPILL_GGUF_TYPE_COUNT, SPILL_E_FORMAT,
                "%s: key %.200s: unknown array element type %u", r->src, kv->key, et);
  SPILL_FAIL_IF(e, et == SPILL_GGUF_ARRAY, SPILL_E_FORMAT,
                "%s: key %.200s: nested arrays are not supported", r->src, kv->key);
  SPILL_TRY(rd_u64(r, &n, kv->key, e));
  return rd_values(r, kv, (spill_gguf_type)et, n, e);
}

/* ggml types whose block size is known; others are rejected by name. */
typedef struct ggml_tt {
  const char *name;
  uint32_t blk, bytes;
  spill_src_dtype src;
} ggml_tt;

static const ggml_tt k_ggml[] = {
    [0] = {"F32", 1, 4, SPILL_SRC_F32},       [1] = {"F16", 1, 2, SPILL_SRC_F16},
    [2] = {"Q4_0", 32, 18, SPILL_SRC_Q4_0},   [3] = {"Q4_1", 32, 20, SPILL_SRC_OTHER},
    [6] = {"Q5_0", 32, 22, SPILL_SRC_Q5_0},   [7] = {"Q5_1", 32, 24, SPILL_SRC_Q5_1},
    [8] = {"Q8_0", 32, 34, SPILL_SRC_Q8_0},   [9] = {"Q8_1", 32, 36, SPILL_SRC_OTHER},
    [10] = {"Q2_K", 256, 84, SPILL_SRC_OTHER}, [11] = {"Q3_K", 256, 110, SPILL_SRC_OTHER},
    [12] = {"Q4_K", 256, 144, SPILL_SRC_Q4_K}, [13] = {"Q5_K", 256, 176, SPILL_SRC_Q5_K},
    [14] = {"Q6_K", 256, 210, SPILL_SRC_Q6_K}, [15] = {"Q8_K", 256, 292, SPILL_SRC_OTHER},
    [24] = {"I8", 1, 1, SPILL_SRC_OTHER},     [25] = {"I16", 1, 2, SPILL_SRC_OTHER},
    [26] = {"I32", 1, 4, SPILL_SRC_OTHER},    [27] = {"I64", 1, 8, SPILL_SRC_OTHER},
    [28] = {"F64", 1, 8, SPILL_SRC_OTHER},    [30] = {"BF16", 1, 2, SPILL_SRC_BF16},
    [39] = {"MXFP4", 32, 17, SPILL_SRC_MXFP4},
};
#define N_GGML ((uint32_t)(sizeof k_ggml / sizeof k_ggml[0]))

static int cmp_off(const void *a, const void *b) {
  const spill_src_tensor *x = *(spill_src_tensor *const *)a, *y = *(spill_src_tensor *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

typedef struct tsort {
  spill_src_tensor t;
  uint32_t ggml;
} tsort;

static int cmp_tname(const void *a, const void *b) {
  return strcmp(((const tsort *)a)->t.name, ((const tsort *)b)->t.name);
}

static int rd_tensor(rd *r, spill_src_tensor *t, uint32_t *gt, int file, spill_err *e) {
  uint64_t nl;
  SPILL_TRY(rd_str(r, SPILL_SRC_NAME_MAX - 1, &t->name, &nl, "tensor name", e));
  SPILL_FAIL_IF(e, nl == 0 || strlen(t->name) != nl, SPILL_E_FORMAT,
                "%s: tensor name empty or with a NUL byte", r->src);
  uint32_t nd;
  SPILL_TRY(rd_u32(r, &nd, t->name, e));
  SPILL_FAIL_IF(e, nd < 1 || nd > SPILL_SRC_MAX_DIMS, SPILL_E_FORMAT,
                "%s: tensor %.80s: %u dimensions (1..%d)", r->src, t->name, nd, SPILL_SRC_MAX_DIMS);
  uint64_t ne[SPILL_SRC_MAX_DIMS], numel = 1;
  for (uint32_t i = 0; i < nd; i++) {
    SPILL_TRY(rd_u64(r, &ne[i], t->name, e));
    SPILL_FAIL_IF(e, ne[i] == 0 || ne[i] > (1ull << 62) / numel, SPILL_E_FORMAT,
                  "%s: tensor %.80s: absurd dimension ne[%u] = %llu", r->src, t->name, i,
                  (unsigned long long)ne[i]);
    numel *= ne[i];
  }
  t->ndim = (int)nd;
  for (uint32_t i = 0; i < nd; i++) t->shape[i] = ne[nd - 1 - i]; /* numpy order */
  uint32_t ty;
  SPILL_TRY(rd_u32(r, &ty, t->name, e));
  SPILL_FAIL_IF(e, ty >= N_GGML || k_ggml[ty].name == NULL, SPILL_E_UNSUPPORTED,
                "%s: tensor %.80s: ggml type %u is not supported", r->src, t->name, ty);
  const ggml_tt *tt = &k_ggml[ty];
  SPILL_FAIL_IF(e, ne[0] % tt->blk != 0, SPILL_E_FORMAT,
                "%s: tensor %.80s: row of %llu elements is not a whole number of %s blocks (%u)",
                r->src, t->name, (unsigned long long)ne[0], tt->name, tt->blk);
  SPILL_FAIL_IF(e, numel / tt->blk > UINT64_MAX / tt->bytes, SPILL_E_FORMAT,
                "%s: tensor %.80s: byte size overflows", r->src, t->name);
  t->bytes = numel / tt->blk * tt->bytes;
  t->dtype = tt->src;
  snprintf(t->other_name, sizeof t->other_name, "%s", tt->name);
  *gt = ty;
  t->file = file;
  SPILL_TRY(rd_u64(r, &t->begin, t->name, e)); /* relative until the data start is known */
  return SPILL_OK;
}

static int cmp_key(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Parses one file into kv/tensor arrays appended to g (kv only if keep_kv). */
static int parse_one(rd *r, spill_gguf *g, int file, int keep_kv, spill_err *e) {
  uint32_t magic, ver;
  uint64_t n_t, n_kv;
  SPILL_TRY(rd_u32(r, &magic, "magic", e));
  SPILL_FAIL_IF(e, magic != GGUF_MAGIC, SPILL_E_FORMAT, "%s: bad magic 0x%08x (not a GGUF file)",
                r->src, magic);
  SPILL_TRY(rd_u32(r, &ver, "version", e));
  SPILL_FAIL_IF(e, ver != 2 && ver != 3, SPILL_E_VERSION,
                "%s: GGUF version %u (this reader supports 2 and 3)", r->src, ver);
  SPILL_TRY(rd_u64(r, &n_t, "tensor count", e));
  SPILL_TRY(rd_u64(r, &n_kv, "metadata count", e));
  /* a kv takes >= 8 + 1 + 4 + 1 bytes, a tensor info >= 8 + 1 + 4 + 8 + 4 + 8 */
  SPILL_FAIL_IF(e, n_kv > left(r) / 14, SPILL_E_FORMAT,
                "%s: %llu metadata entries cannot fit in the file", r->src,
                (unsigned long long)n_kv);
  SPILL_FAIL_IF(e, n_t > left(r) / 33 || n_t > (1u << 24), SPILL_E_FORMAT,
                "%s: %llu tensors cannot fit in the file", r->src, (unsigned long long)n_t);
  if (file == 0) g->version = ver;
  spill_gguf_kv *kvs = calloc((size_t)n_kv + 1, sizeof *kvs);
  SPILL_FAIL_IF(e, !kvs, SPILL_E_NOMEM, "%s: out of memory", r->src);
  int rc = SPILL_OK;
  uint64_t got = 0;
  for (; got < n_kv && rc == SPILL_OK; got++) rc = rd_kv(r, &kvs[got], e);
  if (rc == SPILL_OK && n_kv > 1) { /* duplicate keys: readers would disagree on which wins */
    const char **keys = malloc((size_t)n_kv * sizeof *keys);
    if (!keys) rc = spill_err_set(e, SPILL_E_NOMEM, "%s: out of memory", r->src);
    for (uint64_t i = 0; keys && i < n_kv; i++) keys[i] = kvs[i].key;
    if (keys) qsort(keys, (size_t)n_kv, sizeof *keys, cmp_key);
    for (uint64_t i = 1; keys && i < n_kv && rc == SPILL_OK; i++)
      if (!strcmp(keys[i], keys[i - 1]))
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: metadata key %.200s appears twice", r->src,
                           keys[i]);
    free(keys);
  }
  uint32_t align = GGUF_DEFAULT_ALIGN;
  for (uint64_t i = 0; i < n_kv && rc == SPILL_OK; i++)
    if (!strcmp(kvs[i].key, "general.alignment")) {
      if (kvs[i].type != SPILL_GGUF_U32)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: general.alignment is %s, not u32", r->src,
                           k_vname[kvs[i].type]);
      else {
        memcpy(&align, kvs[i].data, 4);
        if (align == 0 || (align & (align - 1)) || align > (1u << 24))
          rc = spill_err_set(e, SPILL_E_FORMAT,
                             "%s: general.alignment %u is not a power of two in [1, 2^24]",
                             r->src, align);
      }
    }
  if (rc != SPILL_OK || !keep_kv) {
    for (uint64_t i = 0; i < got; i++) kv_free(&kvs[i]);
    free(kvs);
    if (rc != SPILL_OK) return rc;
  } else {
    g->kv = kvs;
    g->n_kv = (int)n_kv;
    g->alignment = align;
  }
  if (rc != SPILL_OK) return rc;
  /* tensor infos */
  int base = g->n_tensors;
  spill_src_tensor *nt = realloc(g->t, ((size_t)base + (size_t)n_t + 1) * sizeof *nt);
  SPILL_FAIL_IF(e, !nt, SPILL_E_NOMEM, "%s: out of memory", r->src);
  g->t = nt;
  uint32_t *ng = realloc(g->ggml_type, ((size_t)base + (size_t)n_t + 1) * sizeof *ng);
  SPILL_FAIL_IF(e, !ng, SPILL_E_NOMEM, "%s: out of memory", r->src);
  g->ggml_type = ng;
  for (uint64_t i = 0; i < n_t; i++) {
    memset(&g->t[base + i], 0, sizeof *g->t);
    rc = rd_tensor(r, &g->t[base + i], &g->ggml_type[base + i], file, e);
    if (g->t[base + i].name) g->n_tensors++; /* owns its name from here */
    if (rc != SPILL_OK) return rc;
  }
  /* data section */
  uint64_t ds = (r->pos + align - 1) / align * align;
  SPILL_FAIL_IF(e, ds > r->size, SPILL_E_FORMAT,
                "%s: data section starts at %llu, past the end of the file (%llu bytes)", r->src,
                (unsigned long long)ds, (unsigned long long)r->size);
  const uint64_t dlen = r->size - ds;
  spill_src_tensor **by = malloc(((size_t)n_t + 1) * sizeof *by);
  SPILL_FAIL_IF(e, !by, SPILL_E_NOMEM, "%s: out of memory", r->src);
  for (uint64_t i = 0; i < n_t; i++) {
    spill_src_tensor *t = &g->t[base + i];
    if (t->begin % align) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s: offset %llu not a multiple of the alignment %u",
                         r->src, t->name, (unsigned long long)t->begin, align);
      break;
    }
    if (t->begin > dlen || t->bytes > dlen - t->begin) {
      rc = spill_err_set(e, SPILL_E_FORMAT,
                         "%s: tensor %.80s: bytes [%llu, +%llu) of the data section run past "
                         "the end of the file (truncated?)",
                         r->src, t->name, (unsigned long long)t->begin,
                         (unsigned long long)t->bytes);
      break;
    }
    t->begin += ds;
    by[i] = t;
  }
  if (rc == SPILL_OK) {
    qsort(by, (size_t)n_t, sizeof *by, cmp_off);
    for (uint64_t i = 1; i < n_t && rc == SPILL_OK; i++)
      if (by[i]->begin < by[i - 1]->begin + by[i - 1]->bytes)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensors %.80s and %.80s overlap", r->src,
                           by[i - 1]->name, by[i]->name);
  }
  free(by);
  return rc;
}

void spill_gguf_close(spill_gguf *g) {
  if (!g) return;
  for (int i = 0; i < g->n_kv; i++) kv_free(&g->kv[i]);
  free(g->kv);
  for (int i = 0; i < g->n_tensors; i++) free(g->t[i].name);
  free(g->t);
  free(g->ggml_type);
  for (int i = 0; i < g->n_files; i++) {
    if (g->fds && g->fds[i] >= 0) close(g->fds[i]);
    if (g->paths) free(g->paths[i]);
  }
  free(g->fds);
  free(g->paths);
  memset(g, 0, sizeof *g);
}

/* Sorts tensors by name (with their ggml types) and rejects duplicates. */
static int finish_tensors(spill_gguf *g, spill_err *e) {
  tsort *s = malloc(((size_t)g->n_tensors + 1) * sizeof *s);
  SPILL_FAIL_IF(e, !s, SPILL_E_NOMEM, "out of memory");
  for (int i = 0; i < g->n_tensors; i++) s[i] = (tsort){g->t[i], g->ggml_type[i]};
  qsort(s, (size_t)g->n_tensors, sizeof *s, cmp_tname);
  int rc = SPILL_OK;
  for (int i = 0; i < g->n_tensors; i++) {
    g->t[i] = s[i].t;
    g->ggml_type[i] = s[i].ggml;
    if (i > 0 && rc == SPILL_OK && !strcmp(s[i].t.name, s[i - 1].t.name))
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s appears twice",
                         g->paths ? g->paths[s[i].t.file] : "gguf", s[i].t.name);
  }
  free(s);
  return rc;
}

int spill_gguf_parse_mem(const uint8_t *buf, size_t len, const char *src, spill_gguf *g,
                         spill_err *e) {
  memset(g, 0, sizeof *g);
  rd *r = calloc(1, sizeof *r);
  SPILL_FAIL_IF(e, !r, SPILL_E_NOMEM, "out of memory");
  r->fd = -1;
  r->mem = buf ? buf : (const uint8_t *)"";
  r->size = len;
  r->src = src;
  int rc = parse_one(r, g, 0, 1, e);
  free(r);
  if (rc == SPILL_OK) rc = finish_tensors(g, e);
  if (rc != SPILL_OK) spill_gguf_close(g);
  return rc;
}

static int open_file(spill_gguf *g, const char *path, int keep_kv, spill_err *e) {
  char **p = realloc(g->paths, ((size_t)g->n_files + 1) * sizeof *p);
  SPILL_FAIL_IF(e, !p, SPILL_E_NOMEM, "out of memory");
  g->paths = p;
  int *f = realloc(g->fds, ((size_t)g->n_files + 1) * sizeof *f);
  SPILL_FAIL_IF(e, !f, SPILL_E_NOMEM, "out of memory");
  g->fds = f;
  g->paths[g->n_files] = strdup(path);
  g->fds[g->n_files] = -1;
  int file = g->n_files++;
  SPILL_FAIL_IF(e, !g->paths[file], SPILL_E_NOMEM, "out of memory");
  /* a FIFO in place of a .gguf is refused by kind, not waited on */
  SPILL_TRY(spill_file_open_read(path, 0, &g->fds[file], e));
  struct stat st;
  SPILL_FAIL_IF(e, fstat(g->fds[file], &st) != 0, SPILL_E_IO, "%s: stat failed", path);
  rd *r = calloc(1, sizeof *r);
  SPILL_FAIL_IF(e, !r, SPILL_E_NOMEM, "out of memory");
  r->fd = g->fds[file];
  r->size = (uint64_t)st.st_size;
  r->src = g->paths[file];
  int rc = SPILL_OK;
  if (keep_kv) {
    rc = parse_one(r, g, file, 1, e);
  } else {
    /* later splits: their own metadata is parsed (and checked) then dropped,
     * except split.no which must equal the file's index */
    spill_gguf tmp = {0};
    tmp.paths = g->paths; /* only for messages */
    rc = parse_one(r, &tmp, file, 1, e);
    if (rc == SPILL_OK) {
      const spill_gguf_kv *no = spill_gguf_find_kv(&tmp, "split.no");
      uint64_t v = 0;
      if (!no || spill_gguf_get_u64(&tmp, "split.no", &v, e) != SPILL_OK || v != (uint64_t)file)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: split.no is not %d", path, file);
    }
    /* move tensors over */
    if (rc == SPILL_OK) {
      spill_src_tensor *nt = realloc(g->t, ((size_t)g->n_tensors + (size_t)tmp.n_tensors + 1) * sizeof *nt);
      uint32_t *ng = nt ? realloc(g->ggml_type, ((size_t)g->n_tensors + (size_t)tmp.n_tensors + 1) * sizeof *ng) : NULL;
      if (nt) g->t = nt;
      if (ng) g->ggml_type = ng;
      if (!nt || !ng) {
        rc = spill_err_set(e, SPILL_E_NOMEM, "out of memory");
      } else {
        memcpy(g->t + g->n_tensors, tmp.t, (size_t)tmp.n_tensors * sizeof *nt);
        memcpy(g->ggml_type + g->n_tensors, tmp.ggml_type, (size_t)tmp.n_tensors * sizeof *ng);
        g->n_tensors += tmp.n_tensors;
        tmp.n_tensors = 0;
      }
    }
    tmp.paths = NULL;
    spill_gguf_close(&tmp);
  }
  free(r);
  return rc;
}

/* "PREFIX-00001-of-00003.gguf": fills prefix length and count; 0 if not split. */
static int split_name(const char *path, size_t *plen, int *count) {
  size_t n = strlen(path);
  const char *suf = "-00001-of-00000.gguf";
  size_t sl = strlen(suf);
  if (n < sl) return 0;
  const char *s = path + n - sl;
  if (s[0] != '-' || memcmp(s + 6, "-of-", 4) || strcmp(s + 15, ".gguf")) return 0;
  int idx = 0, cnt = 0;
  for (int i = 1; i <= 5; i++) {
    if (s[i] < '0' || s[i] > '9' || s[9 + i] < '0' || s[9 + i] > '9') return 0;
    idx = idx * 10 + (s[i] - '0');
    cnt = cnt * 10 + (s[9 + i] - '0');
  }
  if (idx < 1 || cnt < 1 || idx > cnt) return 0;
  *plen = n - sl;
  *count = cnt;
  return 1;
}

int spill_gguf_open(const char *path, spill_gguf *g, spill_err *e) {
  memset(g, 0, sizeof *g);
  size_t plen = 0;
  int count = 0, rc;
  if (!split_name(path, &plen, &count)) {
    rc = open_file(g, path, 1, e);
  } else {
    rc = count > SPILL_GGUF_MAX_SPLITS
             ? spill_err_set(e, SPILL_E_FORMAT, "%s: %d splits (at most %d)", path, count,
                             SPILL_GGUF_MAX_SPLITS)
             : SPILL_OK;
    for (int i = 0; i < count && rc == SPILL_OK; i++) {
      char p[4096];
      snprintf(p, sizeof p, "%.*s-%05d-of-%05d.gguf", (int)plen, path, i + 1, count);
      rc = open_file(g, p, i == 0, e);
      if (rc == SPILL_OK && i == 0) {
        uint64_t c = 0, no = 1;
        if (spill_gguf_get_u64(g, "split.count", &c, e) != SPILL_OK || c != (uint64_t)count)
          rc = spill_err_set(e, SPILL_E_FORMAT, "%s: split.count is not %d", p, count);
        else if (spill_gguf_get_u64(g, "split.no", &no, e) != SPILL_OK || no != 0)
          rc = spill_err_set(e, SPILL_E_FORMAT, "%s: split.no is not 0", p);
      }
    }
    if (rc == SPILL_OK && spill_gguf_find_kv(g, "split.tensors.count")) {
      uint64_t tc = 0;
      rc = spill_gguf_get_u64(g, "split.tensors.count", &tc, e);
      if (rc == SPILL_OK && tc != (uint64_t)g->n_tensors)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: split.tensors.count %llu but the splits hold %d tensors",
                           path, (unsigned long long)tc, g->n_tensors);
    }
  }
  if (rc == SPILL_OK) rc = finish_tensors(g, e);
  if (rc != SPILL_OK) spill_gguf_close(g);
  return rc;
}

/* ---- metadata access ---- */

int spill_gguf_n_kv(const spill_gguf *g) { return g->n_kv; }

const spill_gguf_kv *spill_gguf_kv_at(const spill_gguf *g, int i) {
  return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const spill_gguf_kv *spill_gguf_find_kv(const spill_gguf *g, const char *key) {
  for (int i = 0; i < g->n_kv; i++)
    if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
  return NULL;
}

static int num_at(const spill_gguf_kv *kv, uint64_t i, int64_t *iv, uint64_t *uv, double *dv,
                  int *is_float) {
  const uint8_t *p = (const uint8_t *)kv->data + i * k_vsize[kv->elem];
  *is_float = 0;
  switch (kv->elem) {
    case SPILL_GGUF_U8: case SPILL_GGUF_BOOL: *uv = *p; *iv = (int64_t)*uv; break;
    case SPILL_GGUF_I8: *iv = (int8_t)*p; break;
    case SPILL_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); *uv = v; *iv = v; break; }
    case SPILL_GGUF_I16: { int16_t v; memcpy(&v, p, 2); *iv = v; break; }
    case SPILL_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); *uv = v; *iv = v; break; }
    case SPILL_GGUF_I32: { int32_t v; memcpy(&v, p, 4); *iv = v; break; }
    case SPILL_GGUF_U64: { memcpy(uv, p, 8); *iv = *uv > INT64_MAX ? -1 : (int64_t)*uv; *dv = (double)*uv; return 2; }
    case SPILL_GGUF_I64: memcpy(iv, p, 8); break;
    case SPILL_GGUF_F32: { float v; memcpy(&v, p, 4); *dv = v; *is_float = 1; return 0; }
    case SPILL_GGUF_F64: memcpy(dv, p, 8); *is_float = 1; return 0;
    default: return -1;
  }
  *uv = (uint64_t)*iv;
  *dv = (double)*iv;
  return 0;
}

static int scalar(const spill_gguf *g, const char *key, const spill_gguf_kv **out, spill_err *e) {
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, key);
  SPILL_FAIL_IF(e, !kv, SPILL_E_FORMAT, "GGUF key %s is missing", key);
  SPILL_FAIL_IF(e, kv->type == SPILL_GGUF_ARRAY || kv->type == SPILL_GGUF_STRING, SPILL_E_FORMAT,
                "GGUF key %s is %s, expected a number", key, k_vname[kv->type]);
  *out = kv;
  return SPILL_OK;
}

int spill_gguf_get_u64(const spill_gguf *g, const char *key, uint64_t *out, spill_err *e) {
  const spill_gguf_kv *kv;
  SPILL_TRY(scalar(g, key, &kv, e));
  int64_t iv = 0; uint64_t uv = 0; double dv = 0; int fl;
  int k = num_at(kv, 0, &iv, &uv, &dv, &fl);
  SPILL_FAIL_IF(e, fl || kv->elem == SPILL_GGUF_BOOL, SPILL_E_FORMAT,
                "GGUF key %s is %s, expected an integer", key, k_vname[kv->elem]);
  SPILL_FAIL_IF(e, k != 2 && iv < 0, SPILL_E_FORMAT, "GGUF key %s is negative (%lld)", key,
                (long long)iv);
  *out = k == 2 ? uv : (uint64_t)iv;
  return SPILL_OK;
}

int spill_gguf_get_i64(const spill_gguf *g, const char *key, int64_t *out, spill_err *e) {
  const spill_gguf_kv *kv;
  SPILL_TRY(scalar(g, key, &kv, e));
  int64_t iv = 0; uint64_t uv = 0; double dv = 0; int fl;
  int k = num_at(kv, 0, &iv, &uv, &dv, &fl);
  SPILL_FAIL_IF(e, fl || kv->elem == SPILL_GGUF_BOOL, SPILL_E_FORMAT,
                "GGUF key %s is %s, expected an integer", key, k_vname[kv->elem]);
  SPILL_FAIL_IF(e, k == 2 && uv > INT64_MAX, SPILL_E_FORMAT, "GGUF key %s out of range", key);
  *out = iv;
  return SPILL_OK;
}

int spill_gguf_get_f64(const spill_gguf *g, const char *key, double *out, spill_err *e) {
  const spill_gguf_kv *kv;
  SPILL_TRY(scalar(g, key, &kv, e));
  int64_t iv = 0; uint64_t uv = 0; double dv = 0; int fl;
  num_at(kv, 0, &iv, &uv, &dv, &fl);
  SPILL_FAIL_IF(e, kv->elem == SPILL_GGUF_BOOL, SPILL_E_FORMAT, "GGUF key %s is bool", key);
  *out = dv;
  return SPILL_OK;
}

int spill_gguf_get_bool(const spill_gguf *g, const char *key, int *out, spill_err *e) {
  const spill_gguf_kv *kv;
  SPILL_TRY(scalar(g, key, &kv, e));
  SPILL_FAIL_IF(e, kv->elem != SPILL_GGUF_BOOL, SPILL_E_FORMAT, "GGUF key %s is %s, not bool",
                key, k_vname[kv->elem]);
  *out = *(const uint8_t *)kv->data;
  return SPILL_OK;
}

int spill_gguf_get_str(const spill_gguf *g, const char *key, const char **s, uint64_t *len,
                       spill_err *e) {
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, key);
  SPILL_FAIL_IF(e, !kv, SPILL_E_FORMAT, "GGUF key %s is missing", key);
  SPILL_FAIL_IF(e, kv->type != SPILL_GGUF_STRING, SPILL_E_FORMAT,
                "GGUF key %s is %s, not string", key, k_vname[kv->type]);
  *s = kv->str[0];
  if (len) *len = kv->str_len[0];
  return SPILL_OK;
}

int spill_gguf_arr_f64(const spill_gguf_kv *kv, uint64_t i, double *out, spill_err *e) {
  SPILL_FAIL_IF(e, kv->elem == SPILL_GGUF_STRING || i >= kv->n, SPILL_E_RANGE,
                "GGUF key %s: element %llu is not a number in range", kv->key,
                (unsigned long long)i);
  int64_t iv = 0; uint64_t uv = 0; int fl;
  num_at(kv, i, &iv, &uv, out, &fl);
  return SPILL_OK;
}

int spill_gguf_arr_i64(const spill_gguf_kv *kv, uint64_t i, int64_t *out, spill_err *e) {
  SPILL_FAIL_IF(e, kv->elem == SPILL_GGUF_STRING || i >= kv->n, SPILL_E_RANGE,
                "GGUF key %s: element %llu is not a number in range", kv->key,
                (unsigned long long)i);
  uint64_t uv = 0; double dv = 0; int fl;
  int k = num_at(kv, i, out, &uv, &dv, &fl);
  SPILL_FAIL_IF(e, fl, SPILL_E_FORMAT, "GGUF key %s: element %llu is a float", kv->key,
                (unsigned long long)i);
  SPILL_FAIL_IF(e, k == 2 && uv > INT64_MAX, SPILL_E_RANGE, "GGUF key %s: element out of range",
                kv->key);
  return SPILL_OK;
}

const spill_src_tensor *spill_gguf_find(const spill_gguf *g, const char *name) {
  int lo = 0, hi = g->n_tensors - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2, c = strcmp(g->t[mid].name, name);
    if (c == 0) return &g->t[mid];
    if (c < 0) lo = mid + 1; else hi = mid - 1;
  }
  return NULL;
}

int spill_gguf_read(const spill_gguf *g, const spill_src_tensor *t, uint64_t off, void *dst,
                    size_t n, spill_err *e) {
  SPILL_FAIL_IF(e, off > t->bytes || n > t->bytes - off, SPILL_E_RANGE,
                "tensor %.80s: read of %zu bytes at %llu past its %llu bytes", t->name, n,
                (unsigned long long)off, (unsigned long long)t->bytes);
  SPILL_FAIL_IF(e, t->file < 0 || t->file >= g->n_files || g->fds[t->file] < 0, SPILL_E_INVALID_ARG,
                "tensor %.80s: no file to read from", t->name);
  return spill_src_pread(g->fds[t->file], dst, n, t->begin + off, g->paths[t->file], e);
}
