/* harness/exp_config.c: experiment config parsing and validation.
 *
 * Every check names the JSON path of the offending value. The order is:
 * shape (known keys, types), then values (knobs through spill_config_set on
 * a scratch config, sizes, enums), then cross-checks (arms vs sweep overlap,
 * hypothesis arms and metric, plots that need a budget sweep). Nothing here
 * touches a model or starts a process.
 */
#define _POSIX_C_SOURCE 200809L
#include "harness/exp_config.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/exp_files.h"
#include "harness/exp_metrics.h"
#include "research/sim/routing_defaults.h"

uint64_t spill_exp_fnv1a(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* The error prefix: "<source>: ". */
typedef struct ctx {
  const char *src;
  spill_err *e;
} ctx;

static int fail(ctx *c, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(ctx *c, const char *path, const char *fmt, ...) {
  char reason[SPILL_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return spill_err_set(c->e, SPILL_E_CONFIG, "%s: %s: %s", c->src, path, reason);
}

static const char *type_name(const cJSON *j) {
  if (cJSON_IsString(j)) return "a string";
  if (cJSON_IsNumber(j)) return "a number";
  if (cJSON_IsBool(j)) return "a boolean";
  if (cJSON_IsArray(j)) return "an array";
  if (cJSON_IsObject(j)) return "an object";
  if (cJSON_IsNull(j)) return "null";
  return "invalid";
}

static int only_keys(ctx *c, const cJSON *obj, const char *path, const char *const *allowed) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      if (!strcmp(it->string, *a)) ok = 1;
    if (!ok) {
      char list[256] = "";
      for (const char *const *a = allowed; *a; a++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", a == allowed ? "" : ", ",
                 *a);
      return fail(c, path[0] ? path : "(top)", "unknown key \"%s\" (expected one of: %s)",
                  it->string, list);
    }
  }
  return SPILL_OK;
}

static void join(char *out, size_t n, const char *path, const char *key) {
  if (path[0]) snprintf(out, n, "%s.%s", path, key);
  else snprintf(out, n, "%s", key);
}

static int get_str(ctx *c, const cJSON *obj, const char *path, const char *key, int required,
                   char *out, size_t cap) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  char p[256];
  join(p, sizeof p, path, key);
  if (!it) return required ? fail(c, p, "missing (required)") : SPILL_OK;
  if (!cJSON_IsString(it)) return fail(c, p, "expected a string, got %s", type_name(it));
  size_t len = strlen(it->valuestring);
  if (len == 0) return fail(c, p, "empty string");
  if (len >= cap) return fail(c, p, "too long (%zu bytes, at most %zu)", len, cap - 1);
  memcpy(out, it->valuestring, len + 1);
  return SPILL_OK;
}

static int get_int(ctx *c, const cJSON *obj, const char *path, const char *key, long lo,
                   long hi, long dflt, long *out) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  char p[256];
  join(p, sizeof p, path, key);
  *out = dflt;
  if (!it) return SPILL_OK;
  if (!cJSON_IsNumber(it)) return fail(c, p, "expected an integer, got %s", type_name(it));
  double v = it->valuedouble;
  if (!isfinite(v) || v != floor(v)) return fail(c, p, "%g: expected an integer", v);
  if (v < lo || v > hi) return fail(c, p, "%.0f: out of range [%ld, %ld]", v, lo, hi);
  *out = (long)v;
  return SPILL_OK;
}

static int get_num(ctx *c, const cJSON *obj, const char *path, const char *key, double lo,
                   double hi, double dflt, double *out) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  char p[256];
  join(p, sizeof p, path, key);
  *out = dflt;
  if (!it) return SPILL_OK;
  if (!cJSON_IsNumber(it)) return fail(c, p, "expected a number, got %s", type_name(it));
  double v = it->valuedouble;
  if (!isfinite(v) || v < lo || v > hi) return fail(c, p, "%g: out of range [%g, %g]", v, lo, hi);
  *out = v;
  return SPILL_OK;
}

static int get_bool(ctx *c, const cJSON *obj, const char *path, const char *key, int dflt,
                    int *out) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
  char p[256];
  join(p, sizeof p, path, key);
  *out = dflt;
  if (!it) return SPILL_OK;
  if (!cJSON_IsBool(it)) return fail(c, p, "expected true or false, got %s", type_name(it));
  *out = cJSON_IsTrue(it);
  return SPILL_OK;
}

/* A size given as "8G" or as a number of bytes. */
static int get_size(ctx *c, const cJSON *it, const char *p, uint64_t *out) {
  if (cJSON_IsNumber(it)) {
    double v = it->valuedouble;
    if (!isfinite(v) || v != floor(v) || v < 1 || v > 1.8e19)
      return fail(c, p, "%g: not a size (a positive number of bytes or e.g. \"8G\")", v);
    *out = (uint64_t)v;
    return SPILL_OK;
  }
  if (!cJSON_IsString(it)) return fail(c, p, "expected a size such as \"8G\", got %s", type_name(it));
  uint64_t b = spill_parse_size(it->valuestring);
  if (!b) return fail(c, p, "\"%s\": not a size", it->valuestring);
  *out = b;
  return SPILL_OK;
}

/* A knob value in text form: strings as they are, integers in decimal,
 * other numbers with %.17g, booleans as true/false. */
static int knob_text(ctx *c, const cJSON *it, const char *p, char *out, size_t cap) {
  if (cJSON_IsString(it)) {
    if (strlen(it->valuestring) >= cap) return fail(c, p, "value too long");
    snprintf(out, cap, "%s", it->valuestring);
  } else if (cJSON_IsBool(it)) {
    snprintf(out, cap, "%s", cJSON_IsTrue(it) ? "true" : "false");
  } else if (cJSON_IsNumber(it)) {
    double v = it->valuedouble;
    if (!isfinite(v)) return fail(c, p, "not a finite number");
    if (v == floor(v) && fabs(v) < 9.007e15) snprintf(out, cap, "%lld", (long long)v);
    else snprintf(out, cap, "%.17g", v);
  } else {
    return fail(c, p, "expected a string, number or boolean, got %s", type_name(it));
  }
  return SPILL_OK;
}

/* Knobs the runner owns (per-run paths) and may not be set by a config. */
static const char *runner_owned(const char *key) {
  if (!strcmp(key, "profile")) return "set by the runner per run: use outputs.profile";
  if (!strcmp(key, "trace")) return "set by the runner per run: use outputs.trace";
  if (!strcmp(key, "trace_max_bytes")) return "use outputs.trace_max_bytes";
  if (!strcmp(key, "usable_ram")) return "use machine.emulate_ram";
  if (!strcmp(key, "routing_trace")) return "use workload.routing (\"trace:FILE\")";
  return NULL;
}

/* Validates one knob through the engine's own parser. */
static int check_knob(ctx *c, const char *p, const char *key, const char *value) {
  const char *why = runner_owned(key);
  if (why) return fail(c, p, "%s", why);
  spill_config scratch;
  spill_config_default(&scratch);
  spill_err ke = {0};
  if (spill_config_set(&scratch, key, value, &ke) < 0) return fail(c, p, "\"%s\": %s", value, ke.msg);
  return SPILL_OK;
}

static int parse_knobs(ctx *c, const cJSON *obj, const char *path, spill_exp_knob *out,
                       int *n_out) {
  if (!cJSON_IsObject(obj)) return fail(c, path, "expected an object of knobs, got %s", type_name(obj));
  int n = 0;
  for (const cJSON *it = obj->child; it; it = it->next) {
    char p[256];
    join(p, sizeof p, path, it->string);
    if (n >= SPILL_EXP_MAX_KNOBS) return fail(c, p, "too many knobs (at most %d)", SPILL_EXP_MAX_KNOBS);
    if (strlen(it->string) >= sizeof out[n].key) return fail(c, p, "unknown knob");
    snprintf(out[n].key, sizeof out[n].key, "%s", it->string);
    SPILL_TRY(knob_text(c, it, p, out[n].value, sizeof out[n].value));
    SPILL_TRY(check_knob(c, p, out[n].key, out[n].value));
    n++;
  }
  *n_out = n;
  return SPILL_OK;
}

static const spill_exp_knob *find_knob(const spill_exp_knob *k, int n, const char *key) {
  for (int i = 0; i < n; i++)
    if (!strcmp(k[i].key, key)) return &k[i];
  return NULL;
}

/* A path as given, with a leading "~/" standing for $HOME (models kept in
 * a machine-wide cache outside the repository, e.g. ~/.cache/spill/models). */
static int home_path(ctx *c, const char *p, const char *v, char *out, size_t n) {
  const char *home = getenv("HOME");
  int w = !strncmp(v, "~/", 2) && home && home[0] ? snprintf(out, n, "%s/%s", home, v + 2)
                                                  : snprintf(out, n, "%s", v);
  if (w < 0 || (size_t)w >= n) return fail(c, p, "path too long");
  return SPILL_OK;
}

