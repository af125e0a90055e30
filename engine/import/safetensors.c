/* engine/import/safetensors.c: safetensors header parsing and shard index
 * (see safetensors.h for the checks). The JSON is parsed with cJSON; every
 * number is checked to be an integer in range before use, byte ranges are
 * sorted and checked for overlap, and names are unique across shards.
 */
#define _GNU_SOURCE
#include "engine/import/safetensors.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"

typedef struct st_dt {
  const char *name;
  spill_src_dtype dt;
  uint32_t size;
} st_dt;

static const st_dt k_dtypes[] = {
    {"F32", SPILL_SRC_F32, 4},    {"F16", SPILL_SRC_F16, 2},        {"BF16", SPILL_SRC_BF16, 2},
    {"F8_E4M3", SPILL_SRC_F8_E4M3, 1}, {"F8_E5M2", SPILL_SRC_OTHER, 1}, {"F64", SPILL_SRC_OTHER, 8},
    {"I64", SPILL_SRC_OTHER, 8},  {"U64", SPILL_SRC_OTHER, 8},      {"I32", SPILL_SRC_OTHER, 4},
    {"U32", SPILL_SRC_OTHER, 4},  {"I16", SPILL_SRC_OTHER, 2},      {"U16", SPILL_SRC_OTHER, 2},
    {"I8", SPILL_SRC_OTHER, 1},   {"U8", SPILL_SRC_OTHER, 1},       {"BOOL", SPILL_SRC_OTHER, 1},
    {"F8_E8M0", SPILL_SRC_OTHER, 1}, /* MXFP4 scales (compressed-tensors may store them so) */
};

void spill_st_list_free(spill_st_list *l) {
  if (!l) return;
  for (int i = 0; i < l->n; i++) free(l->t[i].name);
  free(l->t);
  l->t = NULL;
  l->n = 0;
}

static int cmp_begin(const void *a, const void *b) {
  const spill_src_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const spill_src_tensor *)a)->name, ((const spill_src_tensor *)b)->name);
}

/* A JSON integer in [0, hi]. */
static int json_u64(const cJSON *v, uint64_t hi, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return -1;
  double d = v->valuedouble;
  if (!(d >= 0) || d > (double)hi || d != (double)(uint64_t)d) return -1;
  *out = (uint64_t)d;
  return 0;
}

