/* research/sim/sim_config.c: the simulator's JSON config (schema in
 * docs/SIM.md): defaults, parsing and validation.
 *
 * A config is untrusted input: unknown keys, wrong types and impossible
 * values fail with SPILL_E_CONFIG and "<source>: <json.path>: <reason>".
 * Sizes are a number of bytes or a string with a binary unit ("12G");
 * bandwidths a number of bytes/s or a size string per second. The K3 shape
 * comes from engine/plan (our own planner for the published shape); a
 * container ("dir") is resolved by the client (spill_sim_set_plan).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/base/json_util.h"
#include "engine/base/safe_file.h"
#include "engine/cache/cache_policy.h"
#include "engine/format/container.h"
#include "engine/plan/ram_plan.h"
#include "research/sim/sim.h"

#define CFG SPILL_E_CONFIG

void spill_sim_config_default(spill_sim_config *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "sim");
  c->routing = SPILL_SIM_ROUTING_SYNTHETIC;
  c->synth_tokens = 64;
  c->synth_zipf = 0.0;
  c->synth_top10_n = 16; /* calibrated defaults (sim.h, docs/SIM.md) */
  for (int i = 0; i < 16; i++) c->synth_top10_layers[i] = spill_sim_default_top10[i];
  c->synth_reuse = SPILL_SIM_DEFAULT_REUSE;
  c->synth_coact = SPILL_SIM_DEFAULT_COACT;
  for (int i = 0; i < 6; i++) c->la_precision[i] = spill_sim_default_la_precision[i];
  c->synth_seed = 1;
  c->prefill_chunk = 16;
  snprintf(c->policy, sizeof c->policy, "lfru");
  c->policy_seed = 1;
  c->cache_slots = -1;
  c->la_source = SPILL_SIM_LA_PRECISION;
  c->io_threads = 4;
  c->io_bandwidth = 2e9;
  c->io_latency_s = 100e-6;
  c->io_bucket_burst_s = -1;
  c->swap = 1;
  c->pagein_bandwidth = 1e9;
  c->fault_latency_s = 0;
  c->page_bytes = 4096;
  c->layer_overlap = 0.5;
}

void spill_sim_set_plan(spill_sim_config *c, uint32_t moe_layers, uint32_t n_experts,
                        uint32_t top_k, uint64_t record_bytes, uint64_t trunk_bytes,
                        uint64_t floor_bytes, uint64_t min_cache_bytes) {
  c->moe_layers = moe_layers;
  c->n_experts = n_experts;
  c->top_k = top_k;
  c->record_bytes = record_bytes;
  c->trunk_bytes = trunk_bytes;
  c->floor_bytes = floor_bytes;
  c->min_cache_bytes = min_cache_bytes;
}

typedef struct pctx {
  const char *src;
  spill_err *e;
} pctx;

static int fail(pctx *p, const char *path, const char *fmt, ...) {
  char msg[SPILL_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return spill_err_set(p->e, CFG, "%s: %s: %s", p->src, path, msg);
}

/* Errors from json_util name the path but not the file: prefix it. */
static int wrap(pctx *p, int rc) {
  if (rc < 0) spill_err_prefix(p->e, "%s: ", p->src);
  return rc;
}

/* A size: integer bytes, or a string with a binary unit. Absent: keep *out. */
static int get_size(pctx *p, const cJSON *o, const char *key, const char *path, int required,
                    uint64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  char full[160];
  snprintf(full, sizeof full, "%s%s%s", path, *path ? "." : "", key);
  if (!v) return required ? fail(p, full, "required") : SPILL_OK;
  if (cJSON_IsNumber(v)) {
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > 9.0e18 || floor(d) != d)
      return fail(p, full, "expected a non-negative integer number of bytes");
    *out = (uint64_t)d;
    return SPILL_OK;
  }
  if (cJSON_IsString(v)) {
    if (!strcmp(v->valuestring, "0")) {
      *out = 0;
      return SPILL_OK;
    }
    uint64_t b = spill_plan_parse_size(v->valuestring);
    if (!b) return fail(p, full, "\"%s\": not a size (e.g. \"12G\", \"512M\")", v->valuestring);
    *out = b;
    return SPILL_OK;
  }
  return fail(p, full, "expected a size (bytes, or a string like \"12G\")");
}

