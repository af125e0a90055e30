/* server/request_parse.c: JSON body -> spill_srv_request (request_parse.h).
 *
 * cJSON parses the body with an explicit length (the bytes are untrusted and
 * not NUL-terminated); then each known field is checked for its type and
 * range, in the order of the OpenAI reference, and the first problem is
 * reported with the field's name as `param`. Numbers that must be integers
 * are rejected when they have a fraction or do not fit. Nothing here
 * allocates more than the body's size in total.
 */
#define _POSIX_C_SOURCE 200809L
#include "server/request_parse.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void spill_srv_error_set(spill_srv_error *err, int http_status, const char *type,
                         const char *param, const char *code, const char *fmt, ...) {
  if (!err) return;
  err->http_status = http_status;
  snprintf(err->type, sizeof err->type, "%s", type ? type : "invalid_request_error");
  snprintf(err->param, sizeof err->param, "%s", param ? param : "");
  snprintf(err->code, sizeof err->code, "%s", code ? code : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->message, sizeof err->message, fmt, ap);
  va_end(ap);
}

void spill_srv_request_free(spill_srv_request *r) {
  if (!r) return;
  free(r->model);
  for (int i = 0; i < r->n_messages; i++) {
    free(r->messages[i].role);
    free(r->messages[i].content);
  }
  free(r->messages);
  free(r->prompt);
  for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
  memset(r, 0, sizeof *r);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

#define BAD(param, ...)                                                               \
  do {                                                                                \
    spill_srv_error_set(err, 400, "invalid_request_error", (param), NULL, __VA_ARGS__); \
    return -1;                                                                        \
  } while (0)
#define NOMEM()                                                                        \
  do {                                                                                 \
    spill_srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");        \
    return -1;                                                                         \
  } while (0)

/* Present and not JSON null. */
static const cJSON *field(const cJSON *obj, const char *name) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
  return f && !cJSON_IsNull(f) ? f : NULL;
}

static int get_number(const cJSON *obj, const char *name, double lo, double hi, double *out,
                      spill_srv_error *err) {
  const cJSON *f = field(obj, name);
  if (!f) return 0;
  if (!cJSON_IsNumber(f)) BAD(name, "'%s' must be a number", name);
  double v = f->valuedouble;
  if (!isfinite(v) || v < lo || v > hi) BAD(name, "'%s' must be in [%g, %g], got %g", name, lo, hi, v);
  *out = v;
  return 1;
}

static int get_int(const cJSON *obj, const char *name, double lo, double hi, int64_t *out,
                   spill_srv_error *err) {
  const cJSON *f = field(obj, name);
  if (!f) return 0;
  if (!cJSON_IsNumber(f)) BAD(name, "'%s' must be an integer", name);
  double v = f->valuedouble;
  if (!isfinite(v) || v != floor(v)) BAD(name, "'%s' must be an integer", name);
  if (v < lo || v > hi) BAD(name, "'%s' must be in [%.0f, %.0f], got %.0f", name, lo, hi, v);
  *out = (int64_t)v;
  return 1;
}

static int get_bool(const cJSON *obj, const char *name, int *out, spill_srv_error *err) {
  const cJSON *f = field(obj, name);
  if (!f) return 0;
  if (!cJSON_IsBool(f)) BAD(name, "'%s' must be a boolean", name);
  *out = cJSON_IsTrue(f) ? 1 : 0;
  return 1;
}

/* A message's content: a string, or an array of {"type": "text", "text": S}
 * parts, joined with nothing between them (as the OpenAI API does). */
static int get_content(const cJSON *c, char **out, spill_srv_error *err) {
  if (!c) {
    *out = dup_str("");
    if (!*out) NOMEM();
    return 0;
  }
  if (cJSON_IsString(c)) {
    *out = dup_str(c->valuestring);
    if (!*out) NOMEM();
    return 0;
  }
  if (!cJSON_IsArray(c)) BAD("messages", "message 'content' must be a string or an array of parts");
  size_t total = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, c) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
    if (!cJSON_IsObject(p) || !cJSON_IsString(type))
      BAD("messages", "content parts must be objects with a string 'type'");
    if (strcmp(type->valuestring, "text") != 0)
      BAD("messages", "content part type '%.40s' is not supported (text only)", type->valuestring);
    if (!cJSON_IsString(text)) BAD("messages", "a text content part needs a string 'text'");
    total += strlen(text->valuestring);
  }
  char *s = malloc(total + 1);
  if (!s) NOMEM();
  size_t k = 0;
  cJSON_ArrayForEach(p, c) {
    const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
    size_t n = strlen(t);
    memcpy(s + k, t, n);
    k += n;
  }
  s[k] = 0;
  *out = s;
  return 0;
}