static int parse_entry(const cJSON *it, uint64_t data_start, uint64_t buf_len, int file,
                       const char *src, spill_src_tensor *t, spill_err *e) {
  const char *nm = it->string;
  SPILL_FAIL_IF(e, !cJSON_IsObject(it), SPILL_E_FORMAT, "%s: tensor %.80s: not an object", src,
                nm);
  const cJSON *dt = NULL, *shape = NULL, *off = NULL;
  for (const cJSON *k = it->child; k; k = k->next) {
    if (!strcmp(k->string, "dtype"))
      dt = k;
    else if (!strcmp(k->string, "shape"))
      shape = k;
    else if (!strcmp(k->string, "data_offsets"))
      off = k;
    else
      return spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s: unknown key \"%.40s\"", src, nm,
                           k->string);
  }
  SPILL_FAIL_IF(e, !cJSON_IsString(dt) || !shape || !off, SPILL_E_FORMAT,
                "%s: tensor %.80s: needs string dtype, shape and data_offsets", src, nm);
  uint32_t esize = 0;
  t->dtype = SPILL_SRC_OTHER;
  for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
    if (!strcmp(dt->valuestring, k_dtypes[i].name)) {
      t->dtype = k_dtypes[i].dt;
      esize = k_dtypes[i].size;
      snprintf(t->other_name, sizeof t->other_name, "%s", k_dtypes[i].name);
    }
  SPILL_FAIL_IF(e, esize == 0, SPILL_E_FORMAT, "%s: tensor %.80s: unknown dtype \"%.20s\"", src,
                nm, dt->valuestring);
  SPILL_FAIL_IF(e, !cJSON_IsArray(shape), SPILL_E_FORMAT, "%s: tensor %.80s: shape not an array",
                src, nm);
  int nd = cJSON_GetArraySize(shape);
  SPILL_FAIL_IF(e, nd > SPILL_SRC_MAX_DIMS, SPILL_E_FORMAT,
                "%s: tensor %.80s: %d dimensions (at most %d)", src, nm, nd, SPILL_SRC_MAX_DIMS);
  t->ndim = nd;
  uint64_t numel = 1;
  int i = 0;
  for (const cJSON *d = shape->child; d; d = d->next, i++) {
    uint64_t v;
    SPILL_FAIL_IF(e, json_u64(d, 1ull << 53, &v) != 0, SPILL_E_FORMAT,
                  "%s: tensor %.80s: shape[%d] is not an integer in [0, 2^53]", src, nm, i);
    t->shape[i] = v;
    SPILL_FAIL_IF(e, v != 0 && numel > (1ull << 62) / v, SPILL_E_FORMAT,
                  "%s: tensor %.80s: absurd shape (more than 2^62 elements)", src, nm);
    numel *= v;
  }
  if (nd == 0) { /* a scalar: one element */
    t->ndim = 1;
    t->shape[0] = 1;
  }
  SPILL_FAIL_IF(e, !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2, SPILL_E_FORMAT,
                "%s: tensor %.80s: data_offsets is not [begin, end]", src, nm);
  uint64_t b, en;
  SPILL_FAIL_IF(e, json_u64(off->child, 1ull << 53, &b) || json_u64(off->child->next, 1ull << 53, &en),
                SPILL_E_FORMAT, "%s: tensor %.80s: data_offsets not integers in [0, 2^53]", src,
                nm);
  SPILL_FAIL_IF(e, en < b, SPILL_E_FORMAT, "%s: tensor %.80s: data_offsets end %llu < begin %llu",
                src, nm, (unsigned long long)en, (unsigned long long)b);
  SPILL_FAIL_IF(e, numel > UINT64_MAX / esize || en - b != numel * esize, SPILL_E_FORMAT,
                "%s: tensor %.80s: %llu bytes for shape of %llu %s elements (dtype/shape "
                "mismatch)",
                src, nm, (unsigned long long)(en - b), (unsigned long long)numel,
                dt->valuestring);
  SPILL_FAIL_IF(e, en > buf_len, SPILL_E_FORMAT,
                "%s: tensor %.80s: data ends at %llu, past the end of the file (data buffer is "
                "%llu bytes: truncated?)",
                src, nm, (unsigned long long)en, (unsigned long long)buf_len);
  t->begin = data_start + b;
  t->bytes = en - b;
  t->file = file;
  t->name = strdup(nm);
  SPILL_FAIL_IF(e, !t->name, SPILL_E_NOMEM, "%s: out of memory", src);
  return SPILL_OK;
}