/* A bandwidth: number of bytes/s or a size string per second; > 0. */
static int get_rate(pctx *p, const cJSON *o, const char *key, const char *path, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  char full[160];
  snprintf(full, sizeof full, "%s.%s", path, key);
  if (!v) return SPILL_OK;
  if (cJSON_IsNumber(v)) {
    if (!isfinite(v->valuedouble) || v->valuedouble <= 0 || v->valuedouble > 1e13)
      return fail(p, full, "expected bytes/s in (0, 1e13]");
    *out = v->valuedouble;
    return SPILL_OK;
  }
  if (cJSON_IsString(v)) {
    uint64_t b = spill_plan_parse_size(v->valuestring);
    if (!b) return fail(p, full, "\"%s\": not a size per second (e.g. \"1.7G\")", v->valuestring);
    *out = (double)b;
    return SPILL_OK;
  }
  return fail(p, full, "expected bytes/s (a number, or a string like \"1.7G\")");
}

static int get_ms(pctx *p, const cJSON *o, const char *key, const char *path, double scale,
                  double *out_s) {
  double v = -1;
  if (!cJSON_GetObjectItemCaseSensitive(o, key)) return SPILL_OK;
  SPILL_TRY(wrap(p, spill_json_num(o, key, path, 0, 1e9, &v, CFG, p->e)));
  *out_s = v * scale;
  return SPILL_OK;
}

static int parse_model(pctx *p, const cJSON *m, spill_sim_config *c) {
  static const char *const keys[] = {"shape",  "dir",          "ctx",          "threads",
                                     "moe_layers", "experts",  "top_k",        "record_bytes",
                                     "trunk_bytes", "floor_bytes", "min_cache_bytes", NULL};
  SPILL_TRY(wrap(p, spill_json_only_keys(m, "model", keys, CFG, p->e)));
  const char *shape = NULL, *dir = NULL;
  SPILL_TRY(wrap(p, spill_json_str_opt(m, "shape", "model", 32, NULL, &shape, CFG, p->e)));
  SPILL_TRY(wrap(p, spill_json_str_opt(m, "dir", "model", SPILL_SIM_PATH_MAX - 1, NULL, &dir,
                                       CFG, p->e)));
  if (shape && dir) return fail(p, "model", "give one of \"shape\" and \"dir\"");
  int64_t ctx = 4096, threads = 2;
  SPILL_TRY(wrap(p, spill_json_int_opt(m, "ctx", "model", 1, 1 << 24, 4096, &ctx, CFG, p->e)));
  SPILL_TRY(wrap(p, spill_json_int_opt(m, "threads", "model", 1, 256, 2, &threads, CFG, p->e)));
  c->ctx = (int)ctx;
  c->threads = (int)threads;
  if (shape) {
    spill_arch a;
    spill_plan pl;
    spill_err se = {0};
    /* the plan `spill plan --shape` prints (engine/plan's table of shapes) */
    if (spill_plan_shape_compute(shape, (int)ctx, (int)threads, &a, &pl, &se) < 0)
      return fail(p, "model.shape", "%s", se.msg); /* names the known shapes */
    spill_sim_set_plan(c, (uint32_t)spill_arch_n_moe(&a), a.moe.n_experts, a.moe.top_k,
                       pl.record_bytes, pl.trunk, pl.floor, pl.min_cache);
  }
  if (dir) snprintf(c->model_dir, sizeof c->model_dir, "%s", dir);
  /* explicit numbers override (or, without shape/dir, define) the shape */
  int64_t v;
  if (cJSON_GetObjectItemCaseSensitive(m, "moe_layers")) {
    SPILL_TRY(wrap(p, spill_json_int(m, "moe_layers", "model", 1, 4096, &v, CFG, p->e)));
    c->moe_layers = (uint32_t)v;
  }
  if (cJSON_GetObjectItemCaseSensitive(m, "experts")) {
    SPILL_TRY(wrap(p, spill_json_int(m, "experts", "model", 1, 1 << 20, &v, CFG, p->e)));
    c->n_experts = (uint32_t)v;
  }
  if (cJSON_GetObjectItemCaseSensitive(m, "top_k")) {
    SPILL_TRY(wrap(p, spill_json_int(m, "top_k", "model", 1, 256, &v, CFG, p->e)));
    c->top_k = (uint32_t)v;
  }
  SPILL_TRY(get_size(p, m, "record_bytes", "model", 0, &c->record_bytes));
  SPILL_TRY(get_size(p, m, "trunk_bytes", "model", 0, &c->trunk_bytes));
  SPILL_TRY(get_size(p, m, "floor_bytes", "model", 0, &c->floor_bytes));
  SPILL_TRY(get_size(p, m, "min_cache_bytes", "model", 0, &c->min_cache_bytes));
  if (!dir) {
    if (!c->moe_layers || !c->n_experts || !c->top_k || !c->record_bytes)
      return fail(p, "model", "give \"shape\", \"dir\", or moe_layers, experts, top_k and record_bytes");
    if (c->top_k > c->n_experts) return fail(p, "model.top_k", "larger than experts (%u)", c->n_experts);
    if (!c->min_cache_bytes) c->min_cache_bytes = 2ull * c->top_k * c->record_bytes;
    if (!c->floor_bytes) c->floor_bytes = c->trunk_bytes + c->min_cache_bytes;
    if (c->floor_bytes < c->min_cache_bytes + c->trunk_bytes)
      return fail(p, "model.floor_bytes", "smaller than trunk_bytes + min_cache_bytes");
  }
  return SPILL_OK;
}

