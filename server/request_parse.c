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

#include "engine/spill.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void label(const char *s, char *out, size_t cap);

/* Every field is made valid UTF-8 cut on a character boundary (label): a
 * message quotes client bytes (a JSON parser's "near ..." excerpt, a key),
 * and a cut at the buffer's size could split a character (found by
 * fuzz_server_request: a 3-byte character cut after 2 bytes). */
void spill_srv_error_set(spill_srv_error *err, int http_status, const char *type,
                         const char *param, const char *code, const char *fmt, ...) {
  if (!err) return;
  err->http_status = http_status;
  snprintf(err->type, sizeof err->type, "%s", type ? type : "invalid_request_error");
  label(param ? param : "", err->param, sizeof err->param);
  snprintf(err->code, sizeof err->code, "%s", code ? code : "");
  char full[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(full, sizeof full, fmt, ap);
  va_end(ap);
  label(full, err->message, sizeof err->message);
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

/* Length of the well-formed UTF-8 character at p (no overlongs, surrogates
 * or code points past U+10FFFF), 0 if it is not one or p is at the NUL. */
static size_t utf8_len(const unsigned char *p) {
  unsigned c = *p;
  int n = c == 0 ? -1 : c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2
                                                   : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
  if (n < 0) return 0;
  unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
  unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
  for (int i = 1; i <= n; i++, lo = 0x80, hi = 0xBF)
    if (p[i] < lo || p[i] > hi) return 0;
  return (size_t)n + 1;
}

static int valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n;
  while (*p && (n = utf8_len(p))) p += n;
  return *p == 0;
}

/* A client-chosen name (a JSON key, a role) made fit to echo in an error:
 * valid UTF-8 of at most cap-4 bytes, cut on a character boundary with
 * "..." after a cut; invalid and control bytes are shown as '?'. */
static void label(const char *s, char *out, size_t cap) {
  const unsigned char *p = (const unsigned char *)s;
  size_t k = 0;
  while (*p) {
    size_t n = utf8_len(p), take = n ? n : 1;
    if (k + take > cap - 4) {
      memcpy(out + k, "...", 4);
      return;
    }
    if (!n || *p < 0x20 || *p == 0x7F) out[k++] = '?';
    else memcpy(out + k, p, n), k += n;
    p += take;
  }
  out[k] = 0;
}

/* The fields each endpoint knows, after the official client's request types
 * (openai 5.23.2, ChatCompletionCreateParams and CompletionCreateParams)
 * plus the top_k extension. Any other key is refused (400
 * unknown_parameter naming it), as the OpenAI API does: a misspelt knob
 * must not silently fall back to a default. How each is handled (acted on,
 * only a neutral value, informational) is in parse_root, check_unsupported
 * and check_informational; docs/SERVER.md lists them (checked by
 * request_parse_test against spill_srv_request_field). */
#define F_CHAT 1
#define F_CMPL 2
static const struct {
  const char *name;
  int kinds;
} k_fields[] = {
    {"model", F_CHAT | F_CMPL}, {"messages", F_CHAT}, {"prompt", F_CMPL},
    {"max_tokens", F_CHAT | F_CMPL}, {"max_completion_tokens", F_CHAT},
    {"temperature", F_CHAT | F_CMPL}, {"top_p", F_CHAT | F_CMPL}, {"top_k", F_CHAT | F_CMPL},
    {"seed", F_CHAT | F_CMPL}, {"stop", F_CHAT | F_CMPL}, {"stream", F_CHAT | F_CMPL},
    {"stream_options", F_CHAT | F_CMPL},
    /* accepted only with a neutral value (check_unsupported) */
    {"n", F_CHAT | F_CMPL}, {"frequency_penalty", F_CHAT | F_CMPL},
    {"presence_penalty", F_CHAT | F_CMPL}, {"logprobs", F_CHAT | F_CMPL},
    {"top_logprobs", F_CHAT}, {"logit_bias", F_CHAT | F_CMPL}, {"tools", F_CHAT},
    {"tool_choice", F_CHAT}, {"functions", F_CHAT}, {"function_call", F_CHAT},
    {"response_format", F_CHAT}, {"modalities", F_CHAT}, {"audio", F_CHAT},
    {"prediction", F_CHAT}, {"reasoning_effort", F_CHAT}, {"verbosity", F_CHAT},
    {"web_search_options", F_CHAT}, {"store", F_CHAT}, {"echo", F_CMPL}, {"suffix", F_CMPL},
    {"best_of", F_CMPL},
    /* informational: type-checked, no effect (check_informational) */
    {"user", F_CHAT | F_CMPL}, {"metadata", F_CHAT}, {"service_tier", F_CHAT},
    {"prompt_cache_key", F_CHAT}, {"safety_identifier", F_CHAT},
    {"parallel_tool_calls", F_CHAT},
};

const char *spill_srv_request_field(spill_srv_kind kind, int i) {
  int want = kind == SPILL_SRV_CHAT ? F_CHAT : F_CMPL;
  for (size_t k = 0; k < sizeof k_fields / sizeof k_fields[0]; k++)
    if ((k_fields[k].kinds & want) && i-- == 0) return k_fields[k].name;
  return NULL;
}

/* The first key of obj not in names[] (NULL-terminated), or NULL. */
static const char *unknown_key(const cJSON *obj, const char *const *names) {
  const cJSON *f;
  cJSON_ArrayForEach(f, obj) {
    int ok = 0;
    for (const char *const *q = names; *q && !ok; q++) ok = f->string && !strcmp(f->string, *q);
    if (!ok) return f->string ? f->string : "";
  }
  return NULL;
}

/* 400 unknown_parameter; param is prefix + the key ("messages[3].nme"). */
static int bad_key(const char *prefix, const char *key, spill_srv_error *err) {
  char name[64], param[sizeof err->param];
  label(key, name, sizeof name);
  snprintf(param, sizeof param, "%s%s", prefix, name);
  spill_srv_error_set(err, 400, "invalid_request_error", param, "unknown_parameter",
                      "Unknown parameter: '%s'.", param);
  return -1;
}

static int check_known_fields(spill_srv_kind kind, const cJSON *root, spill_srv_error *err) {
  int want = kind == SPILL_SRV_CHAT ? F_CHAT : F_CMPL;
  const cJSON *f;
  cJSON_ArrayForEach(f, root) {
    int ok = 0;
    for (size_t k = 0; k < sizeof k_fields / sizeof k_fields[0] && !ok; k++)
      ok = (k_fields[k].kinds & want) && f->string && !strcmp(f->string, k_fields[k].name);
    if (!ok) return bad_key("", f->string ? f->string : "", err);
  }
  return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": S}
 * parts, joined with nothing between them (as the OpenAI API does). */
static int get_content(const cJSON *c, int at, char **out, spill_srv_error *err) {
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
  int part = 0;
  const cJSON *p;
  cJSON_ArrayForEach(p, c) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text");
    if (!cJSON_IsObject(p) || !cJSON_IsString(type))
      BAD("messages", "content parts must be objects with a string 'type'");
    if (strcmp(type->valuestring, "text") != 0) {
      char name[48];
      label(type->valuestring, name, sizeof name);
      BAD("messages", "content part type '%s' is not supported (text only)", name);
    }
    if (!cJSON_IsString(text)) BAD("messages", "a text content part needs a string 'text'");
    static const char *const part_keys[] = {"type", "text", NULL};
    const char *extra = unknown_key(p, part_keys);
    if (extra) {
      char where[48];
      snprintf(where, sizeof where, "messages[%d].content[%d].", at, part);
      return bad_key(where, extra, err);
    }
    part++;
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

/* One message: its keys as the client's types allow them for its role
 * (name, refusal and tool_call_id are informational; tool_calls,
 * function_call and audio only null), then its content. `at` is its index,
 * for the error's param ("messages[2].nme"). */
static int parse_message(const cJSON *msg, int at, spill_srv_message *dst, spill_srv_error *err) {
  static const char *const plain[] = {"role", "content", "name", NULL};
  static const char *const assistant[] = {"role",          "content", "name", "refusal",
                                          "function_call", "audio",   "tool_calls", NULL};
  static const char *const tool[] = {"role", "content", "tool_call_id", NULL};
  static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
  char where[32], name[64];
  snprintf(where, sizeof where, "messages[%d].", at);
  if (!cJSON_IsObject(msg)) BAD("messages", "every message must be an object");
  const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
  if (!cJSON_IsString(role)) BAD("messages", "every message needs a string 'role'");
  int ok = 0;
  for (const char *const *q = roles; *q; q++) ok |= !strcmp(role->valuestring, *q);
  label(role->valuestring, name, sizeof name);
  if (!ok) BAD("messages", "unknown role '%s'", name);
  const char *const *keys = !strcmp(name, "assistant") ? assistant : !strcmp(name, "tool") ? tool : plain;
  const char *k = unknown_key(msg, keys);
  if (k) return bad_key(where, k, err);
  static const char *const info[] = {"name", "tool_call_id", "refusal", NULL};
  for (const char *const *q = info; *q; q++) {
    const cJSON *f = field(msg, *q);
    if (f && !cJSON_IsString(f)) BAD("messages", "message '%s' must be a string", *q);
  }
  if (field(msg, "tool_calls")) BAD("messages", "tool calls are not supported");
  if (field(msg, "function_call")) BAD("messages", "function calls are not supported");
  if (field(msg, "audio")) BAD("messages", "audio is not supported");
  if (!(dst->role = dup_str(role->valuestring))) NOMEM();
  return get_content(field(msg, "content"), at, &dst->content, err);
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
  const cJSON *msg;
  cJSON_ArrayForEach(msg, m) {
    int rc = parse_message(msg, r->n_messages, &r->messages[r->n_messages], err);
    if (r->messages[r->n_messages].role) r->n_messages++;
    if (rc) return -1;
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
 * behaviour. Sampling and output shape first, then tools and modalities
 * (check_unsupported_tools). */
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
  const cJSON *store = field(root, "store");
  if (store && !(cJSON_IsBool(store) && !cJSON_IsTrue(store)))
    BAD("store", "'store' is not supported (only false: nothing is kept after the reply)");
  return 0;
}

static int is_string_in(const cJSON *f, const char *const *values) {
  if (!cJSON_IsString(f)) return 0;
  for (const char *const *v = values; *v; v++)
    if (!strcmp(f->valuestring, *v)) return 1;
  return 0;
}

/* Tools, functions and non-text modalities: with no tools given, "none" and
 * "auto" choices mean plain text, so those are neutral. */
static int check_unsupported_tools(const cJSON *root, spill_srv_error *err) {
  static const char *const no_call[] = {"none", "auto", NULL};
  static const char *const text_only[] = {"text", NULL};
  const cJSON *tools = field(root, "tools");
  if (tools && !(cJSON_IsArray(tools) && cJSON_GetArraySize(tools) == 0))
    BAD("tools", "tools are not supported");
  const cJSON *fns = field(root, "functions");
  if (fns && !(cJSON_IsArray(fns) && cJSON_GetArraySize(fns) == 0))
    BAD("functions", "functions are not supported");
  const cJSON *tc = field(root, "tool_choice");
  if (tc && !is_string_in(tc, no_call)) BAD("tool_choice", "only tool_choice \"none\" or \"auto\" is supported");
  const cJSON *fc = field(root, "function_call");
  if (fc && !is_string_in(fc, no_call))
    BAD("function_call", "only function_call \"none\" or \"auto\" is supported");
  const cJSON *mod = field(root, "modalities");
  if (mod && !(cJSON_IsArray(mod) && cJSON_GetArraySize(mod) == 1 &&
               is_string_in(cJSON_GetArrayItem(mod, 0), text_only)))
    BAD("modalities", "only modalities [\"text\"] is supported");
  static const char *const null_only[] = {"audio", "prediction", "reasoning_effort", "verbosity",
                                          "web_search_options", NULL};
  for (const char *const *q = null_only; *q; q++)
    if (field(root, *q)) BAD(*q, "'%s' is not supported", *q);
  return 0;
}

/* Fields that describe the request and change nothing in the reply:
 * type-checked, then unused. */
static int check_informational(const cJSON *root, spill_srv_error *err) {
  static const char *const strings[] = {"user", "prompt_cache_key", "safety_identifier", NULL};
  for (const char *const *q = strings; *q; q++) {
    const cJSON *f = field(root, *q);
    if (f && !cJSON_IsString(f)) BAD(*q, "'%s' must be a string", *q);
  }
  const cJSON *md = field(root, "metadata");
  if (md) {
    if (!cJSON_IsObject(md)) BAD("metadata", "'metadata' must be an object of strings");
    const cJSON *v;
    cJSON_ArrayForEach(v, md) if (!cJSON_IsString(v))
        BAD("metadata", "'metadata' must be an object of strings");
  }
  static const char *const tiers[] = {"auto", "default", "flex", "scale", "priority", NULL};
  const cJSON *st = field(root, "service_tier");
  if (st && !is_string_in(st, tiers))
    BAD("service_tier", "'service_tier' must be one of auto, default, flex, scale, priority");
  int b;
  if (get_bool(root, "parallel_tool_calls", &b, err) < 0) return -1;
  return 0;
}

/* stream_options: include_usage acts; include_obfuscation is accepted (no
 * obfuscation padding is ever added); other keys are unknown. */
static int parse_stream_options(const cJSON *root, spill_srv_request *r, spill_srv_error *err) {
  static const char *const keys[] = {"include_usage", "include_obfuscation", NULL};
  const cJSON *so = field(root, "stream_options");
  if (!so) return 0;
  if (!cJSON_IsObject(so)) BAD("stream_options", "'stream_options' must be an object");
  if (!r->stream) BAD("stream_options", "'stream_options' is only allowed with 'stream': true");
  const char *k = unknown_key(so, keys);
  if (k) return bad_key("stream_options.", k, err);
  int b;
  if (get_bool(so, "include_obfuscation", &b, err) < 0) return -1;
  return get_bool(so, "include_usage", &r->include_usage, err) < 0 ? -1 : 0;
}

static int parse_root(spill_srv_kind kind, const cJSON *root, spill_srv_request *r,
                      spill_srv_error *err) {
  if (!cJSON_IsObject(root)) BAD(NULL, "the request body must be a JSON object");
  if (check_known_fields(kind, root, err)) return -1;
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
  if (parse_stream_options(root, r, err)) return -1;
  if (check_unsupported(root, err) || check_unsupported_tools(root, err)) return -1;
  return check_informational(root, err);
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
  /* the one reading layer (spill.h): malformed JSON, trailing bytes, a
   * repeated key (a gateway reading the last copy would see another
   * request), a NUL ("max_tokens\u0000zz" is not max_tokens) and invalid
   * UTF-8 are a 400 naming what and where */
  cJSON *root = NULL;
  spill_err pe = {0};
  if (spill_json_parse(body, len, NULL, SPILL_E_INVALID_ARG, &root, &pe) < 0) {
    spill_srv_error_set(err, 400, "invalid_request_error", NULL, NULL,
                        "malformed JSON in the request body (%s)", pe.msg);
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