int spill_st_parse_header(const uint8_t *buf, size_t len, uint64_t file_size, int file,
                          const char *src, spill_st_list *out, spill_err *e) {
  memset(out, 0, sizeof *out);
  SPILL_FAIL_IF(e, len < 8 || file_size < 8, SPILL_E_FORMAT,
                "%s: shorter than the 8-byte header length", src);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
  SPILL_FAIL_IF(e, n > SPILL_ST_HEADER_MAX, SPILL_E_FORMAT,
                "%s: header length %llu exceeds the %llu-byte limit", src, (unsigned long long)n,
                SPILL_ST_HEADER_MAX);
  SPILL_FAIL_IF(e, n + 8 > file_size, SPILL_E_FORMAT,
                "%s: header length %llu runs past the end of the file (%llu bytes)", src,
                (unsigned long long)n, (unsigned long long)file_size);
  SPILL_FAIL_IF(e, n + 8 > len, SPILL_E_INVALID_ARG, "%s: header not fully in the buffer", src);
  SPILL_FAIL_IF(e, n < 2 || buf[8] != '{', SPILL_E_FORMAT, "%s: header is not a JSON object", src);
  /* the format pads the header with spaces (some writers with NULs): only
   * padding may follow the object. The JSON itself goes through the one
   * reading layer: a repeated tensor name, a NUL in a name (it would cut
   * it) or invalid UTF-8 is refused by name. */
  size_t jn = (size_t)n;
  while (jn > 0 && (buf[8 + jn - 1] == '\0' || buf[8 + jn - 1] == ' ')) jn--;
  cJSON *root = NULL;
  SPILL_TRY(spill_json_parse((const char *)buf + 8, jn, src, SPILL_E_FORMAT, &root, e));
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return spill_err_set(e, SPILL_E_FORMAT, "%s: header is not valid JSON", src);
  }
  int cnt = 0;
  for (const cJSON *it = root->child; it; it = it->next) cnt++;
  int rc = SPILL_OK;
  out->t = calloc((size_t)cnt + 1, sizeof *out->t);
  if (!out->t) {
    cJSON_Delete(root);
    return spill_err_set(e, SPILL_E_NOMEM, "%s: out of memory", src);
  }
  const uint64_t data_start = 8 + n, buf_len = file_size - data_start;
  for (const cJSON *it = root->child; it && rc == SPILL_OK; it = it->next) {
    if (!strcmp(it->string, "__metadata__")) {
      if (!cJSON_IsObject(it)) rc = spill_err_set(e, SPILL_E_FORMAT, "%s: __metadata__ not an object", src);
      continue;
    }
    if (strlen(it->string) == 0 || strlen(it->string) >= SPILL_SRC_NAME_MAX) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor name of %zu bytes (1..%d)", src,
                         strlen(it->string), SPILL_SRC_NAME_MAX - 1);
      break;
    }
    rc = parse_entry(it, data_start, buf_len, file, src, &out->t[out->n], e);
    if (rc == SPILL_OK) out->n++;
  }
  cJSON_Delete(root);
  if (rc == SPILL_OK) {
    qsort(out->t, (size_t)out->n, sizeof *out->t, cmp_begin);
    for (int i = 1; i < out->n && rc == SPILL_OK; i++)
      if (out->t[i].begin < out->t[i - 1].begin + out->t[i - 1].bytes)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensors %.80s and %.80s overlap", src,
                           out->t[i - 1].name, out->t[i].name);
  }
  if (rc == SPILL_OK) { /* duplicate names (cJSON keeps both copies) */
    spill_src_tensor *tmp = malloc(((size_t)out->n + 1) * sizeof *tmp);
    if (!tmp) rc = spill_err_set(e, SPILL_E_NOMEM, "%s: out of memory", src);
    if (tmp) {
      memcpy(tmp, out->t, (size_t)out->n * sizeof *tmp);
      qsort(tmp, (size_t)out->n, sizeof *tmp, cmp_name);
      for (int i = 1; i < out->n && rc == SPILL_OK; i++)
        if (!strcmp(tmp[i].name, tmp[i - 1].name))
          rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s appears twice", src,
                             tmp[i].name);
      free(tmp);
    }
  }
  if (rc != SPILL_OK) spill_st_list_free(out);
  return rc;
}

/* ---- files and shards ---- */

static int read_header_file(const char *path, int fd, int file, spill_st_list *out,
                            spill_err *e) {
  struct stat st;
  SPILL_FAIL_IF(e, fstat(fd, &st) != 0, SPILL_E_IO, "%s: stat failed", path);
  const uint64_t size = (uint64_t)st.st_size;
  uint8_t h8[8];
  SPILL_FAIL_IF(e, size < 8, SPILL_E_FORMAT, "%s: %llu bytes, shorter than the header length",
                path, (unsigned long long)size);
  SPILL_TRY(spill_src_pread(fd, h8, 8, 0, path, e));
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | h8[i];
  if (n > SPILL_ST_HEADER_MAX || n + 8 > size) /* let the parser name it */
    return spill_st_parse_header(h8, 8, size, file, path, out, e);
  uint8_t *buf = malloc((size_t)n + 8);
  SPILL_FAIL_IF(e, !buf, SPILL_E_NOMEM, "%s: out of memory for a %llu-byte header", path,
                (unsigned long long)n);
  int rc = spill_src_pread(fd, buf, (size_t)n + 8, 0, path, e);
  if (rc == SPILL_OK) rc = spill_st_parse_header(buf, (size_t)n + 8, size, file, path, out, e);
  free(buf);
  return rc;
}

