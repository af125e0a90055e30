/* engine/tok/chat_template.c: the public chat-template calls
 * (spill_chat_render, spill_chat_render_json and their _budget forms):
 * builds the Jinja context from messages (or from any JSON object), parses
 * and renders the template with the interpreter of jinja_parse.c /
 * jinja_eval.c under the caller's budget (jinja_value.c charges it; the
 * context counts against its memory and steps too), and frees everything it
 * allocated in one arena. Stateless and thread-safe.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/tok/jinja_internal.h"
#include "engine/tok/spill_tok.h"

static int from_json(jctx *c, const cJSON *j, jv *out, int depth) {
  if (depth > 100) return spill_err_set(c->e, SPILL_E_FORMAT, "chat context: JSON nested too deep");
  memset(out, 0, sizeof *out);
  if (cJSON_IsNull(j)) { *out = jv_none(); return SPILL_OK; }
  if (cJSON_IsBool(j)) { *out = jv_bool(cJSON_IsTrue(j)); return SPILL_OK; }
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    /* cJSON keeps no int/float distinction: integral values within 2^53 are ints */
    if (d == (double)(int64_t)d && d > -9007199254740992.0 && d < 9007199254740992.0) {
      *out = jv_int((int64_t)d);
    } else {
      out->t = JV_FLOAT;
      out->u.f = d;
    }
    return SPILL_OK;
  }
  if (cJSON_IsString(j)) {
    *out = jv_str(c, j->valuestring, strlen(j->valuestring));
    return c->err;
  }
  if (cJSON_IsArray(j)) {
    jlist *l = jl_new(c);
    if (!l) return jc_oom(c);
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
      jv v;
      SPILL_TRY(from_json(c, it, &v, depth + 1));
      SPILL_TRY(jl_push(c, l, v));
    }
    out->t = JV_LIST;
    out->u.l = l;
    return SPILL_OK;
  }
  if (cJSON_IsObject(j)) {
    jdict *d = jd_new(c);
    if (!d) return jc_oom(c);
    const cJSON *it;
    cJSON_ArrayForEach(it, j) {
      jv v;
      SPILL_TRY(from_json(c, it, &v, depth + 1));
      jv k = jv_str(c, it->string, strlen(it->string));
      if (c->err) return c->err;
      SPILL_TRY(jd_set(c, d, k, v));
    }
    out->t = JV_DICT;
    out->u.d = d;
    return SPILL_OK;
  }
  return spill_err_set(c->e, SPILL_E_FORMAT, "chat context: unsupported JSON value");
}

static int render(jctx *c, const char *tmpl, jdict *globals, char **out) {
  jnode *root;
  SPILL_TRY(jinja_parse(c, tmpl, strlen(tmpl), &root));
  size_t n;
  return jinja_render(c, root, globals, out, &n);
}

int spill_chat_render_json_budget(const char *tmpl, const char *context_json,
                                  const spill_chat_budget *budget, char **out, spill_err *e) {
  SPILL_FAIL_IF(e, !tmpl || !context_json || !out, SPILL_E_INVALID_ARG,
                "chat template: NULL argument");
  *out = NULL;
  cJSON *j = NULL; /* the one reading layer: repeated keys, NULs refused */
  SPILL_TRY(spill_json_parse(context_json, strlen(context_json), "chat context", SPILL_E_FORMAT, &j, e));
  if (!cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return spill_err_set(e, SPILL_E_FORMAT, "chat context: not a JSON object");
  }
  jctx c;
  jc_init(&c, budget, e);
  jv ctx;
  int rc = from_json(&c, j, &ctx, 0);
  cJSON_Delete(j);
  if (rc == SPILL_OK) rc = render(&c, tmpl, ctx.u.d, out);
  ja_free(&c.arena);
  return rc;
}

int spill_chat_render_json(const char *tmpl, const char *context_json, char **out, spill_err *e) {
  return spill_chat_render_json_budget(tmpl, context_json, NULL, out, e);
}

/* a string value for the context, or the error (c->err) */
static int put_str(jctx *c, jdict *d, const char *key, const char *val) {
  jv k = jv_str(c, key, strlen(key));
  jv v = jv_str(c, val ? val : "", val ? strlen(val) : 0);
  if (c->err) return c->err;
  return jd_set(c, d, k, v);
}