static int parse_routing(pctx *p, const cJSON *r, spill_sim_config *c) {
  static const char *const keys[] = {"trace", "tokens", "synthetic", "prefill_chunk", NULL};
  SPILL_TRY(wrap(p, spill_json_only_keys(r, "routing", keys, CFG, p->e)));
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(r, "trace");
  const cJSON *sy = cJSON_GetObjectItemCaseSensitive(r, "synthetic");
  if (!!tr == !!sy) return fail(p, "routing", "give exactly one of \"trace\" and \"synthetic\"");
  int64_t v;
  SPILL_TRY(wrap(p, spill_json_int_opt(r, "prefill_chunk", "routing", 1, 4096, 16, &v, CFG, p->e)));
  c->prefill_chunk = (int)v;
  if (tr) {
    const char *path = NULL;
    SPILL_TRY(wrap(p, spill_json_str(r, "trace", "routing", SPILL_SIM_PATH_MAX - 1, &path, CFG, p->e)));
    snprintf(c->trace_path, sizeof c->trace_path, "%s", path);
    c->routing = SPILL_SIM_ROUTING_TRACE;
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(r, "tokens");
    if (w) {
      if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) != 2)
        return fail(p, "routing.tokens", "expected [first, end) as two integers (end 0 = all)");
      const cJSON *a = cJSON_GetArrayItem(w, 0), *b = cJSON_GetArrayItem(w, 1);
      if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 0 ||
          a->valuedouble > 1e9 || b->valuedouble > 1e9 || floor(a->valuedouble) != a->valuedouble ||
          floor(b->valuedouble) != b->valuedouble)
        return fail(p, "routing.tokens", "expected two non-negative integers");
      c->tok_begin = (uint32_t)a->valuedouble;
      c->tok_end = (uint32_t)b->valuedouble;
      if (c->tok_end && c->tok_end <= c->tok_begin)
        return fail(p, "routing.tokens", "end %u must be 0 or > first %u", c->tok_end, c->tok_begin);
    }
    return SPILL_OK;
  }
  if (cJSON_GetObjectItemCaseSensitive(r, "tokens"))
    return fail(p, "routing.tokens", "only with \"trace\" (synthetic: routing.synthetic.tokens)");
  if (!cJSON_IsObject(sy)) return fail(p, "routing.synthetic", "expected an object");
  static const char *const skeys[] = {"tokens", "prefill", "zipf", "top10_share", "reuse",
                                      "coact", "seed", NULL};
  const char *sp = "routing.synthetic";
  SPILL_TRY(wrap(p, spill_json_only_keys(sy, sp, skeys, CFG, p->e)));
  c->routing = SPILL_SIM_ROUTING_SYNTHETIC;
  SPILL_TRY(wrap(p, spill_json_int(sy, "tokens", sp, 1, 1000000, &v, CFG, p->e)));
  c->synth_tokens = (uint32_t)v;
  SPILL_TRY(wrap(p, spill_json_int_opt(sy, "prefill", sp, 0, 100000, 0, &v, CFG, p->e)));
  c->synth_prefill = (uint32_t)v;
  SPILL_TRY(wrap(p, spill_json_int_opt(sy, "seed", sp, 0, INT64_C(1) << 53, 1, &v, CFG, p->e)));
  c->synth_seed = (uint64_t)v;
  const cJSON *zj = cJSON_GetObjectItemCaseSensitive(sy, "zipf");
  const cJSON *tj = cJSON_GetObjectItemCaseSensitive(sy, "top10_share");
  if (zj && tj) return fail(p, sp, "give at most one of \"zipf\" and \"top10_share\"");
  if (zj || tj) c->synth_top10_n = 0; /* the config states the skew: no default */
  SPILL_TRY(wrap(p, spill_json_num_opt(sy, "zipf", sp, 0, 8, 0, &c->synth_zipf, CFG, p->e)));
  if (cJSON_IsArray(tj)) { /* per layer, resampled by depth */
    int n = cJSON_GetArraySize(tj);
    if (n < 1 || n > SPILL_SIM_SKEW_MAX)
      return fail(p, "routing.synthetic.top10_share", "1 to %d per-layer shares, got %d",
                  SPILL_SIM_SKEW_MAX, n);
    for (int i = 0; i < n; i++) {
      const cJSON *x = cJSON_GetArrayItem(tj, i);
      if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0.1 && x->valuedouble <= 1)) {
        char path[64];
        snprintf(path, sizeof path, "routing.synthetic.top10_share[%d]", i);
        return fail(p, path, "expected a share in [0.1, 1]");
      }
      c->synth_top10_layers[i] = x->valuedouble;
    }
    c->synth_top10_n = (uint32_t)n;
  } else {
    SPILL_TRY(wrap(p, spill_json_num_opt(sy, "top10_share", sp, 0.1, 1, 0, &c->synth_top10_share,
                                         CFG, p->e)));
    if (tj && c->synth_top10_share <= 0)
      return fail(p, "routing.synthetic.top10_share", "must be > 0");
  }
  SPILL_TRY(wrap(p, spill_json_num_opt(sy, "reuse", sp, 0, 1, SPILL_SIM_DEFAULT_REUSE,
                                       &c->synth_reuse, CFG, p->e)));
  SPILL_TRY(wrap(p, spill_json_num_opt(sy, "coact", sp, 0, 1, SPILL_SIM_DEFAULT_COACT,
                                       &c->synth_coact, CFG, p->e)));
  return SPILL_OK;
}