static int parse_model(ctx *c, const cJSON *m, spill_exp_config *cfg) {
  if (!m) return fail(c, "model", "missing (required): a container path or a recipe such as {\"preset\": \"mini\"}");
  if (cJSON_IsString(m)) {
    if (!m->valuestring[0]) return fail(c, "model", "empty path");
    return home_path(c, "model", m->valuestring, cfg->model_path, sizeof cfg->model_path);
  }
  if (!cJSON_IsObject(m))
    return fail(c, "model", "expected a path or a recipe object, got %s", type_name(m));
  static const char *const keys[] = {"preset", "like", "like_trace", "ram", "disk", "seed",
                                     "attn_mix", "expert_dtype", "trunk_dtype", NULL};
  SPILL_TRY(only_keys(c, m, "model", keys));
  cfg->model_recipe = 1;
  char like[16] = "";
  SPILL_TRY(get_str(c, m, "model", "preset", 0, cfg->recipe_preset, sizeof cfg->recipe_preset));
  SPILL_TRY(get_str(c, m, "model", "like", 0, like, sizeof like));
  SPILL_TRY(get_str(c, m, "model", "like_trace", 0, cfg->recipe_like_trace,
                    sizeof cfg->recipe_like_trace));
  if (cfg->recipe_like_trace[0]) {
    /* shaped for a router trace: the preset (nano or mini, default mini)
     * gives everything but MoE layers, experts and top-k */
    if (like[0]) return fail(c, "model", "give one of \"like\" (k3) or \"like_trace\"");
    if (!cfg->recipe_preset[0]) snprintf(cfg->recipe_preset, sizeof cfg->recipe_preset, "mini");
    if (strcmp(cfg->recipe_preset, "nano") && strcmp(cfg->recipe_preset, "mini"))
      return fail(c, "model.preset", "\"%s\": a like_trace model takes nano or mini",
                  cfg->recipe_preset);
    spill_err te = {0};
    if (spill_routing_trace_inspect(cfg->recipe_like_trace, NULL, &cfg->recipe_trace, &te) < 0)
      return fail(c, "model.like_trace", "%s", te.msg);
  } else if (!!cfg->recipe_preset[0] == !!like[0]) {
    return fail(c, "model", "give exactly one of \"preset\" (nano, mini), \"like\" (k3) or "
                            "\"like_trace\" (a router trace)");
  }
  if (like[0]) {
    if (strcmp(like, "k3")) return fail(c, "model.like", "\"%s\": only \"k3\" is known", like);
    snprintf(cfg->recipe_preset, sizeof cfg->recipe_preset, "twin");
  } else if (strcmp(cfg->recipe_preset, "nano") && strcmp(cfg->recipe_preset, "mini") &&
             strcmp(cfg->recipe_preset, "twin")) {
    return fail(c, "model.preset", "\"%s\": expected nano, mini or twin", cfg->recipe_preset);
  }
  const cJSON *it;
  if ((it = cJSON_GetObjectItemCaseSensitive(m, "ram"))) {
    if (strcmp(cfg->recipe_preset, "twin")) return fail(c, "model.ram", "only for \"like\": \"k3\" twins");
    SPILL_TRY(get_size(c, it, "model.ram", &cfg->recipe_ram));
  } else if (!strcmp(cfg->recipe_preset, "twin")) {
    cfg->recipe_ram = 8ull << 30;
  }
  if ((it = cJSON_GetObjectItemCaseSensitive(m, "disk"))) {
    if (strcmp(cfg->recipe_preset, "twin")) return fail(c, "model.disk", "only for \"like\": \"k3\" twins");
    SPILL_TRY(get_size(c, it, "model.disk", &cfg->recipe_disk));
  }
  long seed;
  SPILL_TRY(get_int(c, m, "model", "seed", 1, 0x7fffffffL, 1, &seed));
  cfg->recipe_seed = (uint64_t)seed;
  snprintf(cfg->recipe_attn_mix, sizeof cfg->recipe_attn_mix, "k3");
  snprintf(cfg->recipe_expert_dtype, sizeof cfg->recipe_expert_dtype, "rvq3");
  snprintf(cfg->recipe_trunk_dtype, sizeof cfg->recipe_trunk_dtype, "q4");
  SPILL_TRY(get_str(c, m, "model", "attn_mix", 0, cfg->recipe_attn_mix, sizeof cfg->recipe_attn_mix));
  SPILL_TRY(get_str(c, m, "model", "expert_dtype", 0, cfg->recipe_expert_dtype,
                    sizeof cfg->recipe_expert_dtype));
  SPILL_TRY(get_str(c, m, "model", "trunk_dtype", 0, cfg->recipe_trunk_dtype,
                    sizeof cfg->recipe_trunk_dtype));
  static const char *const mixes[] = {"k3",     "k3-family", "mla",    "kda",    "gqa",
                                      "gqa-swa", "qwen35",   "gptoss", "glm4moe", NULL};
  static const char *const edt[] = {"rvq3", "f32", "q8", "q4", "mxfp4", NULL};
  static const char *const tdt[] = {"q4", "f32", NULL};
  struct {
    const char *path, *v;
    const char *const *ok;
  } enums[] = {{"model.attn_mix", cfg->recipe_attn_mix, mixes},
               {"model.expert_dtype", cfg->recipe_expert_dtype, edt},
               {"model.trunk_dtype", cfg->recipe_trunk_dtype, tdt}};
  for (int i = 0; i < 3; i++) {
    int ok = 0;
    for (const char *const *o = enums[i].ok; *o; o++) ok |= !strcmp(*o, enums[i].v);
    if (!ok) return fail(c, enums[i].path, "\"%s\": not a known value", enums[i].v);
  }
  char canon[256 + SPILL_EXP_PATH_MAX];
  /* ";routing=2": models generated since spill gen solved its routers for the
   * calibrated statistics (docs/GEN.md) do not reuse older cached ones;
   * ";routing=3;reuse=R": since the KDA layers carry next-token reuse (R, the
   * default spill gen solves for: recipes do not set it) */
  int n = snprintf(canon, sizeof canon,
                   "preset=%s;ram=%llu;disk=%llu;seed=%llu;attn=%s;edt=%s;tdt=%s;routing=3;reuse=%.3f",
                   cfg->recipe_preset, (unsigned long long)cfg->recipe_ram,
                   (unsigned long long)cfg->recipe_disk, (unsigned long long)cfg->recipe_seed,
                   cfg->recipe_attn_mix, cfg->recipe_expert_dtype, cfg->recipe_trunk_dtype,
                   SPILL_SIM_DEFAULT_REUSE);
  if (cfg->recipe_like_trace[0]) /* recipes without it keep their old hash */
    n += snprintf(canon + n, sizeof canon - (size_t)n, ";like_trace=%s;moe=%d;experts=%d;topk=%d",
                  cfg->recipe_like_trace, cfg->recipe_trace.n_layers,
                  cfg->recipe_trace.n_experts, cfg->recipe_trace.top_k);
  snprintf(cfg->recipe_hash, sizeof cfg->recipe_hash, "%016llx",
           (unsigned long long)spill_exp_fnv1a(canon, (size_t)n, SPILL_EXP_FNV_SEED));
  return SPILL_OK;
}

static int read_text_file(ctx *c, const char *p, const char *file, char **out) {
  char *buf = NULL;
  spill_err re = {0};
  size_t n = 0;
  if (spill_read_file(file, 1 << 20, &buf, &n, &re) < 0) {
    /* re.msg is "<file>: <reason>" */
    const char *why = strncmp(re.msg, file, strlen(file)) ? re.msg : re.msg + strlen(file) + 2;
    return fail(c, p, "\"%s\": %s", file, why);
  }
  const char *nul = memchr(buf, '\0', n);
  if (nul) { /* the prompt would end there */
    free(buf);
    return fail(c, p, "\"%s\": byte %zu: NUL byte", file, (size_t)(nul - buf));
  }
  if (n == 0) {
    free(buf);
    return fail(c, p, "\"%s\": empty", file);
  }
  size_t bad = spill_utf8_check(buf, n);
  if (bad < n) {
    free(buf);
    return fail(c, p, "\"%s\": byte %zu: invalid UTF-8", file, bad);
  }
  *out = buf;
  return SPILL_OK;
}

/* A list of names from a closed set (bench prompts, phases): each once. */
static int name_list(ctx *c, const cJSON *l, const char *p, const char *const *known, int n_known,
                     int *idx, int max, int *n_out) {
  if (!cJSON_IsArray(l)) return fail(c, p, "expected a list of names, got %s", type_name(l));
  int n = 0;
  char list[512] = "";
  for (int k = 0; k < n_known; k++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "", known[k]);
  for (const cJSON *v = l->child; v; v = v->next, n++) {
    char pv[96];
    snprintf(pv, sizeof pv, "%s[%d]", p, n);
    if (n >= max) return fail(c, p, "too many names (at most %d)", max);
    if (!cJSON_IsString(v)) return fail(c, pv, "expected a string, got %s", type_name(v));
    int f = -1;
    for (int k = 0; k < n_known && f < 0; k++)
      if (!strcmp(known[k], v->valuestring)) f = k;
    if (f < 0) return fail(c, pv, "\"%.64s\": expected one of: %s", v->valuestring, list);
    for (int j = 0; j < n; j++)
      if (idx[j] == f) return fail(c, pv, "\"%s\": duplicate", v->valuestring);
    idx[n] = f;
  }
  if (n == 0) return fail(c, p, "empty list");
  *n_out = n;
  return SPILL_OK;
}