int spill_chat_render_budget(const char *tmpl, const spill_chat_msg *msgs, size_t n_msgs,
                             int add_generation_prompt, const char *bos_token,
                             const char *eos_token, const spill_chat_budget *budget, char **out,
                             spill_err *e) {
  SPILL_FAIL_IF(e, !tmpl || !out || (n_msgs && !msgs), SPILL_E_INVALID_ARG,
                "chat template: NULL argument");
  *out = NULL;
  jctx c;
  jc_init(&c, budget, e);
  int rc = SPILL_OK;
  jdict *g = jd_new(&c);
  jlist *l = jl_new(&c);
  if (!g || !l) rc = jc_oom(&c);
  for (size_t i = 0; rc == SPILL_OK && i < n_msgs; i++) {
    if (!msgs[i].role || !msgs[i].content) {
      rc = spill_err_set(e, SPILL_E_INVALID_ARG, "chat template: message %zu has no role/content", i);
      break;
    }
    jdict *m = jd_new(&c);
    if (!m) { rc = jc_oom(&c); break; }
    rc = put_str(&c, m, "role", msgs[i].role);
    if (rc == SPILL_OK) rc = put_str(&c, m, "content", msgs[i].content);
    jv mv = {0};
    mv.t = JV_DICT;
    mv.u.d = m;
    if (rc == SPILL_OK) rc = jl_push(&c, l, mv);
  }
  if (rc == SPILL_OK) {
    jv lv = {0};
    lv.t = JV_LIST;
    lv.u.l = l;
    jv k = jv_str(&c, "messages", 8);
    rc = c.err ? c.err : jd_set(&c, g, k, lv);
  }
  if (rc == SPILL_OK) {
    jv k = jv_str(&c, "add_generation_prompt", 21);
    rc = c.err ? c.err : jd_set(&c, g, k, jv_bool(add_generation_prompt));
  }
  if (rc == SPILL_OK) rc = put_str(&c, g, "bos_token", bos_token);
  if (rc == SPILL_OK) rc = put_str(&c, g, "eos_token", eos_token);
  if (rc == SPILL_OK) rc = render(&c, tmpl, g, out);
  ja_free(&c.arena);
  return rc;
}

int spill_chat_render(const char *tmpl, const spill_chat_msg *msgs, size_t n_msgs,
                      int add_generation_prompt, const char *bos_token, const char *eos_token,
                      char **out, spill_err *e) {
  return spill_chat_render_budget(tmpl, msgs, n_msgs, add_generation_prompt, bos_token, eos_token,
                                  NULL, out, e);
}

static char *piece_str(const spill_tok *t, int32_t id) {
  size_t n = 0;
  const char *p = id >= 0 ? spill_tok_piece(t, id, &n) : NULL;
  char *s = malloc(n + 1);
  if (!s) return NULL;
  if (p) memcpy(s, p, n);
  s[n] = 0;
  return s;
}

int spill_tok_chat_render_budget(const spill_tok *t, const spill_chat_msg *msgs, size_t n_msgs,
                                 int add_generation_prompt, const spill_chat_budget *budget,
                                 char **out, spill_err *e) {
  SPILL_FAIL_IF(e, !t || !out, SPILL_E_INVALID_ARG, "chat template: NULL argument");
  *out = NULL;
  const char *tmpl = spill_tok_chat_template(t);
  SPILL_FAIL_IF(e, !tmpl, SPILL_E_UNSUPPORTED,
                "chat: the tokenizer has no chat template (tokenizer_config.json chat_template "
                "or GGUF tokenizer.chat_template)");
  char *bos = piece_str(t, spill_tok_bos(t)), *eos = piece_str(t, spill_tok_eos(t));
  int rc = bos && eos ? spill_chat_render_budget(tmpl, msgs, n_msgs, add_generation_prompt, bos,
                                                 eos, budget, out, e)
                      : spill_err_set(e, SPILL_E_NOMEM, "chat template: out of memory");
  free(bos);
  free(eos);
  return rc;
}

int spill_tok_chat_render(const spill_tok *t, const spill_chat_msg *msgs, size_t n_msgs,
                          int add_generation_prompt, char **out, spill_err *e) {
  return spill_tok_chat_render_budget(t, msgs, n_msgs, add_generation_prompt, NULL, out, e);
}