static int parse_lookahead(pctx *p, const cJSON *o, spill_sim_config *c) {
  static const char *const keys[] = {"width", "source", "precision", NULL};
  SPILL_TRY(wrap(p, spill_json_only_keys(o, "lookahead", keys, CFG, p->e)));
  int64_t v;
  SPILL_TRY(wrap(p, spill_json_int_opt(o, "width", "lookahead", 0, SPILL_SIM_MAX_RANKS, 0, &v, CFG, p->e)));
  c->la_width = (int)v;
  const char *src = NULL;
  SPILL_TRY(wrap(p, spill_json_str_opt(o, "source", "lookahead", 16, "precision", &src, CFG, p->e)));
  if (!strcmp(src, "trace")) c->la_source = SPILL_SIM_LA_TRACE;
  else if (!strcmp(src, "precision")) c->la_source = SPILL_SIM_LA_PRECISION;
  else return fail(p, "lookahead.source", "\"%s\": expected \"trace\" or \"precision\"", src);
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "precision");
  if (pr) {
    if (c->la_source == SPILL_SIM_LA_TRACE)
      return fail(p, "lookahead.precision", "not with source \"trace\" (the trace has the predictions)");
    if (!cJSON_IsArray(pr)) return fail(p, "lookahead.precision", "expected an array of probabilities by rank");
    int n = cJSON_GetArraySize(pr);
    if (n < c->la_width)
      return fail(p, "lookahead.precision", "%d entries for width %d: one per rank needed", n, c->la_width);
    if (n > SPILL_SIM_MAX_RANKS) return fail(p, "lookahead.precision", "at most %d ranks", SPILL_SIM_MAX_RANKS);
    for (int i = 0; i < n; i++) {
      const cJSON *x = cJSON_GetArrayItem(pr, i);
      if (!cJSON_IsNumber(x) || !(x->valuedouble >= 0 && x->valuedouble <= 1)) {
        char path[64];
        snprintf(path, sizeof path, "lookahead.precision[%d]", i);
        return fail(p, path, "expected a probability in [0, 1]");
      }
      c->la_precision[i] = x->valuedouble;
    }
  } else if (c->la_width > 6 && c->la_source == SPILL_SIM_LA_PRECISION) {
    return fail(p, "lookahead.precision",
                "required with width > 6 and source \"precision\" (the K3 default covers 6 ranks)");
  }
  return SPILL_OK;
}