/* workload.bench: {"pp", "tg", "prompts", "phases"} (harness/bench_workload.h). */
static int parse_bench(ctx *c, const cJSON *b, spill_exp_config *cfg) {
  const char *p = "workload.bench";
  if (!cJSON_IsObject(b)) return fail(c, p, "expected an object such as {\"pp\": 512, \"tg\": 128}, got %s", type_name(b));
  static const char *const keys[] = {"pp", "tg", "prompts", "phases", NULL};
  SPILL_TRY(only_keys(c, b, p, keys));
  long v;
  SPILL_TRY(get_int(c, b, p, "pp", 1, 1 << 16, 512, &v));
  cfg->bench_pp = (int)v;
  SPILL_TRY(get_int(c, b, p, "tg", 1, 1 << 16, 128, &v));
  cfg->bench_tg = (int)v;
  const char *names[SPILL_EXP_MAX_BENCH_PROMPTS];
  int n_names = spill_bench_n_prompts < SPILL_EXP_MAX_BENCH_PROMPTS ? spill_bench_n_prompts
                                                                    : SPILL_EXP_MAX_BENCH_PROMPTS;
  for (int i = 0; i < n_names; i++) names[i] = spill_bench_prompts[i].name;
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(b, "prompts");
  if (pr) {
    SPILL_TRY(name_list(c, pr, "workload.bench.prompts", names, n_names, cfg->bench_prompts,
                        SPILL_EXP_MAX_BENCH_PROMPTS, &cfg->bench_n_prompts));
  } else {
    for (int i = 0; i < n_names; i++) cfg->bench_prompts[i] = i;
    cfg->bench_n_prompts = n_names;
  }
  const cJSON *ph = cJSON_GetObjectItemCaseSensitive(b, "phases");
  cfg->bench_phases = (1 << SPILL_BENCH_COLD) | (1 << SPILL_BENCH_WARM);
  if (ph) {
    int idx[SPILL_BENCH_N_PHASES], n = 0;
    SPILL_TRY(name_list(c, ph, "workload.bench.phases", spill_bench_phase_names,
                        SPILL_BENCH_N_PHASES, idx, SPILL_BENCH_N_PHASES, &n));
    cfg->bench_phases = 0;
    for (int i = 0; i < n; i++) cfg->bench_phases |= 1 << idx[i];
  }
  cfg->bench = 1;
  cfg->decode_tokens = cfg->bench_tg;
  return SPILL_OK;
}

static int parse_workload(ctx *c, const cJSON *w, spill_exp_config *cfg) {
  if (!w) return fail(c, "workload", "missing (required)");
  if (!cJSON_IsObject(w)) return fail(c, "workload", "expected an object, got %s", type_name(w));
  static const char *const keys[] = {"prompt", "prompt_file", "decode_tokens", "prefill",
                                     "routing", "bench", NULL};
  SPILL_TRY(only_keys(c, w, "workload", keys));
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(w, "prompt");
  const cJSON *bench = cJSON_GetObjectItemCaseSensitive(w, "bench");
  if (bench) {
    static const char *const single[] = {"prompt", "prompt_file", "decode_tokens", NULL};
    for (const char *const *k = single; *k; k++)
      if (cJSON_GetObjectItemCaseSensitive(w, *k))
        return fail(c, "workload", "\"%s\" and \"bench\": a bench workload runs its own "
                                   "prompts (bench.prompts) and token counts (bench.pp, bench.tg)", *k);
    SPILL_TRY(parse_bench(c, bench, cfg));
  } else {
    SPILL_TRY(get_str(c, w, "workload", "prompt_file", 0, cfg->prompt_file, sizeof cfg->prompt_file));
    if (!!pr == !!cfg->prompt_file[0])
      return fail(c, "workload", "give exactly one of \"prompt\", \"prompt_file\" or \"bench\"");
    if (pr) {
      if (!cJSON_IsString(pr)) return fail(c, "workload.prompt", "expected a string, got %s", type_name(pr));
      if (!pr->valuestring[0]) return fail(c, "workload.prompt", "empty string");
      cfg->prompt = strdup(pr->valuestring);
      if (!cfg->prompt) return spill_err_set(c->e, SPILL_E_NOMEM, "prompt: no memory");
    } else {
      SPILL_TRY(read_text_file(c, "workload.prompt_file", cfg->prompt_file, &cfg->prompt));
    }
    long dt;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(w, "decode_tokens");
    if (!d) return fail(c, "workload.decode_tokens", "missing (required)");
    SPILL_TRY(get_int(c, w, "workload", "decode_tokens", 1, 1 << 20, 0, &dt));
    cfg->decode_tokens = (int)dt;
  }
  char prefill[16] = "chunked";
  SPILL_TRY(get_str(c, w, "workload", "prefill", 0, prefill, sizeof prefill));
  if (!strcmp(prefill, "chunked")) cfg->prefill_chunked = 1;
  else if (!strcmp(prefill, "sequential")) cfg->prefill_chunked = 0;
  else return fail(c, "workload.prefill", "\"%s\": expected chunked or sequential", prefill);
  char routing[sizeof cfg->routing] = "model";
  SPILL_TRY(get_str(c, w, "workload", "routing", 0, routing, sizeof routing));
  if (!strncmp(routing, "trace:", 6)) {
    /* The trace is read and validated now (shape, ids); whether the model
     * matches it is checked when the engine opens (and here for like_trace
     * recipes, in parse_all). */
    const char *file = routing + 6;
    if (cfg->bench)
      return fail(c, "workload.routing", "a bench workload routes with the model's routers "
                                         "(its prompts are not the trace's): use \"model\"");
    if (!file[0]) return fail(c, "workload.routing", "\"trace:\" needs a file");
    if (strlen(file) >= sizeof cfg->routing_trace) return fail(c, "workload.routing", "path too long");
    spill_err te = {0};
    if (spill_routing_trace_inspect(file, NULL, &cfg->routing_info, &te) < 0)
      return fail(c, "workload.routing", "%s", te.msg);
    if (cfg->decode_tokens >= cfg->routing_info.n_tokens)
      return fail(c, "workload.decode_tokens",
                  "%d: the routing trace %s drives %d positions, for the prompt's tokens and "
                  "the decoded ones", cfg->decode_tokens, file, cfg->routing_info.n_tokens);
    snprintf(cfg->routing_trace, sizeof cfg->routing_trace, "%s", file);
  } else if (strcmp(routing, "model")) {
    return fail(c, "workload.routing", "\"%s\": expected \"model\" or \"trace:FILE\"", routing);
  }
  snprintf(cfg->routing, sizeof cfg->routing, "%s", routing);
  return SPILL_OK;
}

static int cmp_size_text(const void *a, const void *b) {
  uint64_t x = spill_parse_size((const char *)a), y = spill_parse_size((const char *)b);
  if (!strcmp((const char *)a, "default") || !strcmp((const char *)a, "0")) x = 0;
  if (!strcmp((const char *)b, "default") || !strcmp((const char *)b, "0")) y = 0;
  return (x > y) - (x < y);
}

int spill_exp_axis_is_machine(const char *key) {
  return !strcmp(key, SPILL_EXP_AXIS_EMULATE_RAM) || !strcmp(key, SPILL_EXP_AXIS_WIRED) ||
         !strcmp(key, SPILL_EXP_AXIS_SWAP);
}

/* A wired or swap size of a machine profile: bytes or "0" (none). */
static int check_machine_size(ctx *c, const cJSON *it, const char *p, uint64_t *out) {
  if ((cJSON_IsNumber(it) && it->valuedouble == 0) || (cJSON_IsString(it) && !strcmp(it->valuestring, "0"))) {
    *out = 0;
    return SPILL_OK;
  }
  return get_size(c, it, p, out);
}

/* An emulated RAM size (machine.emulate_ram or a value of its sweep axis). */
static int check_emulate_ram(ctx *c, const cJSON *it, const char *p) {
  uint64_t v;
  SPILL_TRY(get_size(c, it, p, &v));
  if (v < (256ull << 20)) return fail(c, p, "below 256 MiB is not a machine this engine can run on");
  return SPILL_OK;
}

static int parse_sweep(ctx *c, const cJSON *s, spill_exp_config *cfg) {
  if (!s) return SPILL_OK;
  if (!cJSON_IsObject(s)) return fail(c, "sweep", "expected an object of knob lists, got %s", type_name(s));
  /* emulate_ram, then budget first: the slowest axes, so that inside one
   * emulated machine the budget only ever grows. */
  for (int pass = 0; pass < 3; pass++)
    for (const cJSON *it = s->child; it; it = it->next) {
      int is_ram = !strcmp(it->string, SPILL_EXP_AXIS_EMULATE_RAM);
      int is_mach = !strcmp(it->string, SPILL_EXP_AXIS_WIRED) || !strcmp(it->string, SPILL_EXP_AXIS_SWAP);
      int is_budget = !strcmp(it->string, "budget");
      if (is_mach) is_ram = 1; /* runner-owned: slowest, sorted upward */
      if ((pass == 0) != is_ram || (pass == 1) != is_budget) continue;
      char p[256];
      snprintf(p, sizeof p, "sweep.%s", it->string);
      if (cfg->n_axes >= SPILL_EXP_MAX_AXES) return fail(c, p, "too many swept knobs (at most %d)", SPILL_EXP_MAX_AXES);
      if (!cJSON_IsArray(it)) return fail(c, p, "expected a list of values, got %s", type_name(it));
      int n = cJSON_GetArraySize(it);
      if (n < 1) return fail(c, p, "empty list");
      if (n > SPILL_EXP_MAX_VALUES) return fail(c, p, "too many values (at most %d)", SPILL_EXP_MAX_VALUES);
      if (find_knob(cfg->base, cfg->n_base, it->string))
        return fail(c, p, "also set in base (a knob is either fixed or swept)");
      spill_exp_axis *ax = &cfg->axes[cfg->n_axes];
      if (strlen(it->string) >= sizeof ax->key) return fail(c, p, "unknown knob");
      snprintf(ax->key, sizeof ax->key, "%s", it->string);
      int i = 0;
      for (const cJSON *v = it->child; v; v = v->next, i++) {
        char pv[288];
        snprintf(pv, sizeof pv, "%s[%d]", p, i);
        SPILL_TRY(knob_text(c, v, pv, ax->values[i], sizeof ax->values[i]));
        uint64_t sz;
        if (is_mach) SPILL_TRY(check_machine_size(c, v, pv, &sz));
        else if (is_ram) SPILL_TRY(check_emulate_ram(c, v, pv));
        else SPILL_TRY(check_knob(c, pv, ax->key, ax->values[i]));
        for (int j = 0; j < i; j++)
          if (!strcmp(ax->values[j], ax->values[i])) return fail(c, pv, "\"%s\": duplicate value", ax->values[i]);
      }
      ax->n = n;
      if (is_budget || is_ram) qsort(ax->values, (size_t)n, sizeof ax->values[0], cmp_size_text);
      cfg->n_axes++;
    }
  long cells = 1;
  for (int a = 0; a < cfg->n_axes; a++) cells *= cfg->axes[a].n;
  if (cells > SPILL_EXP_MAX_CELLS) return fail(c, "sweep", "%ld cells (at most %d)", cells, SPILL_EXP_MAX_CELLS);
  return SPILL_OK;
}