void spill_st_close(spill_st_ckpt *c) {
  if (!c) return;
  for (int i = 0; i < c->n_files; i++) {
    if (c->fds && c->fds[i] >= 0) close(c->fds[i]);
    if (c->paths) free(c->paths[i]);
  }
  for (int i = 0; i < c->n_tensors; i++) free(c->t[i].name);
  free(c->fds);
  free(c->paths);
  free(c->t);
  memset(c, 0, sizeof *c);
}

static int add_file(spill_st_ckpt *c, const char *path, spill_err *e) {
  char **p = realloc(c->paths, ((size_t)c->n_files + 1) * sizeof *p);
  SPILL_FAIL_IF(e, !p, SPILL_E_NOMEM, "out of memory");
  c->paths = p;
  int *f = realloc(c->fds, ((size_t)c->n_files + 1) * sizeof *f);
  SPILL_FAIL_IF(e, !f, SPILL_E_NOMEM, "out of memory");
  c->fds = f;
  c->paths[c->n_files] = strdup(path);
  c->fds[c->n_files] = -1;
  c->n_files++;
  SPILL_FAIL_IF(e, !c->paths[c->n_files - 1], SPILL_E_NOMEM, "out of memory");
  int fd; /* a FIFO is refused by kind, not waited on */
  SPILL_TRY(spill_file_open_read(path, 0, &fd, e));
  c->fds[c->n_files - 1] = fd;
  spill_st_list l;
  SPILL_TRY(read_header_file(path, fd, c->n_files - 1, &l, e));
  spill_src_tensor *t = realloc(c->t, ((size_t)c->n_tensors + (size_t)l.n + 1) * sizeof *t);
  if (!t) {
    spill_st_list_free(&l);
    return spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  }
  c->t = t;
  memcpy(c->t + c->n_tensors, l.t, (size_t)l.n * sizeof *t);
  c->n_tensors += l.n;
  free(l.t); /* names moved */
  return SPILL_OK;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Something is there (a FIFO or a directory too: opening it then names its
 * kind, instead of "neither ... nor"). */
static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static int open_index(spill_st_ckpt *c, const char *dir, const char *idx, spill_err *e) {
  char *json = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(idx, 64u << 20, &json, &len, e));
  cJSON *root = NULL;
  int prc = spill_json_parse(json, len, idx, SPILL_E_FORMAT, &root, e);
  free(json);
  SPILL_TRY(prc);
  const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
  if (!cJSON_IsObject(wm)) {
    cJSON_Delete(root);
    return spill_err_set(e, SPILL_E_FORMAT, "%s: not JSON with a \"weight_map\" object", idx);
  }
  int rc = SPILL_OK;
  /* distinct shard names, in first-seen order */
  for (const cJSON *it = wm->child; it && rc == SPILL_OK; it = it->next) {
    if (!cJSON_IsString(it)) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: weight_map[%.80s] is not a string", idx, it->string);
      break;
    }
    const char *f = it->valuestring;
    if (!*f || strchr(f, '/') || !strcmp(f, "..") || strlen(f) > 255) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: shard name \"%.80s\" is not a plain file name",
                         idx, f);
      break;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, f);
    int seen = 0;
    for (int i = 0; i < c->n_files; i++) seen |= !strcmp(c->paths[i], path);
    if (seen) continue;
    if (c->n_files >= SPILL_ST_MAX_SHARDS) {
      rc = spill_err_set(e, SPILL_E_FORMAT, "%s: more than %d shards", idx, SPILL_ST_MAX_SHARDS);
      break;
    }
    rc = add_file(c, path, e);
  }
  if (rc == SPILL_OK) {
    /* every indexed tensor must be in its shard, every shard tensor indexed */
    int n_idx = 0;
    for (const cJSON *it = wm->child; it; it = it->next) n_idx++;
    qsort(c->t, (size_t)c->n_tensors, sizeof *c->t, cmp_name);
    for (const cJSON *it = wm->child; it && rc == SPILL_OK; it = it->next) {
      spill_src_tensor key = {.name = it->string};
      const spill_src_tensor *t = bsearch(&key, c->t, (size_t)c->n_tensors, sizeof key, cmp_name);
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", dir, it->valuestring);
      if (!t)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s is not in shard %.80s", idx,
                           it->string, it->valuestring);
      else if (strcmp(c->paths[t->file], path))
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s indexed in %.80s but found in %s",
                           idx, it->string, it->valuestring, c->paths[t->file]);
    }
    if (rc == SPILL_OK && n_idx != c->n_tensors) {
      /* a shard tensor missing from the index (or listed twice by the index) */
      for (int i = 0; i < c->n_tensors && rc == SPILL_OK; i++)
        if (!cJSON_GetObjectItemCaseSensitive(wm, c->t[i].name))
          rc = spill_err_set(e, SPILL_E_FORMAT, "%s: tensor %.80s of %s is not in the index", idx,
                             c->t[i].name, c->paths[c->t[i].file]);
      if (rc == SPILL_OK)
        rc = spill_err_set(e, SPILL_E_FORMAT, "%s: %d index entries for %d tensors", idx, n_idx,
                           c->n_tensors);
    }
  }
  cJSON_Delete(root);
  return rc;
}