static int parse_compute(pctx *p, const cJSON *o, spill_sim_config *c) {
  static const char *const keys[] = {"per_layer_ms", "per_expert_ms", "per_token_ms", "token_ms",
                                     "expert_share", "outside_share", "layer_overlap", NULL};
  SPILL_TRY(wrap(p, spill_json_only_keys(o, "compute", keys, CFG, p->e)));
  SPILL_TRY(wrap(p, spill_json_num_opt(o, "layer_overlap", "compute", 0, 1, 0.5, &c->layer_overlap,
                                       CFG, p->e)));
  int split = !!cJSON_GetObjectItemCaseSensitive(o, "token_ms");
  int parts = cJSON_GetObjectItemCaseSensitive(o, "per_layer_ms") ||
              cJSON_GetObjectItemCaseSensitive(o, "per_expert_ms") ||
              cJSON_GetObjectItemCaseSensitive(o, "per_token_ms");
  if (split && parts)
    return fail(p, "compute", "give either token_ms (+ shares) or per_layer_ms / per_expert_ms / per_token_ms");
  if (!split) {
    if (cJSON_GetObjectItemCaseSensitive(o, "expert_share") ||
        cJSON_GetObjectItemCaseSensitive(o, "outside_share"))
      return fail(p, "compute", "expert_share and outside_share only with token_ms");
    SPILL_TRY(get_ms(p, o, "per_layer_ms", "compute", 1e-3, &c->t_layer_s));
    SPILL_TRY(get_ms(p, o, "per_expert_ms", "compute", 1e-3, &c->t_expert_s));
    SPILL_TRY(get_ms(p, o, "per_token_ms", "compute", 1e-3, &c->t_token_s));
    return SPILL_OK;
  }
  double tok = 0, es = 0, os = 0;
  SPILL_TRY(wrap(p, spill_json_num(o, "token_ms", "compute", 0, 1e9, &tok, CFG, p->e)));
  SPILL_TRY(wrap(p, spill_json_num_opt(o, "expert_share", "compute", 0, 1, 0.5, &es, CFG, p->e)));
  SPILL_TRY(wrap(p, spill_json_num_opt(o, "outside_share", "compute", 0, 1, 0, &os, CFG, p->e)));
  if (es + os > 1) return fail(p, "compute", "expert_share + outside_share = %g > 1", es + os);
  if (!c->moe_layers || !c->top_k) return fail(p, "compute.token_ms", "needs the model shape first");
  tok *= 1e-3;
  c->t_expert_s = tok * es / ((double)c->moe_layers * c->top_k);
  c->t_layer_s = tok * (1 - es - os) / (double)c->moe_layers;
  c->t_token_s = tok * os;
  return SPILL_OK;
}