/* An arm's name: unique, [A-Za-z0-9._-]. */
static int arm_name(ctx *c, const cJSON *it, const char *p, int i, spill_exp_config *cfg) {
  spill_exp_arm *arm = &cfg->arms[i];
  SPILL_TRY(get_str(c, it, p, "name", 1, arm->name, sizeof arm->name));
  for (const char *q = arm->name; *q; q++)
    if (!isalnum((unsigned char)*q) && *q != '-' && *q != '_' && *q != '.')
      return fail(c, p, "name \"%s\": use letters, digits, '-', '_' or '.'", arm->name);
  for (int j = 0; j < i; j++)
    if (!strcmp(cfg->arms[j].name, arm->name)) return fail(c, p, "duplicate arm name \"%s\"", arm->name);
  return SPILL_OK;
}

/* {"name", "peer": "llama.cpp", "args": {"load", "threads", "batch"}}: no
 * engine knobs, never exact (another engine's numerics), never the control. */
static int parse_peer_arm(ctx *c, const cJSON *it, const char *p, int i, spill_exp_config *cfg) {
  spill_exp_arm *arm = &cfg->arms[i];
  SPILL_TRY(arm_name(c, it, p, i, cfg));
  char pp[96];
  snprintf(pp, sizeof pp, "%s.peer", p);
  SPILL_TRY(get_str(c, it, p, "peer", 1, arm->peer.name, sizeof arm->peer.name));
  if (strcmp(arm->peer.name, "llama.cpp"))
    return fail(c, pp, "\"%s\": the known peer is \"llama.cpp\"", arm->peer.name);
  if (cJSON_GetObjectItemCaseSensitive(it, "set"))
    return fail(c, p, "a peer arm takes \"args\" (load, threads, batch), not engine knobs");
  if (cJSON_GetObjectItemCaseSensitive(it, "exact"))
    return fail(c, p, "a peer arm cannot be exact (another engine rounds differently)");
  if (cJSON_GetObjectItemCaseSensitive(it, "drafts_from"))
    return fail(c, p, "a peer arm takes no drafts_from (it is spill's draft source)");
  if (i == 0) return fail(c, p, "the first arm is the control: make it a spill arm");
  snprintf(arm->peer.load, sizeof arm->peer.load, "mmap");
  arm->peer.batch = cfg->prefill_chunked ? 512 : 1;
  arm->peer.repack = 1;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "args");
  if (args) {
    snprintf(pp, sizeof pp, "%s.args", p);
    if (!cJSON_IsObject(args)) return fail(c, pp, "expected an object, got %s", type_name(args));
    static const char *const keys[] = {"load", "threads", "batch", "repack", NULL};
    SPILL_TRY(only_keys(c, args, pp, keys));
    SPILL_TRY(get_str(c, args, pp, "load", 0, arm->peer.load, sizeof arm->peer.load));
    if (strcmp(arm->peer.load, "mmap") && strcmp(arm->peer.load, "none") &&
        strcmp(arm->peer.load, "mlock"))
      return fail(c, pp, "load \"%s\": expected mmap, none or mlock", arm->peer.load);
    long v;
    SPILL_TRY(get_int(c, args, pp, "threads", 1, 256, 0, &v));
    arm->peer.threads = (int)v;
    SPILL_TRY(get_int(c, args, pp, "batch", 1, 1 << 16, arm->peer.batch, &v));
    if (!cfg->prefill_chunked && v != 1)
      return fail(c, pp, "batch %ld: workload.prefill is sequential (one token per call)", v);
    arm->peer.batch = (int)v;
    SPILL_TRY(get_bool(c, args, pp, "repack", 1, &arm->peer.repack));
  }
  cfg->n_peer_arms++;
  return SPILL_OK;
}

/* The text of knob key for an arm: its own set, else base ("" = not set;
 * a swept knob is checked per value by the caller). */
static const char *arm_knob(const spill_exp_config *cfg, const spill_exp_arm *arm, const char *key) {
  for (int k = 0; k < arm->n_knobs; k++)
    if (!strcmp(arm->knobs[k].key, key)) return arm->knobs[k].value;
  for (int k = 0; k < cfg->n_base; k++)
    if (!strcmp(cfg->base[k].key, key)) return cfg->base[k].value;
  return "";
}

static int draft_off(const char *v) { return !v[0] || !strcmp(v, "off") || !strcmp(v, "0"); }

/* "drafts_from": "context" (default) | "greedy"; greedy needs the arm's
 * draft knob on in every cell. */
static int parse_drafts_from(ctx *c, const cJSON *it, const char *p, const spill_exp_config *cfg,
                             spill_exp_arm *arm) {
  char v[16] = "context", pd[80];
  snprintf(pd, sizeof pd, "%s.drafts_from", p);
  SPILL_TRY(get_str(c, it, p, "drafts_from", 0, v, sizeof v));
  if (!strcmp(v, "context")) return SPILL_OK;
  if (strcmp(v, "greedy")) return fail(c, pd, "\"%s\": expected context or greedy", v);
  arm->drafts_greedy = 1;
  for (int x = 0; x < cfg->n_axes; x++)
    if (!strcmp(cfg->axes[x].key, "draft"))
      for (int j = 0; j < cfg->axes[x].n; j++)
        if (draft_off(cfg->axes[x].values[j]))
          return fail(c, pd, "greedy drafts need the knob draft on (sweep.draft has %s)",
                      cfg->axes[x].values[j]);
  for (int x = 0; x < cfg->n_axes; x++)
    if (!strcmp(cfg->axes[x].key, "draft")) return SPILL_OK;
  if (draft_off(arm_knob(cfg, arm, "draft")))
    return fail(c, pd, "greedy drafts need the knob draft on (set \"draft\" in the arm or base)");
  return SPILL_OK;
}

static int parse_arms(ctx *c, const cJSON *a, spill_exp_config *cfg) {
  if (!a) {
    cfg->n_arms = 1;
    snprintf(cfg->arms[0].name, sizeof cfg->arms[0].name, "base");
    return SPILL_OK;
  }
  if (!cJSON_IsArray(a)) return fail(c, "arms", "expected a list of arms, got %s", type_name(a));
  int n = cJSON_GetArraySize(a);
  if (n < 1) return fail(c, "arms", "empty list");
  if (n > SPILL_EXP_MAX_ARMS) return fail(c, "arms", "%d arms (at most %d)", n, SPILL_EXP_MAX_ARMS);
  int i = 0;
  for (const cJSON *it = a->child; it; it = it->next, i++) {
    char p[64];
    snprintf(p, sizeof p, "arms[%d]", i);
    if (!cJSON_IsObject(it)) return fail(c, p, "expected an object, got %s", type_name(it));
    static const char *const keys[] = {"name", "set", "exact", "peer", "args", "drafts_from", NULL};
    SPILL_TRY(only_keys(c, it, p, keys));
    spill_exp_arm *arm = &cfg->arms[i];
    if (cJSON_GetObjectItemCaseSensitive(it, "peer") || cJSON_GetObjectItemCaseSensitive(it, "args")) {
      SPILL_TRY(parse_peer_arm(c, it, p, i, cfg));
      continue;
    }
    SPILL_TRY(arm_name(c, it, p, i, cfg));
    SPILL_TRY(get_bool(c, it, p, "exact", 0, &arm->exact));
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(it, "set");
    if (set) {
      char ps[80];
      snprintf(ps, sizeof ps, "%s.set", p);
      SPILL_TRY(parse_knobs(c, set, ps, arm->knobs, &arm->n_knobs));
      for (int k = 0; k < arm->n_knobs; k++) {
        char pk[128];
        snprintf(pk, sizeof pk, "%s.%s", ps, arm->knobs[k].key);
        for (int x = 0; x < cfg->n_axes; x++)
          if (!strcmp(cfg->axes[x].key, arm->knobs[k].key))
            return fail(c, pk, "also swept in sweep.%s (an arm may not set a swept knob)", arm->knobs[k].key);
      }
    }
    SPILL_TRY(parse_drafts_from(c, it, p, cfg, arm));
  }
  cfg->n_arms = n;
  for (int k = 0; k < n && cfg->bench; k++)
    if (cfg->arms[k].drafts_greedy)
      return fail(c, "arms", "arms[%d].drafts_from greedy drafts one prompt's continuation; a "
                             "bench workload runs several prompts", k);
  if (cfg->arms[0].exact)
    return fail(c, "arms[0].exact", "the first arm is the control that exact arms are compared with");
  return SPILL_OK;
}

static int arm_index(const spill_exp_config *cfg, const char *name) {
  for (int i = 0; i < cfg->n_arms; i++)
    if (!strcmp(cfg->arms[i].name, name)) return i;
  return -1;
}

/* hypothesis.cell_thresholds: {"<cell key>": ratio > 0, ...}; every key a
 * cell of the sweep (spill_exp_cell_key's spelling, e.g. "emulate_ram=8G"). */