int spill_st_open(const char *path, spill_st_ckpt *c, spill_err *e) {
  memset(c, 0, sizeof *c);
  int rc;
  if (is_dir(path)) {
    char idx[4096], one[4096];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", path);
    snprintf(one, sizeof one, "%s/model.safetensors", path);
    if (file_exists(idx))
      rc = open_index(c, path, idx, e);
    else if (file_exists(one))
      rc = add_file(c, one, e);
    else
      rc = spill_err_set(e, SPILL_E_IO,
                         "%s: neither model.safetensors.index.json nor model.safetensors", path);
  } else {
    rc = add_file(c, path, e);
  }
  if (rc == SPILL_OK) {
    qsort(c->t, (size_t)c->n_tensors, sizeof *c->t, cmp_name);
    for (int i = 1; i < c->n_tensors && rc == SPILL_OK; i++)
      if (!strcmp(c->t[i].name, c->t[i - 1].name))
        rc = spill_err_set(e, SPILL_E_FORMAT, "tensor %.80s is in both %s and %s", c->t[i].name,
                           c->paths[c->t[i - 1].file], c->paths[c->t[i].file]);
  }
  if (rc != SPILL_OK) spill_st_close(c);
  return rc;
}

const spill_src_tensor *spill_st_find(const spill_st_ckpt *c, const char *name) {
  if (!c->n_tensors) return NULL;
  spill_src_tensor key = {.name = (char *)name};
  return bsearch(&key, c->t, (size_t)c->n_tensors, sizeof key, cmp_name);
}

int spill_st_read(const spill_st_ckpt *c, const spill_src_tensor *t, uint64_t off, void *dst,
                  size_t n, spill_err *e) {
  SPILL_FAIL_IF(e, off > t->bytes || n > t->bytes - off, SPILL_E_RANGE,
                "tensor %.80s: read of %zu bytes at %llu past its %llu bytes", t->name, n,
                (unsigned long long)off, (unsigned long long)t->bytes);
  SPILL_FAIL_IF(e, t->file < 0 || t->file >= c->n_files, SPILL_E_INTERNAL, "bad file index");
  return spill_src_pread(c->fds[t->file], dst, n, t->begin + off, c->paths[t->file], e);
}
