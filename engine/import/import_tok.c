/* engine/import/import_tok.c: an imported GGUF model carries its tokenizer:
 * the GGUF's tokenizer.* metadata is written as DST/tokenizer.gguf (a
 * tensor-less GGUF v3 holding those keys verbatim, general.architecture
 * "tokenizer-only"), which engine/tok loads from the container directory
 * (spill_tok_load). (Hugging Face checkpoints: import_run.c copies
 * tokenizer.json / tokenizer_config.json / tiktoken.model.) Files are written atomically and are
 * not part of the container proper (docs/FORMAT.md: other files are
 * ignored), so `spill verify` and the byte-identical resume are unaffected.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/import/import_internal.h"

typedef struct buf {
  uint8_t *p;
  size_t n, cap;
  int oom;
} buf;

static void put(buf *b, const void *d, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t c = (b->cap ? b->cap * 2 : 65536);
    while (c < b->n + n) c *= 2;
    uint8_t *q = realloc(b->p, c);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = c;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s, uint64_t n) {
  put_u64(b, n);
  put(b, s, (size_t)n);
}

static const uint32_t k_size[SPILL_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static int gguf_tokenizer(const imp_src *s, const char *dst, char *what, size_t wn, spill_err *e) {
  const spill_gguf *g = &s->gg;
  int n = 0;
  for (int i = 0; i < g->n_kv; i++) n += !strncmp(g->kv[i].key, "tokenizer.", 10);
  if (n == 0) {
    snprintf(what, wn, "none (the GGUF has no tokenizer.* metadata)");
    return SPILL_OK;
  }
  buf b = {0};
  put(&b, "GGUF", 4);
  put_u32(&b, 3);
  put_u64(&b, 0);
  put_u64(&b, (uint64_t)n + 1);
  static const char arch[] = "tokenizer-only";
  put_str(&b, "general.architecture", 20);
  put_u32(&b, SPILL_GGUF_STRING);
  put_str(&b, arch, sizeof arch - 1);
  for (int i = 0; i < g->n_kv; i++) {
    const spill_gguf_kv *kv = &g->kv[i];
    if (strncmp(kv->key, "tokenizer.", 10)) continue;
    put_str(&b, kv->key, strlen(kv->key));
    put_u32(&b, kv->type);
    if (kv->type == SPILL_GGUF_ARRAY) {
      put_u32(&b, kv->elem);
      put_u64(&b, kv->n);
    }
    if (kv->elem == SPILL_GGUF_STRING)
      for (uint64_t j = 0; j < kv->n; j++) put_str(&b, kv->str[j], kv->str_len[j]);
    else
      put(&b, kv->data, (size_t)(kv->n * k_size[kv->elem]));
  }
  while (b.n % 32) put(&b, "", 1); /* the (empty) data section starts aligned */
  int rc = b.oom ? spill_err_set(e, SPILL_E_NOMEM, "tokenizer.gguf: out of memory") : SPILL_OK;
  char path[4200];
  snprintf(path, sizeof path, "%s/tokenizer.gguf", dst);
  if (rc == SPILL_OK) rc = spill_write_file_atomic(path, b.p, b.n, e);
  free(b.p);
  if (rc == SPILL_OK) snprintf(what, wn, "tokenizer.gguf (%d tokenizer.* keys)", n);
  return rc;
}

int imp_gguf_tokenizer(const imp_src *s, const char *dst, spill_err *e) {
  char what[96];
  return s->is_gguf ? gguf_tokenizer(s, dst, what, sizeof what, e) : SPILL_OK;
}