static int parse_thresholds(ctx *c, const cJSON *t, spill_exp_config *cfg) {
  if (!t) return SPILL_OK;
  const char *p = "hypothesis.cell_thresholds";
  if (!cJSON_IsObject(t)) return fail(c, p, "expected an object of cell -> ratio, got %s", type_name(t));
  spill_exp_hypothesis *y = &cfg->hyp;
  for (const cJSON *it = t->child; it; it = it->next) {
    char pk[300];
    snprintf(pk, sizeof pk, "%s.%s", p, it->string);
    if (y->n_thresholds >= SPILL_EXP_MAX_THRESHOLDS)
      return fail(c, p, "too many cells (at most %d)", SPILL_EXP_MAX_THRESHOLDS);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble <= 0 ||
        it->valuedouble > 1e6)
      return fail(c, pk, "expected a ratio > 0, got %s", type_name(it));
    int found = 0;
    for (int cell = 0; cell < spill_exp_config_n_cells(cfg) && !found; cell++) {
      char key[200];
      spill_exp_cell_key(cfg, cell, key, sizeof key);
      found = !strcmp(key, it->string);
    }
    if (!found) return fail(c, pk, "not a cell of the sweep (cells are named like the table's rows, e.g. \"emulate_ram=8G\")");
    snprintf(y->thresholds[y->n_thresholds].cell, sizeof y->thresholds[0].cell, "%s", it->string);
    y->thresholds[y->n_thresholds++].ratio = it->valuedouble;
  }
  return SPILL_OK;
}

static int parse_hypothesis(ctx *c, const cJSON *h, spill_exp_config *cfg) {
  if (!h) return SPILL_OK;
  if (!cJSON_IsObject(h)) return fail(c, "hypothesis", "expected an object, got %s", type_name(h));
  static const char *const keys[] = {"claim", "metric", "direction", "min_effect", "alpha",
                                     "control", "treatment", "cell_thresholds", NULL};
  SPILL_TRY(only_keys(c, h, "hypothesis", keys));
  spill_exp_hypothesis *y = &cfg->hyp;
  y->present = 1;
  SPILL_TRY(get_str(c, h, "hypothesis", "claim", 1, y->claim, sizeof y->claim));
  SPILL_TRY(get_str(c, h, "hypothesis", "metric", 1, y->metric, sizeof y->metric));
  int mi = spill_exp_metric_find(y->metric);
  if (mi < 0) return fail(c, "hypothesis.metric", "\"%s\": not a metric (see docs/EXPERIMENTS.md)", y->metric);
  if (!spill_exp_config_has_metric(cfg, mi)) {
    const spill_exp_metric *m = &spill_exp_metrics(&(int){0})[mi];
    if (m->bench_phase && cfg->bench)
      return fail(c, "hypothesis.metric", "\"%s\": phase %s is not in workload.bench.phases",
                  y->metric, spill_bench_phase_names[m->bench_phase - 1]);
    return fail(c, "hypothesis.metric", cfg->bench
                ? "\"%s\": not a metric of a bench workload (e.g. %s; docs/EXPERIMENTS.md)"
                : "\"%s\": a metric of workload.bench only (this workload is one request, e.g. %s)",
                y->metric, spill_exp_config_primary_metric(cfg));
  }
  char dir[16] = "";
  SPILL_TRY(get_str(c, h, "hypothesis", "direction", 1, dir, sizeof dir));
  if (!strcmp(dir, "increase")) y->direction = 1;
  else if (!strcmp(dir, "decrease")) y->direction = -1;
  else return fail(c, "hypothesis.direction", "\"%s\": expected increase or decrease", dir);
  SPILL_TRY(get_num(c, h, "hypothesis", "min_effect", 0, 0.99, 0.0, &y->min_effect));
  SPILL_TRY(get_num(c, h, "hypothesis", "alpha", 0.001, 0.5, 0.05, &y->alpha));
  char ctl[32] = "", trt[32] = "";
  SPILL_TRY(get_str(c, h, "hypothesis", "control", 0, ctl, sizeof ctl));
  SPILL_TRY(get_str(c, h, "hypothesis", "treatment", 0, trt, sizeof trt));
  if (cfg->n_arms < 2) return fail(c, "hypothesis", "needs at least two arms to compare");
  y->control = ctl[0] ? arm_index(cfg, ctl) : 0;
  y->treatment = trt[0] ? arm_index(cfg, trt) : 1;
  if (y->control < 0) return fail(c, "hypothesis.control", "\"%s\": no such arm", ctl);
  if (y->treatment < 0) return fail(c, "hypothesis.treatment", "\"%s\": no such arm", trt);
  if (y->control == y->treatment) return fail(c, "hypothesis.treatment", "same arm as the control");
  if (cfg->repeats < 3) return fail(c, "repeats", "%d: a hypothesis needs at least 3 paired repeats", cfg->repeats);
  return parse_thresholds(c, cJSON_GetObjectItemCaseSensitive(h, "cell_thresholds"), cfg);
}

static int parse_outputs(ctx *c, const cJSON *o, spill_exp_config *cfg) {
  spill_exp_outputs *out = &cfg->out;
  int has_budget = 0; /* a budget or emulated-RAM sweep: the cliff's x axis */
  for (int a = 0; a < cfg->n_axes; a++)
    has_budget |= !strcmp(cfg->axes[a].key, "budget") || !strcmp(cfg->axes[a].key, SPILL_EXP_AXIS_EMULATE_RAM);
  out->table_md = out->table_csv = 1;
  out->plot_cliff = has_budget;
  out->plot_ab = cfg->n_arms >= 2;
  out->plot_timeline = 0;
  out->trace_max_bytes = 16ull << 20;
  if (!o) return SPILL_OK;
  if (!cJSON_IsObject(o)) return fail(c, "outputs", "expected an object, got %s", type_name(o));
  static const char *const keys[] = {"tables", "plots", "profile", "trace", "trace_max_bytes", NULL};
  SPILL_TRY(only_keys(c, o, "outputs", keys));
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tables");
  if (t) {
    if (!cJSON_IsArray(t)) return fail(c, "outputs.tables", "expected a list such as [\"md\", \"csv\"]");
    out->table_md = out->table_csv = 0;
    int i = 0;
    for (const cJSON *v = t->child; v; v = v->next, i++) {
      char p[64];
      snprintf(p, sizeof p, "outputs.tables[%d]", i);
      if (!cJSON_IsString(v)) return fail(c, p, "expected a string, got %s", type_name(v));
      if (!strcmp(v->valuestring, "md")) out->table_md = 1;
      else if (!strcmp(v->valuestring, "csv")) out->table_csv = 1;
      else return fail(c, p, "\"%s\": expected md or csv", v->valuestring);
    }
  }
  const cJSON *pl = cJSON_GetObjectItemCaseSensitive(o, "plots");
  if (pl) {
    if (!cJSON_IsArray(pl)) return fail(c, "outputs.plots", "expected a list such as [\"cliff\", \"ab\"]");
    out->plot_cliff = out->plot_ab = out->plot_timeline = 0;
    int i = 0;
    for (const cJSON *v = pl->child; v; v = v->next, i++) {
      char p[64];
      snprintf(p, sizeof p, "outputs.plots[%d]", i);
      if (!cJSON_IsString(v)) return fail(c, p, "expected a string, got %s", type_name(v));
      if (!strcmp(v->valuestring, "cliff")) {
        if (!has_budget) return fail(c, p, "\"cliff\" needs a budget or emulated-RAM sweep (sweep.budget, sweep.emulate_ram)");
        out->plot_cliff = 1;
      } else if (!strcmp(v->valuestring, "ab")) {
        if (cfg->n_arms < 2) return fail(c, p, "\"ab\" needs at least two arms");
        out->plot_ab = 1;
      } else if (!strcmp(v->valuestring, "timeline")) {
        if (cfg->bench)
          return fail(c, p, "\"timeline\" plots one request's tokens; a bench run is many "
                            "requests (their figures are in the rows' bench.samples)");
        out->plot_timeline = 1;
      } else {
        return fail(c, p, "\"%s\": expected cliff, ab or timeline", v->valuestring);
      }
    }
  }
  SPILL_TRY(get_bool(c, o, "outputs", "profile", 0, &out->profile));
  SPILL_TRY(get_bool(c, o, "outputs", "trace", 0, &out->trace));
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(o, "trace_max_bytes");
  if (tm) SPILL_TRY(get_size(c, tm, "outputs.trace_max_bytes", &out->trace_max_bytes));
  return SPILL_OK;
}

/* Slurm's spellings: partition and constraint names, [D-]HH:MM:SS-style
 * times, sizes with an optional K/M/G/T suffix. */
const char *spill_exp_cluster_check(const char *key, const char *v) {
  if (!v[0]) return "empty";
  const char *ok = !strcmp(key, "time") ? "0123456789:-"
                   : !strcmp(key, "mem") ? "0123456789KMGTkmgt"
                   : !strcmp(key, "constraint") ? "&|[]()*,_-."
                                                : "_-.,";
  int alnum = strcmp(key, "time") && strcmp(key, "mem");
  for (const char *q = v; *q; q++)
    if (!(alnum && isalnum((unsigned char)*q)) && !strchr(ok, *q))
      return !strcmp(key, "time")  ? "not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)"
             : !strcmp(key, "mem") ? "not a size (digits with an optional K, M, G or T)"
                                   : "unexpected character (letters, digits and Slurm's operators only)";
  if (!strcmp(key, "mem") && !isdigit((unsigned char)v[0])) return "not a size (digits with an optional K, M, G or T)";
  if (!strcmp(key, "mem") && v[strspn(v, "0123456789")] && v[strspn(v, "0123456789") + 1])
    return "not a size (digits with an optional K, M, G or T)";
  if (!strcmp(key, "time") && (!isdigit((unsigned char)v[0]) || strstr(v, "::") ||
                               v[strlen(v) - 1] == ':' || v[strlen(v) - 1] == '-'))
    return "not a Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)";
  return NULL;
}