static int parse_messages(const cJSON *root, spill_srv_request *r, spill_srv_error *err) {
  const cJSON *m = field(root, "messages");
  if (!m) BAD("messages", "'messages' is required");
  if (!cJSON_IsArray(m)) BAD("messages", "'messages' must be an array");
  int n = cJSON_GetArraySize(m);
  if (n < 1) BAD("messages", "'messages' must not be empty");
  if (n > SPILL_SRV_MAX_MESSAGES) BAD("messages", "at most %d messages", SPILL_SRV_MAX_MESSAGES);
  r->messages = calloc((size_t)n, sizeof *r->messages);
  if (!r->messages) NOMEM();
  static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
  const cJSON *msg;
  cJSON_ArrayForEach(msg, m) {
    if (!cJSON_IsObject(msg)) BAD("messages", "every message must be an object");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    if (!cJSON_IsString(role)) BAD("messages", "every message needs a string 'role'");
    int ok = 0;
    for (const char *const *q = roles; *q; q++) ok |= !strcmp(role->valuestring, *q);
    if (!ok) BAD("messages", "unknown role '%.40s'", role->valuestring);
    if (field(msg, "tool_calls")) BAD("messages", "tool calls are not supported");
    spill_srv_message *dst = &r->messages[r->n_messages];
    dst->role = dup_str(role->valuestring);
    if (!dst->role) NOMEM();
    r->n_messages++;
    if (get_content(field(msg, "content"), &dst->content, err)) return -1;
  }
  return 0;
}

static int parse_prompt(const cJSON *root, spill_srv_request *r, spill_srv_error *err) {
  const cJSON *p = field(root, "prompt");
  if (!p) BAD("prompt", "'prompt' is required");
  if (cJSON_IsArray(p)) {
    /* one prompt per request: ["text"] is the same as "text" */
    if (cJSON_GetArraySize(p) != 1 || !cJSON_IsString(cJSON_GetArrayItem(p, 0)))
      BAD("prompt", "'prompt' must be a string (or an array of exactly one string)");
    p = cJSON_GetArrayItem(p, 0);
  }
  if (!cJSON_IsString(p)) BAD("prompt", "'prompt' must be a string");
  r->prompt = dup_str(p->valuestring);
  if (!r->prompt) NOMEM();
  return 0;
}

/* Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    int n = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
                                                        : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (n < 0) return 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    p++;
    for (int i = 0; i < n; i++, p++) {
      if (*p < lo || *p > hi) return 0;
      lo = 0x80;
      hi = 0xBF;
    }
  }
  return 1;
}

static int parse_stop(const cJSON *root, spill_srv_request *r, spill_srv_error *err) {
  const cJSON *s = field(root, "stop");
  if (!s) return 0;
  if (cJSON_IsString(s)) {
    if (!*s->valuestring) return 0;
    if (!valid_utf8(s->valuestring)) BAD("stop", "stop sequences must be valid UTF-8");
    if (!(r->stop[r->n_stop++] = dup_str(s->valuestring))) NOMEM();
    return 0;
  }
  if (!cJSON_IsArray(s)) BAD("stop", "'stop' must be a string or an array of strings");
  if (cJSON_GetArraySize(s) > SPILL_SRV_MAX_STOP)
    BAD("stop", "at most %d stop sequences", SPILL_SRV_MAX_STOP);
  const cJSON *x;
  cJSON_ArrayForEach(x, s) {
    if (!cJSON_IsString(x)) BAD("stop", "'stop' must be a string or an array of strings");
    if (!*x->valuestring) continue;
    if (!valid_utf8(x->valuestring)) BAD("stop", "stop sequences must be valid UTF-8");
    if (!(r->stop[r->n_stop++] = dup_str(x->valuestring))) NOMEM();
  }
  return 0;
}

/* Fields of features we do not implement: accepted only with their
 * default (no effect) value, so a client never gets silently different
 * behaviour. */
static int check_unsupported(const cJSON *root, spill_srv_error *err) {
  int64_t n;
  int rc = get_int(root, "n", 1, 1e9, &n, err);
  if (rc < 0) return -1;
  if (rc && n != 1) BAD("n", "only n = 1 is supported");
  static const char *const zero_nums[] = {"frequency_penalty", "presence_penalty", NULL};
  for (const char *const *z = zero_nums; *z; z++) {
    double v;
    rc = get_number(root, *z, -2, 2, &v, err);
    if (rc < 0) return -1;
    if (rc && v != 0) BAD(*z, "'%s' is not supported (only 0)", *z);
  }
  const cJSON *lp = field(root, "logprobs");
  if (lp && !(cJSON_IsBool(lp) && !cJSON_IsTrue(lp)))
    BAD("logprobs", "'logprobs' is not supported");
  if (field(root, "top_logprobs")) BAD("top_logprobs", "'top_logprobs' is not supported");
  if (field(root, "logit_bias")) {
    const cJSON *lb = field(root, "logit_bias");
    if (!cJSON_IsObject(lb) || cJSON_GetArraySize(lb) != 0)
      BAD("logit_bias", "'logit_bias' is not supported");
  }
  const cJSON *tools = field(root, "tools");
  if (tools && !(cJSON_IsArray(tools) && cJSON_GetArraySize(tools) == 0))
    BAD("tools", "tools are not supported");
  const cJSON *echo = field(root, "echo");
  if (echo && !(cJSON_IsBool(echo) && !cJSON_IsTrue(echo))) BAD("echo", "'echo' is not supported");
  const cJSON *suffix = field(root, "suffix");
  if (suffix && !(cJSON_IsString(suffix) && !*suffix->valuestring))
    BAD("suffix", "'suffix' is not supported");
  const cJSON *bo = field(root, "best_of");
  if (bo && !(cJSON_IsNumber(bo) && bo->valuedouble == 1)) BAD("best_of", "only best_of = 1 is supported");
  const cJSON *rf = field(root, "response_format");
  if (rf) {
    const cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0)
      BAD("response_format", "only response_format {\"type\": \"text\"} is supported");
  }
  return 0;
}