static int parse_machine(pctx *p, const cJSON *o, spill_sim_config *c) {
  static const char *const keys[] = {"ram", "reserved", "extra", "swap", "trunk", "pagein_bandwidth",
                                     "fault_latency_us", "page_bytes", "trunk_pieces", NULL};
  SPILL_TRY(wrap(p, spill_json_only_keys(o, "machine", keys, CFG, p->e)));
  SPILL_TRY(get_size(p, o, "ram", "machine", 1, &c->ram_bytes));
  if (!c->ram_bytes) return fail(p, "machine.ram", "must be > 0");
  SPILL_TRY(get_size(p, o, "reserved", "machine", 0, &c->reserved_bytes));
  SPILL_TRY(get_size(p, o, "extra", "machine", 0, &c->extra_bytes));
  if (c->reserved_bytes + c->extra_bytes >= c->ram_bytes)
    return fail(p, "machine.reserved", "reserved + extra leave no RAM for the engine");
  SPILL_TRY(wrap(p, spill_json_bool_opt(o, "swap", "machine", 1, &c->swap, CFG, p->e)));
  const char *tr = NULL;
  SPILL_TRY(wrap(p, spill_json_str_opt(o, "trunk", "machine", 8, "anon", &tr, CFG, p->e)));
  if (!strcmp(tr, "file")) c->trunk_file = 1;
  else if (!strcmp(tr, "anon")) c->trunk_file = 0;
  else return fail(p, "machine.trunk", "\"%s\": expected \"anon\" (read/malloc) or \"file\" (mmap)", tr);
  SPILL_TRY(get_rate(p, o, "pagein_bandwidth", "machine", &c->pagein_bandwidth));
  double us = 0;
  SPILL_TRY(wrap(p, spill_json_num_opt(o, "fault_latency_us", "machine", 0, 1e6, 0, &us, CFG, p->e)));
  c->fault_latency_s = us * 1e-6;
  int64_t v;
  SPILL_TRY(wrap(p, spill_json_int_opt(o, "page_bytes", "machine", 512, 1 << 24, 4096, &v, CFG, p->e)));
  c->page_bytes = (uint64_t)v;
  SPILL_TRY(wrap(p, spill_json_int_opt(o, "trunk_pieces", "machine", 0, 1 << 20, 0, &v, CFG, p->e)));
  c->trunk_pieces = (uint32_t)v;
  return SPILL_OK;
}

/* text[0..len): parsed by the one reading layer (a repeated key, a NUL or
 * invalid UTF-8 refused by name: docs/RELIABILITY.md). */