static int parse_cluster(ctx *c, const cJSON *o, spill_exp_config *cfg) {
  if (!o) return SPILL_OK;
  if (!cJSON_IsObject(o)) return fail(c, "cluster", "expected an object, got %s", type_name(o));
  static const char *const keys[] = {"partition", "time", "mem", "constraint",
                                     "cpus_per_task", "array_max", NULL};
  SPILL_TRY(only_keys(c, o, "cluster", keys));
  spill_exp_cluster *k = &cfg->cluster;
  struct {
    const char *key;
    char *out;
    size_t cap;
  } s[] = {{"partition", k->partition, sizeof k->partition},
           {"time", k->time, sizeof k->time},
           {"mem", k->mem, sizeof k->mem},
           {"constraint", k->constraint, sizeof k->constraint}};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
    SPILL_TRY(get_str(c, o, "cluster", s[i].key, 0, s[i].out, s[i].cap));
    const char *why = s[i].out[0] ? spill_exp_cluster_check(s[i].key, s[i].out) : NULL;
    if (why) return fail(c, "cluster", "%s \"%s\": %s", s[i].key, s[i].out, why);
  }
  long v;
  SPILL_TRY(get_int(c, o, "cluster", "cpus_per_task", 1, 4096, 0, &v));
  k->cpus_per_task = (int)v;
  SPILL_TRY(get_int(c, o, "cluster", "array_max", 1, 100000, 0, &v));
  k->array_max = (int)v;
  return SPILL_OK;
}

/* model_gguf and what peer arms need: an imported container (a path) whose
 * GGUF they run, routed by the model (a trace forces spill's routing only). */
static int parse_peers(ctx *c, const cJSON *root, spill_exp_config *cfg) {
  char gguf[SPILL_EXP_PATH_MAX] = "";
  SPILL_TRY(get_str(c, root, "", "model_gguf", 0, gguf, sizeof gguf));
  SPILL_TRY(home_path(c, "model_gguf", gguf, cfg->model_gguf, sizeof cfg->model_gguf));
  if (!cfg->n_peer_arms) {
    if (cfg->model_gguf[0]) return fail(c, "model_gguf", "only used by peer arms (\"peer\": \"llama.cpp\")");
    return SPILL_OK;
  }
  if (!cfg->model_gguf[0])
    return fail(c, "model_gguf", "missing: peer arms run the GGUF file the container was imported from");
  if (cfg->model_recipe)
    return fail(c, "model", "peer arms need a container imported from model_gguf (`spill import`), not a generated recipe");
  if (cfg->routing_trace[0])
    return fail(c, "workload.routing", "a peer arm routes with the model's own routers: use \"model\"");
  return SPILL_OK;
}

/* "machine": emulate_ram, or a machine profile (ram, wired, swap,
 * swappiness) with its sweep axes; after parse_sweep. */
static int parse_machine(ctx *c, const cJSON *m, spill_exp_config *cfg) {
  if (m) {
    if (!cJSON_IsObject(m)) return fail(c, "machine", "expected an object, got %s", type_name(m));
    static const char *const mk[] = {"emulate_ram", "ram", "wired", "swap", "swappiness", NULL};
    SPILL_TRY(only_keys(c, m, "machine", mk));
    const cJSON *er = cJSON_GetObjectItemCaseSensitive(m, "emulate_ram");
    if (er) {
      SPILL_TRY(check_emulate_ram(c, er, "machine.emulate_ram"));
      SPILL_TRY(get_size(c, er, "machine.emulate_ram", &cfg->emulate_ram));
      if (cfg->n_axes && !strcmp(cfg->axes[0].key, SPILL_EXP_AXIS_EMULATE_RAM))
        return fail(c, "machine.emulate_ram", "also swept in sweep.emulate_ram");
    }
    const cJSON *mr = cJSON_GetObjectItemCaseSensitive(m, "ram");
    cfg->machine_swappiness = -1;
    if (mr) {
      SPILL_TRY(check_emulate_ram(c, mr, "machine.ram"));
      SPILL_TRY(get_size(c, mr, "machine.ram", &cfg->machine_ram));
      if (cfg->emulate_ram || (cfg->n_axes && !strcmp(cfg->axes[0].key, SPILL_EXP_AXIS_EMULATE_RAM)))
        return fail(c, "machine.ram", "a machine profile (ram, wired, swap) and emulate_ram are two "
                                      "emulations: use one");
      const cJSON *w = cJSON_GetObjectItemCaseSensitive(m, "wired");
      if (w) SPILL_TRY(check_machine_size(c, w, "machine.wired", &cfg->machine_wired));
      const cJSON *sw = cJSON_GetObjectItemCaseSensitive(m, "swap");
      if (sw) SPILL_TRY(check_machine_size(c, sw, "machine.swap", &cfg->machine_swap));
      long v2;
      SPILL_TRY(get_int(c, m, "machine", "swappiness", 0, 200, -1, &v2));
      cfg->machine_swappiness = (int)v2;
    } else {
      static const char *const need[] = {"wired", "swap", "swappiness"};
      for (int i = 0; i < 3; i++)
        if (cJSON_GetObjectItemCaseSensitive(m, need[i]))
          return fail(c, "machine", "\"%s\" needs \"ram\" (a machine profile)", need[i]);
    }
  }
  for (int a = 0; a < cfg->n_axes; a++) {
    const char *k = cfg->axes[a].key;
    if ((!strcmp(k, SPILL_EXP_AXIS_WIRED) || !strcmp(k, SPILL_EXP_AXIS_SWAP)) && !cfg->machine_ram)
      return fail(c, "sweep", "\"%s\" is an axis of a machine profile: set machine.ram", k);
    if (cfg->machine_ram && ((!strcmp(k, SPILL_EXP_AXIS_WIRED) && cJSON_GetObjectItemCaseSensitive(m, "wired")) ||
                             (!strcmp(k, SPILL_EXP_AXIS_SWAP) && cJSON_GetObjectItemCaseSensitive(m, "swap"))))
      return fail(c, "sweep", "\"%s\" is both set in machine and swept", k);
  }
  if (cfg->machine_ram)
    for (int cell = 0; cell < spill_exp_config_n_cells(cfg); cell++) {
      uint64_t r, w, sw;
      int sp;
      spill_exp_config_machine(cfg, cell, &r, &w, &sw, &sp);
      if (w >= r)
        return fail(c, "machine.wired", "%.3g GiB is not below machine.ram %.3g GiB", w / 1073741824.0,
                    r / 1073741824.0);
    }
  return SPILL_OK;
}