static int parse_root(spill_srv_kind kind, const cJSON *root, spill_srv_request *r,
                      spill_srv_error *err) {
  if (!cJSON_IsObject(root)) BAD(NULL, "the request body must be a JSON object");
  const cJSON *model = field(root, "model");
  if (!model) BAD("model", "'model' is required");
  if (!cJSON_IsString(model)) BAD("model", "'model' must be a string");
  if (!(r->model = dup_str(model->valuestring))) NOMEM();
  if (kind == SPILL_SRV_CHAT ? parse_messages(root, r, err) : parse_prompt(root, r, err)) return -1;

  int64_t iv;
  double dv;
  int rc;
  r->max_tokens = -1;
  const char *mt = kind == SPILL_SRV_CHAT && field(root, "max_completion_tokens")
                       ? "max_completion_tokens"
                       : "max_tokens";
  if ((rc = get_int(root, mt, 1, 1 << 30, &iv, err)) < 0) return -1;
  if (rc) r->max_tokens = (int)iv;
  r->temperature = 1.0f;
  if ((rc = get_number(root, "temperature", 0, 2, &dv, err)) < 0) return -1;
  if (rc) r->temperature = (float)dv;
  r->top_p = 1.0f;
  if ((rc = get_number(root, "top_p", 0, 1, &dv, err)) < 0) return -1;
  if (rc) {
    if (dv <= 0) BAD("top_p", "'top_p' must be in (0, 1]");
    r->top_p = (float)dv;
  }
  if ((rc = get_int(root, "top_k", 0, 1 << 30, &iv, err)) < 0) return -1;
  if (rc) r->top_k = (int)iv;
  /* the seed is an integer; negative values are taken modulo 2^64 (OpenAI
   * accepts any int64); beyond 2^53 a double cannot hold every integer */
  if ((rc = get_int(root, "seed", -9007199254740992.0, 9007199254740992.0, &iv, err)) < 0)
    return -1;
  if (rc) {
    r->has_seed = 1;
    r->seed = (uint64_t)iv;
  }
  if (parse_stop(root, r, err)) return -1;
  if (get_bool(root, "stream", &r->stream, err) < 0) return -1;
  const cJSON *so = field(root, "stream_options");
  if (so) {
    if (!cJSON_IsObject(so)) BAD("stream_options", "'stream_options' must be an object");
    if (!r->stream) BAD("stream_options", "'stream_options' is only allowed with 'stream': true");
    if (get_bool(so, "include_usage", &r->include_usage, err) < 0) return -1;
  }
  const cJSON *user = field(root, "user");
  if (user && !cJSON_IsString(user)) BAD("user", "'user' must be a string");
  return check_unsupported(root, err);
}

int spill_srv_request_parse(spill_srv_kind kind, const char *body, size_t len,
                            spill_srv_request *req, spill_srv_error *err) {
  memset(req, 0, sizeof *req);
  memset(err, 0, sizeof *err);
  req->kind = kind;
  if (!body || len == 0) {
    spill_srv_error_set(err, 400, "invalid_request_error", NULL, NULL,
                        "the request body is empty (a JSON object is expected)");
    return -1;
  }
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  if (!root) {
    size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
    spill_srv_error_set(err, 400, "invalid_request_error", NULL, NULL,
                        "malformed JSON in the request body (near byte %zu)", at);
    return -1;
  }
  /* only whitespace may follow the value */
  size_t used = end ? (size_t)(end - body) : len;
  for (size_t i = used; i < len; i++)
    if (body[i] != ' ' && body[i] != '\n' && body[i] != '\r' && body[i] != '\t') {
      cJSON_Delete(root);
      spill_srv_error_set(err, 400, "invalid_request_error", NULL, NULL,
                          "malformed JSON in the request body (trailing bytes at %zu)", i);
      return -1;
    }
  int rc = parse_root(kind, root, req, err);
  cJSON_Delete(root);
  if (rc) {
    spill_srv_request_free(req);
    req->kind = kind;
  }
  return rc;
}