static int parse_text(const char *text, size_t len, const char *source, spill_sim_config *c,
                      spill_err *e) {
  pctx p = {source ? source : "sim config", e};
  spill_sim_config_default(c);
  cJSON *root = NULL;
  spill_err pe = {0};
  if (spill_json_parse(text, len, NULL, CFG, &root, &pe) < 0) return fail(&p, "(root)", "%s", pe.msg);
  int rc = SPILL_OK;
#define STEP(x) do { if ((rc = (x)) < 0) goto out; } while (0)
  if (!cJSON_IsObject(root)) STEP(fail(&p, "(root)", "expected an object"));
  static const char *const keys[] = {"name", "description", "model", "routing", "cache", "lookahead",
                                     "io", "compute", "machine", "budgets", "notes", NULL};
  STEP(wrap(&p, spill_json_only_keys(root, "", keys, CFG, e)));
  const char *name = NULL;
  STEP(wrap(&p, spill_json_str_opt(root, "name", "", 63, "sim", &name, CFG, e)));
  snprintf(c->name, sizeof c->name, "%s", name);
  const cJSON *o = NULL;
  STEP(wrap(&p, spill_json_obj(root, "model", "", &o, CFG, e)));
  STEP(parse_model(&p, o, c));
  STEP(wrap(&p, spill_json_obj(root, "routing", "", &o, CFG, e)));
  STEP(parse_routing(&p, o, c));
  if (cJSON_GetObjectItemCaseSensitive(root, "cache")) {
    STEP(wrap(&p, spill_json_obj(root, "cache", "", &o, CFG, e)));
    static const char *const ck[] = {"policy", "seed", "slots", NULL};
    STEP(wrap(&p, spill_json_only_keys(o, "cache", ck, CFG, e)));
    const char *pol = NULL;
    STEP(wrap(&p, spill_json_str_opt(o, "policy", "cache", 15, "lfru", &pol, CFG, e)));
    if (!spill_cache_policy_find(pol)) STEP(fail(&p, "cache.policy", "\"%s\": unknown policy", pol));
    snprintf(c->policy, sizeof c->policy, "%s", pol);
    int64_t v;
    STEP(wrap(&p, spill_json_int_opt(o, "seed", "cache", 0, INT64_C(1) << 53, 1, &v, CFG, e)));
    c->policy_seed = (uint64_t)v;
    STEP(wrap(&p, spill_json_int_opt(o, "slots", "cache", -1, 1 << 30, -1, &v, CFG, e)));
    c->cache_slots = v;
  }
  if (cJSON_GetObjectItemCaseSensitive(root, "lookahead")) {
    STEP(wrap(&p, spill_json_obj(root, "lookahead", "", &o, CFG, e)));
    STEP(parse_lookahead(&p, o, c));
  }
  if (cJSON_GetObjectItemCaseSensitive(root, "io")) {
    STEP(wrap(&p, spill_json_obj(root, "io", "", &o, CFG, e)));
    static const char *const ik[] = {"threads", "bandwidth", "latency_us", "bucket_burst_ms", NULL};
    STEP(wrap(&p, spill_json_only_keys(o, "io", ik, CFG, e)));
    int64_t v;
    STEP(wrap(&p, spill_json_int_opt(o, "threads", "io", 1, 1024, 4, &v, CFG, e)));
    c->io_threads = (int)v;
    STEP(get_rate(&p, o, "bandwidth", "io", &c->io_bandwidth));
    double us = 100;
    STEP(wrap(&p, spill_json_num_opt(o, "latency_us", "io", 0, 1e7, 100, &us, CFG, e)));
    c->io_latency_s = us * 1e-6;
    double burst_ms = -1;
    STEP(wrap(&p, spill_json_num_opt(o, "bucket_burst_ms", "io", 0, 1e6, -1, &burst_ms, CFG, e)));
    c->io_bucket_burst_s = burst_ms < 0 ? -1 : burst_ms * 1e-3;
  }
  if (cJSON_GetObjectItemCaseSensitive(root, "compute")) {
    STEP(wrap(&p, spill_json_obj(root, "compute", "", &o, CFG, e)));
    if (c->model_dir[0] && cJSON_GetObjectItemCaseSensitive(o, "token_ms"))
      STEP(fail(&p, "compute.token_ms", "not with model.dir (use per_layer_ms / per_expert_ms)"));
    STEP(parse_compute(&p, o, c));
  }
  if (cJSON_GetObjectItemCaseSensitive(root, "machine")) {
    STEP(wrap(&p, spill_json_obj(root, "machine", "", &o, CFG, e)));
    STEP(parse_machine(&p, o, c));
  }
  {
    int n = 0;
    STEP(wrap(&p, spill_json_arr(root, "budgets", "", &o, &n, CFG, e)));
    if (n < 1 || n > SPILL_SIM_MAX_BUDGETS)
      STEP(fail(&p, "budgets", "expected 1 to %d budgets", SPILL_SIM_MAX_BUDGETS));
    c->n_budgets = n;
    for (int i = 0; i < n; i++) {
      const cJSON *b = cJSON_GetArrayItem(o, i);
      char path[32];
      snprintf(path, sizeof path, "budgets[%d]", i);
      uint64_t v = 0;
      if (cJSON_IsNumber(b) && b->valuedouble > 0 && b->valuedouble < 9e18 &&
          floor(b->valuedouble) == b->valuedouble)
        v = (uint64_t)b->valuedouble;
      else if (cJSON_IsString(b))
        v = spill_plan_parse_size(b->valuestring);
      if (!v) STEP(fail(&p, path, "expected a size (\"46G\" or bytes)"));
      if (!c->model_dir[0] && v < c->floor_bytes)
        STEP(fail(&p, path, "%.2f GiB is below the floor %.2f GiB", v / 1073741824.0,
                  c->floor_bytes / 1073741824.0));
      c->budgets[i] = v;
    }
  }
#undef STEP
out:
  cJSON_Delete(root);
  return rc;
}

int spill_sim_config_parse(const char *text, const char *source, spill_sim_config *c,
                           spill_err *e) {
  return parse_text(text, text ? strlen(text) : 0, source, c, e);
}

int spill_sim_config_load(const char *file, spill_sim_config *c, spill_err *e) {
  char *buf = NULL;
  size_t n = 0;
  SPILL_TRY(spill_read_file(file, 1 << 20, &buf, &n, e));
  int rc = parse_text(buf, n, file, c, e);
  free(buf);
  return rc;
}