static int parse_all(ctx *c, const cJSON *root, spill_exp_config *cfg) {
  if (!cJSON_IsObject(root)) return fail(c, "(top)", "expected a JSON object, got %s", type_name(root));
  static const char *const keys[] = {"name", "description", "model", "workload", "base",
                                     "sweep", "arms", "repeats", "warmup", "order",
                                     "order_seed", "cold", "storage_path", "io_throttle",
                                     "machine", "hypothesis", "outputs", "cluster", "model_gguf", NULL};
  SPILL_TRY(only_keys(c, root, "", keys));
  SPILL_TRY(get_str(c, root, "", "name", 1, cfg->name, sizeof cfg->name));
  for (const char *q = cfg->name; *q; q++)
    if (!isalnum((unsigned char)*q) && *q != '-' && *q != '_')
      return fail(c, "name", "\"%s\": use letters, digits, '-' or '_' (it names a directory)", cfg->name);
  SPILL_TRY(get_str(c, root, "", "description", 0, cfg->description, sizeof cfg->description));
  SPILL_TRY(parse_model(c, cJSON_GetObjectItemCaseSensitive(root, "model"), cfg));
  SPILL_TRY(parse_workload(c, cJSON_GetObjectItemCaseSensitive(root, "workload"), cfg));
  if (cfg->routing_trace[0] && cfg->recipe_like_trace[0]) {
    /* both shapes are known now: a mismatch would only fail at engine open */
    const spill_routing_trace_info *r = &cfg->routing_info, *m = &cfg->recipe_trace;
    if (r->n_layers != m->n_layers || r->n_experts != m->n_experts || r->top_k != m->top_k)
      return fail(c, "workload.routing",
                  "trace %s (%d layers, %d experts, top-%d) does not fit the model.like_trace "
                  "model (%d MoE layers, %d experts, top-%d)",
                  cfg->routing_trace, r->n_layers, r->n_experts, r->top_k, m->n_layers,
                  m->n_experts, m->top_k);
  }
  const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base");
  if (base) SPILL_TRY(parse_knobs(c, base, "base", cfg->base, &cfg->n_base));
  const cJSON *thr = cJSON_GetObjectItemCaseSensitive(root, "io_throttle");
  if (thr) {
    if (find_knob(cfg->base, cfg->n_base, "io_throttle"))
      return fail(c, "io_throttle", "also set in base.io_throttle");
    if (cfg->n_base >= SPILL_EXP_MAX_KNOBS) return fail(c, "io_throttle", "too many knobs");
    spill_exp_knob *k = &cfg->base[cfg->n_base];
    snprintf(k->key, sizeof k->key, "io_throttle");
    SPILL_TRY(knob_text(c, thr, "io_throttle", k->value, sizeof k->value));
    SPILL_TRY(check_knob(c, "io_throttle", k->key, k->value));
    cfg->n_base++;
  }
  SPILL_TRY(parse_sweep(c, cJSON_GetObjectItemCaseSensitive(root, "sweep"), cfg));
  SPILL_TRY(parse_arms(c, cJSON_GetObjectItemCaseSensitive(root, "arms"), cfg));
  long v;
  SPILL_TRY(get_int(c, root, "", "repeats", 1, 1000, 3, &v));
  cfg->repeats = (int)v;
  SPILL_TRY(get_int(c, root, "", "warmup", 0, 100, 0, &v));
  cfg->warmup = (int)v;
  char order[16] = "interleaved";
  SPILL_TRY(get_str(c, root, "", "order", 0, order, sizeof order));
  if (!strcmp(order, "interleaved")) cfg->order = SPILL_EXP_ORDER_INTERLEAVED;
  else if (!strcmp(order, "abba")) cfg->order = SPILL_EXP_ORDER_ABBA;
  else if (!strcmp(order, "random")) cfg->order = SPILL_EXP_ORDER_RANDOM;
  else if (!strcmp(order, "blocked")) cfg->order = SPILL_EXP_ORDER_BLOCKED;
  else return fail(c, "order", "\"%s\": expected interleaved, abba, random or blocked", order);
  SPILL_TRY(get_int(c, root, "", "order_seed", 0, 0x7fffffffL, 1, &v));
  cfg->order_seed = (uint64_t)v;
  if (cJSON_GetObjectItemCaseSensitive(root, "order_seed") && cfg->order != SPILL_EXP_ORDER_RANDOM)
    return fail(c, "order_seed", "only meaningful with \"order\": \"random\"");
  SPILL_TRY(get_bool(c, root, "", "cold", 0, &cfg->cold));
  if (cfg->cold && cfg->bench)
    return fail(c, "cold", "a bench workload has its own cold phase (workload.bench.phases: "
                           "every prompt's first request starts with nothing cached)");
  SPILL_TRY(get_str(c, root, "", "storage_path", 0, cfg->storage_path, sizeof cfg->storage_path));
  SPILL_TRY(parse_machine(c, cJSON_GetObjectItemCaseSensitive(root, "machine"), cfg));
  SPILL_TRY(parse_peers(c, root, cfg));
  SPILL_TRY(parse_hypothesis(c, cJSON_GetObjectItemCaseSensitive(root, "hypothesis"), cfg));
  SPILL_TRY(parse_outputs(c, cJSON_GetObjectItemCaseSensitive(root, "outputs"), cfg));
  SPILL_TRY(parse_cluster(c, cJSON_GetObjectItemCaseSensitive(root, "cluster"), cfg));
  /* Every (cell, arm) must build an engine config (catches nothing new
   * today, but keeps knob interplay checks in one place if the engine adds
   * some). */
  for (int cell = 0; cell < spill_exp_config_n_cells(cfg); cell++)
    for (int a = 0; a < cfg->n_arms; a++) {
      spill_config sc;
      spill_err ke = {0};
      if (spill_exp_config_engine(cfg, cell, a, &sc, &ke) < 0)
        return fail(c, "arms", "cell %d arm %s: %s", cell, cfg->arms[a].name, ke.msg);
    }
  return SPILL_OK;
}

/* text[0..len): a file's real length, so a NUL in it is refused, not an end */
static int config_parse(const char *text, size_t len, const char *source, spill_exp_config *cfg,
                        spill_err *e) {
  memset(cfg, 0, sizeof *cfg);
  ctx c = {source && source[0] ? source : "config", e};
  if (source) snprintf(cfg->source, sizeof cfg->source, "%s", source);
  /* repeated keys (first-wins in cJSON), NULs and invalid UTF-8 (copied into
   * results JSON that other tools reject) are refused (spill_json_parse) */
  cJSON *root = NULL;
  int rc = spill_json_parse(text, len, c.src, SPILL_E_CONFIG, &root, e);
  if (rc == SPILL_OK) rc = parse_all(&c, root, cfg);
  cJSON_Delete(root);
  if (rc < 0) {
    char src[SPILL_EXP_PATH_MAX];
    memcpy(src, cfg->source, sizeof src);
    spill_exp_config_free(cfg);
    memcpy(cfg->source, src, sizeof src);
  }
  return rc;
}

int spill_exp_config_parse(const char *text, const char *source, spill_exp_config *cfg,
                           spill_err *e) {
  return config_parse(text, text ? strlen(text) : 0, source, cfg, e);
}

int spill_exp_config_load(const char *file, spill_exp_config *cfg, spill_err *e) {
  memset(cfg, 0, sizeof *cfg);
  char *buf = NULL;
  size_t len = 0;
  SPILL_TRY(spill_read_file(file, 1 << 20, &buf, &len, e));
  int rc = config_parse(buf, len, file, cfg, e);
  free(buf);
  return rc;
}

void spill_exp_config_free(spill_exp_config *cfg) {
  if (!cfg) return;
  free(cfg->prompt);
  memset(cfg, 0, sizeof *cfg);
}

int spill_exp_config_n_cells(const spill_exp_config *cfg) {
  int n = 1;
  for (int a = 0; a < cfg->n_axes; a++) n *= cfg->axes[a].n;
  return n;
}

void spill_exp_config_cell(const spill_exp_config *cfg, int c, const char **values_out) {
  for (int a = cfg->n_axes - 1; a >= 0; a--) {
    values_out[a] = cfg->axes[a].values[c % cfg->axes[a].n];
    c /= cfg->axes[a].n;
  }
}

void spill_exp_cell_key(const spill_exp_config *cfg, int c, char *buf, size_t n) {
  if (cfg->n_axes == 0) {
    snprintf(buf, n, "-");
    return;
  }
  const char *v[SPILL_EXP_MAX_AXES];
  spill_exp_config_cell(cfg, c, v);
  size_t off = 0;
  buf[0] = 0;
  for (int a = 0; a < cfg->n_axes && off < n; a++)
    off += (size_t)snprintf(buf + off, n - off, "%s%s=%s", a ? "," : "", cfg->axes[a].key, v[a]);
}

int spill_exp_config_engine(const spill_exp_config *cfg, int cell, int arm, spill_config *out,
                            spill_err *e) {
  spill_config_default(out);
  if (!cfg->prefill_chunked) SPILL_TRY(spill_config_set(out, "prefill_chunk", "1", e));
  for (int i = 0; i < cfg->n_base; i++)
    SPILL_TRY(spill_config_set(out, cfg->base[i].key, cfg->base[i].value, e));
  const char *vals[SPILL_EXP_MAX_AXES];
  spill_exp_config_cell(cfg, cell, vals);
  for (int a = 0; a < cfg->n_axes; a++)
    if (!spill_exp_axis_is_machine(cfg->axes[a].key))
      SPILL_TRY(spill_config_set(out, cfg->axes[a].key, vals[a], e));
  out->usable_ram = cfg->machine_ram ? cfg->machine_ram : spill_exp_config_emulate_ram(cfg, cell);
  const spill_exp_arm *am = &cfg->arms[cfg->arms[arm].peer.name[0] ? 0 : arm];
  for (int i = 0; i < am->n_knobs; i++)
    SPILL_TRY(spill_config_set(out, am->knobs[i].key, am->knobs[i].value, e));
  if (!cfg->prefill_chunked && out->prefill_chunk != 1)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "workload.prefill is sequential but prefill_chunk is set to %d",
                         out->prefill_chunk);
  out->routing_trace = cfg->routing_trace[0] ? cfg->routing_trace : NULL;
  return SPILL_OK;
}

uint64_t spill_exp_config_emulate_ram(const spill_exp_config *cfg, int c) {
  if (cfg->n_axes && !strcmp(cfg->axes[0].key, SPILL_EXP_AXIS_EMULATE_RAM)) {
    const char *vals[SPILL_EXP_MAX_AXES];
    spill_exp_config_cell(cfg, c, vals);
    return spill_parse_size(vals[0]);
  }
  return cfg->emulate_ram;
}

int spill_exp_config_machine(const spill_exp_config *cfg, int c, uint64_t *ram, uint64_t *wired,
                             uint64_t *swap, int *swappiness) {
  *ram = cfg->machine_ram;
  *wired = cfg->machine_wired;
  *swap = cfg->machine_swap;
  *swappiness = cfg->machine_swappiness;
  if (!cfg->machine_ram) return 0;
  const char *vals[SPILL_EXP_MAX_AXES];
  spill_exp_config_cell(cfg, c, vals);
  for (int a = 0; a < cfg->n_axes; a++) {
    uint64_t v = strcmp(vals[a], "0") ? spill_parse_size(vals[a]) : 0;
    if (!strcmp(cfg->axes[a].key, SPILL_EXP_AXIS_WIRED)) *wired = v;
    else if (!strcmp(cfg->axes[a].key, SPILL_EXP_AXIS_SWAP)) *swap = v;
  }
  return 1;
}

int spill_exp_config_has_metric(const spill_exp_config *cfg, int i) {
  int n;
  const spill_exp_metric *mt = spill_exp_metrics(&n);
  if (i < 0 || i >= n) return 0;
  if (mt[i].scope == SPILL_EXP_SCOPE_BOTH) return 1;
  if (!cfg->bench) return mt[i].scope == SPILL_EXP_SCOPE_REQUEST;
  return mt[i].scope == SPILL_EXP_SCOPE_BENCH && mt[i].bench_phase &&
         (cfg->bench_phases >> (mt[i].bench_phase - 1) & 1);
}

const char *spill_exp_config_primary_metric(const spill_exp_config *cfg) {
  if (!cfg->bench) return "decode_tok_per_s";
  return cfg->bench_phases & (1 << SPILL_BENCH_COLD) ? "tg_tok_per_s_cold" : "tg_tok_per_s_warm";
}

