/* engine/trace/trace_write.c: spill_trace -> simple-format JSONL.
 *
 * The writer of `spill trace convert`: a header line from the trace's meta
 * (model, source, declared experts, rank order, caveats) then one line per
 * token, {"tok", "pos", "phase", "layers", "weights"}, pos/phase only when
 * known and weights only when the trace has them. Weights are printed with
 * the fewest significant digits (6..9) that read back to the same float, so
 * a source's "0.425021" stays "0.425021" and the file stays small. Whatever
 * it writes, trace_read.c reads back to an equal trace (tested). The text is
 * built in memory and written atomically (temp file + rename).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/trace/router_trace.h"

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1) cap *= 2;
    char *np = (char *)realloc(b->p, cap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sb_put(b, tmp, (size_t)n);
    return;
  }
  char *big = (char *)malloc((size_t)n + 1);
  if (!big) {
    b->oom = 1;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb_put(b, big, (size_t)n);
  free(big);
}

/* JSON string literal through the one escaper (engine/base/json_util.h):
 * RFC 8259's escapes, invalid UTF-8 replaced. */
static void sb_json_str(sbuf *b, const char *s) {
  char *q = spill_json_quote(s, strlen(s));
  if (q) sb_put(b, q, strlen(q));
  else b->oom = 1;
  free(q);
}

static void sb_float(sbuf *b, float v) {
  char tmp[40];
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, (double)v);
    if (strtof(tmp, NULL) == v) break;
  }
  sb_put(b, tmp, strlen(tmp));
}

static void write_header(sbuf *b, const spill_trace *t) {
  const spill_trace_meta *m = &t->meta;
  sb_printf(b, "{\"header\": {\"version\": 1, \"experts\": %u", t->n_experts);
  if (m->model) {
    sb_put(b, ", \"model\": ", 11);
    sb_json_str(b, m->model);
  }
  if (m->source) {
    sb_put(b, ", \"source\": ", 12);
    sb_json_str(b, m->source);
  }
  if (m->converted_from) {
    sb_put(b, ", \"converted_from\": ", 20);
    sb_json_str(b, m->converted_from);
  }
  sb_printf(b, ", \"layers\": %u, \"top_k\": %u, \"tokens\": %u", t->n_layers, t->top_k,
            t->n_tokens);
  if (m->top_k_native) sb_printf(b, ", \"top_k_native\": %u", m->top_k_native);
  if (m->rank_order >= 0)
    sb_printf(b, ", \"rank_order\": \"%s\"", m->rank_order ? "router" : "unknown");
  sb_printf(b, ", \"weights\": %s", t->weights ? "true" : "false");
  int contiguous = 1;
  for (uint32_t l = 0; l < t->n_layers; l++) contiguous &= t->layer_ids[l] == l;
  if (!contiguous) {
    sb_put(b, ", \"layer_ids\": [", 16);
    for (uint32_t l = 0; l < t->n_layers; l++) sb_printf(b, "%s%u", l ? ", " : "", t->layer_ids[l]);
    sb_put(b, "]", 1);
  }
  sb_put(b, ", \"caveats\": [", 14);
  for (uint32_t i = 0; i < m->n_caveats; i++) {
    if (i) sb_put(b, ", ", 2);
    sb_json_str(b, m->caveats[i]);
  }
  sb_put(b, "]}}\n", 4);
}

int spill_trace_format_jsonl(const spill_trace *t, char **out, size_t *len, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !out || !len || !t->n_tokens, SPILL_E_INVALID_ARG,
                "trace write: NULL argument or empty trace");
  *out = NULL;
  *len = 0;
  sbuf b = {0};
  write_header(&b, t);
  const uint32_t L = t->n_layers, K = t->top_k;
  for (uint32_t tok = 0; tok < t->n_tokens && !b.oom; tok++) {
    sb_printf(&b, "{\"tok\": %lld", (long long)(t->tok ? t->tok[tok] : tok));
    if (t->pos && t->pos[tok] >= 0) sb_printf(&b, ", \"pos\": %lld", (long long)t->pos[tok]);
    if (t->phase && t->phase[tok] != SPILL_TRACE_PHASE_NONE)
      sb_printf(&b, ", \"phase\": \"%s\"",
                t->phase[tok] == SPILL_TRACE_PHASE_PREFILL ? "prefill" : "decode");
    sb_put(&b, ", \"layers\": [", 13);
    for (uint32_t l = 0; l < L; l++) {
      const uint32_t *ids = spill_trace_ids(t, tok, l);
      sb_put(&b, l ? ", [" : "[", l ? 3 : 1);
      for (uint32_t k = 0; k < K; k++) sb_printf(&b, "%s%u", k ? ", " : "", ids[k]);
      sb_put(&b, "]", 1);
    }
    sb_put(&b, "]", 1);
    if (t->weights) {
      sb_put(&b, ", \"weights\": [", 14);
      for (uint32_t l = 0; l < L; l++) {
        const float *w = t->weights + ((size_t)tok * L + l) * K;
        sb_put(&b, l ? ", [" : "[", l ? 3 : 1);
        for (uint32_t k = 0; k < K; k++) {
          if (k) sb_put(&b, ", ", 2);
          sb_float(&b, w[k]);
        }
        sb_put(&b, "]", 1);
      }
      sb_put(&b, "]", 1);
    }
    sb_put(&b, "}\n", 2);
  }
  if (b.oom) {
    free(b.p);
    return spill_err_set(e, SPILL_E_NOMEM, "trace write: out of memory");
  }
  *out = b.p;
  *len = b.n;
  return SPILL_OK;
}

int spill_trace_write_file(const spill_trace *t, const char *path, spill_err *e) {
  SPILL_FAIL_IF(e, !path, SPILL_E_INVALID_ARG, "trace write: NULL path");
  char *buf;
  size_t len;
  SPILL_TRY(spill_trace_format_jsonl(t, &buf, &len, e));
  int rc = spill_write_file_atomic(path, buf, len, e);
  free(buf);
  return rc;
}