const char *spill_exp_config_hit_metric(const spill_exp_config *cfg) {
  if (!cfg->bench) return "decode_hit_rate";
  return cfg->bench_phases & (1 << SPILL_BENCH_COLD) ? "decode_hit_rate_cold"
                                                     : "decode_hit_rate_warm";
}

int spill_exp_config_bench_n_phases(const spill_exp_config *cfg) {
  return cfg->bench_phases & (1 << SPILL_BENCH_WARM) ? 2 : 1;
}

double spill_exp_config_threshold(const spill_exp_config *cfg, int c) {
  const spill_exp_hypothesis *h = &cfg->hyp;
  if (h->n_thresholds) {
    char key[200];
    spill_exp_cell_key(cfg, c, key, sizeof key);
    for (int i = 0; i < h->n_thresholds; i++)
      if (!strcmp(h->thresholds[i].cell, key)) return h->thresholds[i].ratio;
  }
  return h->direction > 0 ? 1 + h->min_effect : 1 - h->min_effect;
}

static cJSON *knobs_json(const spill_exp_knob *k, int n) {
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; i < n; i++) cJSON_AddStringToObject(o, k[i].key, k[i].value);
  return o;
}

char *spill_exp_config_resolved_json(const spill_exp_config *cfg) {
  static const char *const orders[] = {"interleaved", "abba", "random", "blocked"};
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "name", cfg->name);
  if (cfg->description[0]) cJSON_AddStringToObject(r, "description", cfg->description);
  if (cfg->model_recipe) {
    cJSON *m = cJSON_AddObjectToObject(r, "model");
    cJSON_AddStringToObject(m, "preset", cfg->recipe_preset);
    if (cfg->recipe_like_trace[0]) cJSON_AddStringToObject(m, "like_trace", cfg->recipe_like_trace);
    if (cfg->recipe_ram) cJSON_AddNumberToObject(m, "ram", (double)cfg->recipe_ram);
    if (cfg->recipe_disk) cJSON_AddNumberToObject(m, "disk", (double)cfg->recipe_disk);
    cJSON_AddNumberToObject(m, "seed", (double)cfg->recipe_seed);
    cJSON_AddStringToObject(m, "attn_mix", cfg->recipe_attn_mix);
    cJSON_AddStringToObject(m, "expert_dtype", cfg->recipe_expert_dtype);
    cJSON_AddStringToObject(m, "trunk_dtype", cfg->recipe_trunk_dtype);
  } else {
    cJSON_AddStringToObject(r, "model", cfg->model_path);
  }
  if (cfg->model_gguf[0]) cJSON_AddStringToObject(r, "model_gguf", cfg->model_gguf);
  cJSON *w = cJSON_AddObjectToObject(r, "workload");
  if (cfg->bench) {
    cJSON *b = cJSON_AddObjectToObject(w, "bench");
    cJSON_AddNumberToObject(b, "pp", cfg->bench_pp);
    cJSON_AddNumberToObject(b, "tg", cfg->bench_tg);
    cJSON *l = cJSON_AddArrayToObject(b, "prompts");
    for (int i = 0; i < cfg->bench_n_prompts; i++)
      cJSON_AddItemToArray(l, cJSON_CreateString(spill_bench_prompts[cfg->bench_prompts[i]].name));
    l = cJSON_AddArrayToObject(b, "phases");
    for (int ph = 0; ph < SPILL_BENCH_N_PHASES; ph++)
      if (cfg->bench_phases >> ph & 1)
        cJSON_AddItemToArray(l, cJSON_CreateString(spill_bench_phase_names[ph]));
  } else {
    cJSON_AddStringToObject(w, "prompt", cfg->prompt ? cfg->prompt : "");
    cJSON_AddNumberToObject(w, "decode_tokens", cfg->decode_tokens);
  }
  cJSON_AddStringToObject(w, "prefill", cfg->prefill_chunked ? "chunked" : "sequential");
  cJSON_AddStringToObject(w, "routing", cfg->routing);
  cJSON_AddItemToObject(r, "base", knobs_json(cfg->base, cfg->n_base));
  cJSON *s = cJSON_AddObjectToObject(r, "sweep");
  for (int a = 0; a < cfg->n_axes; a++) {
    cJSON *l = cJSON_AddArrayToObject(s, cfg->axes[a].key);
    for (int i = 0; i < cfg->axes[a].n; i++) cJSON_AddItemToArray(l, cJSON_CreateString(cfg->axes[a].values[i]));
  }
  cJSON *arms = cJSON_AddArrayToObject(r, "arms");
  for (int i = 0; i < cfg->n_arms; i++) {
    cJSON *o = cJSON_CreateObject();
    const spill_exp_arm *am = &cfg->arms[i];
    cJSON_AddStringToObject(o, "name", am->name);
    if (am->peer.name[0]) {
      cJSON_AddStringToObject(o, "peer", am->peer.name);
      cJSON *a = cJSON_AddObjectToObject(o, "args");
      cJSON_AddStringToObject(a, "load", am->peer.load);
      if (am->peer.threads) cJSON_AddNumberToObject(a, "threads", am->peer.threads);
      cJSON_AddNumberToObject(a, "batch", am->peer.batch);
      cJSON_AddBoolToObject(a, "repack", am->peer.repack);
    } else {
      cJSON_AddItemToObject(o, "set", knobs_json(am->knobs, am->n_knobs));
      cJSON_AddBoolToObject(o, "exact", am->exact);
      if (am->drafts_greedy) cJSON_AddStringToObject(o, "drafts_from", "greedy");
    }
    cJSON_AddItemToArray(arms, o);
  }
  cJSON_AddNumberToObject(r, "repeats", cfg->repeats);
  cJSON_AddNumberToObject(r, "warmup", cfg->warmup);
  cJSON_AddStringToObject(r, "order", orders[cfg->order]);
  if (cfg->order == SPILL_EXP_ORDER_RANDOM) cJSON_AddNumberToObject(r, "order_seed", (double)cfg->order_seed);
  cJSON_AddBoolToObject(r, "cold", cfg->cold);
  if (cfg->storage_path[0]) cJSON_AddStringToObject(r, "storage_path", cfg->storage_path);
  if (cfg->emulate_ram) {
    cJSON *m = cJSON_AddObjectToObject(r, "machine");
    cJSON_AddNumberToObject(m, "emulate_ram", (double)cfg->emulate_ram);
  }
  if (cfg->machine_ram) {
    cJSON *m = cJSON_AddObjectToObject(r, "machine");
    cJSON_AddNumberToObject(m, "ram", (double)cfg->machine_ram);
    int swept_w = 0, swept_s = 0; /* a swept one lives in sweep, not here */
    for (int a = 0; a < cfg->n_axes; a++) {
      swept_w |= !strcmp(cfg->axes[a].key, SPILL_EXP_AXIS_WIRED);
      swept_s |= !strcmp(cfg->axes[a].key, SPILL_EXP_AXIS_SWAP);
    }
    if (!swept_w) cJSON_AddNumberToObject(m, "wired", (double)cfg->machine_wired);
    if (!swept_s) cJSON_AddNumberToObject(m, "swap", (double)cfg->machine_swap);
    if (cfg->machine_swappiness >= 0) cJSON_AddNumberToObject(m, "swappiness", cfg->machine_swappiness);
  }
  if (cfg->hyp.present) {
    cJSON *h = cJSON_AddObjectToObject(r, "hypothesis");
    cJSON_AddStringToObject(h, "claim", cfg->hyp.claim);
    cJSON_AddStringToObject(h, "metric", cfg->hyp.metric);
    cJSON_AddStringToObject(h, "direction", cfg->hyp.direction > 0 ? "increase" : "decrease");
    cJSON_AddNumberToObject(h, "min_effect", cfg->hyp.min_effect);
    cJSON_AddNumberToObject(h, "alpha", cfg->hyp.alpha);
    cJSON_AddStringToObject(h, "control", cfg->arms[cfg->hyp.control].name);
    cJSON_AddStringToObject(h, "treatment", cfg->arms[cfg->hyp.treatment].name);
    if (cfg->hyp.n_thresholds) {
      cJSON *t = cJSON_AddObjectToObject(h, "cell_thresholds");
      for (int i = 0; i < cfg->hyp.n_thresholds; i++)
        cJSON_AddNumberToObject(t, cfg->hyp.thresholds[i].cell, cfg->hyp.thresholds[i].ratio);
    }
  }
  cJSON *o = cJSON_AddObjectToObject(r, "outputs");
  cJSON *t = cJSON_AddArrayToObject(o, "tables");
  if (cfg->out.table_md) cJSON_AddItemToArray(t, cJSON_CreateString("md"));
  if (cfg->out.table_csv) cJSON_AddItemToArray(t, cJSON_CreateString("csv"));
  cJSON *p = cJSON_AddArrayToObject(o, "plots");
  if (cfg->out.plot_cliff) cJSON_AddItemToArray(p, cJSON_CreateString("cliff"));
  if (cfg->out.plot_ab) cJSON_AddItemToArray(p, cJSON_CreateString("ab"));
  if (cfg->out.plot_timeline) cJSON_AddItemToArray(p, cJSON_CreateString("timeline"));
  cJSON_AddBoolToObject(o, "profile", cfg->out.profile);
  cJSON_AddBoolToObject(o, "trace", cfg->out.trace);
  cJSON_AddNumberToObject(o, "trace_max_bytes", (double)cfg->out.trace_max_bytes);
  char *text = cJSON_Print(r);
  cJSON_Delete(r);
  return text;
}
