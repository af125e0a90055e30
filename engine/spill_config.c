/* engine/spill_config.c: the knob table and everything derived from it.
 *
 * k_knobs below is the one list of engine knobs (spill_config) and sampling
 * knobs (spill_sampling): name, type, range, live or fixed at open, help
 * line, default, the field it sets and what a live change does (the apply
 * column, read by spill_engine_set_knob). spill_config_set /
 * spill_sampling_set parse through it, spill_config_default applies its
 * defaults, spill_knob_flag* are the command-line flags of every command
 * and of `spill serve`, spill_config_get prints through it, spill_knob_at exposes it to
 * the CLI (flags and --help), the experiment runner (schema keys, live/open
 * split) and the docs check (README's knob table is compared with
 * `spill knobs --markdown` by //cli:knobs_doc_test). Adding a knob is one row
 * here plus its field in spill.h. */
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache/cache_policy.h"
#include "engine/plan/ram_plan.h"
#include "engine/base/json_util.h"
#include "engine/spill.h"
#include "engine/spill_draft.h"
#include "engine/spill_knob_apply.h"

/* How a row's value is stored in its struct. */
typedef enum store { ST_INT, ST_I64, ST_U64, ST_FLOAT, ST_CHARS, ST_PTR } store;

typedef struct knob_row {
  spill_knob k;
  store st;
  size_t off, width;
  spill_knob_apply apply;
} knob_row;

#define CFG(field, st) st, offsetof(spill_config, field), sizeof(((spill_config *)0)->field)
#define SMP(field, st) st, offsetof(spill_sampling, field), sizeof(((spill_sampling *)0)->field)
#define KA_NONE SPILL_KNOB_APPLY_NONE
#define KA_FIELD SPILL_KNOB_APPLY_FIELD
#define KA_VERIFY SPILL_KNOB_APPLY_VERIFY
#define KA_BUDGET SPILL_KNOB_APPLY_BUDGET
#define KA_CACHE_SLOTS SPILL_KNOB_APPLY_CACHE_SLOTS
#define KA_PROFILE SPILL_KNOB_APPLY_PROFILE
#define KA_TRACE SPILL_KNOB_APPLY_TRACE
#define C SPILL_KNOB_CONFIG
#define S SPILL_KNOB_SAMPLING
#define LIVE 1
#define OPEN 0

/* name, target, type, live, lo, hi, special word, its value, choices, arg, help, default;
 * field; what a change on an open engine does (live rows: spill_engine_set_knob). */
static const knob_row k_knobs[] = {
    {{"budget", C, SPILL_KNOB_SIZE, LIVE, 0, 0, "default", 0, NULL, "SIZE",
      "RAM budget (default: the planner's rule, docs/PLAN.md)", "default"},
     CFG(budget_bytes, ST_U64), KA_BUDGET},
    {{"usable_ram", C, SPILL_KNOB_SIZE, OPEN, 0, 0, "auto", 0, NULL, "SIZE",
      "RAM the default budget rule plans for (auto: this machine)", "auto"},
     CFG(usable_ram, ST_U64), KA_NONE},
    {{"force_budget", C, SPILL_KNOB_BOOL, OPEN, 0, 0, NULL, 0, NULL, NULL,
      "accept a budget above 7/8 of usable RAM", "false"},
     CFG(force_budget, ST_INT), KA_NONE},
    {{"cache_slots", C, SPILL_KNOB_INT, LIVE, 0, 1 << 30, "auto", -1, NULL, "N",
      "expert cache slots (auto: from the budget; 0: none)", "auto"},
     CFG(cache_slots, ST_I64), KA_CACHE_SLOTS},
    {{"ctx", C, SPILL_KNOB_INT, OPEN, 1, 1 << 24, NULL, 0, NULL, "N", "max context in tokens", "4096"},
     CFG(ctx, ST_INT), KA_NONE},
    {{"threads", C, SPILL_KNOB_INT, OPEN, 1, 256, "auto", 0, NULL, "N", "compute threads (auto: the machine's physical cores)", "auto"},
     CFG(threads, ST_INT), KA_NONE},
    {{"prefill_chunk", C, SPILL_KNOB_INT, OPEN, 1, 4096, NULL, 0, NULL, "N",
      "prompt tokens per prefill chunk (1: sequential)", "16"},
     CFG(prefill_chunk, ST_INT), KA_NONE},
    {{"swa_kv", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, "ring|full|auto", NULL,
      "sliding-window layers' KV: a ring of W-1+prefill_chunk rows, or ctx rows (any prefix "
      "reusable); auto: full when it takes at most 1/8 of the budget",
      "auto"},
     CFG(swa_kv, ST_INT), KA_NONE},
    {{"io_threads", C, SPILL_KNOB_INT, OPEN, 1, 256, NULL, 0, NULL, "N", "pread workers", "4"},
     CFG(io_threads, ST_INT), KA_NONE},
    {{"io_depth", C, SPILL_KNOB_INT, OPEN, 1, 4096, NULL, 0, NULL, "N", "expert reads in flight", "32"},
     CFG(io_depth, ST_INT), KA_NONE},
    {{"io_backend", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, "pread|uring|auto", NULL,
      "expert read backend (auto: io_uring where the kernel allows it, else pread)", "auto"},
     CFG(io_backend, ST_INT), KA_NONE},
    {{"storage", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, "direct|pagecache|mmap", NULL,
      "expert reads: O_DIRECT, buffered, or mapped views", "direct"},
     CFG(storage, ST_INT), KA_NONE},
    {{"trunk", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, "read|mmap|mlock", NULL,
      "trunk read into memory, mapped, or read and mlocked", "read"},
     CFG(trunk, ST_INT), KA_NONE},
    {{"act_quant", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, "f32|q8", NULL,
      "matvec inputs: 8-bit for q4/q8/q4_k/q5_k/q6_k/mxfp4 weights, or f32", "q8"},
     CFG(act_quant, ST_INT), KA_NONE},
    {{"preload", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, "none|all", NULL,
      "all: read every expert record into the cache at open", "none"},
     CFG(preload, ST_INT), KA_NONE},
    {{"policy", C, SPILL_KNOB_CHOICE, OPEN, 0, 0, NULL, 0, NULL /* the cache's registry */, NULL,
      "expert cache eviction policy (docs/CACHE.md)", "lfru"},
     CFG(policy, ST_CHARS), KA_NONE},
    {{"lookahead", C, SPILL_KNOB_INT, LIVE, 0, 64, NULL, 0, NULL, "N",
      "experts prefetched per predicted layer (0: off)", "0"},
     CFG(lookahead, ST_INT), KA_FIELD},
    {{"lookahead_depth", C, SPILL_KNOB_INT, LIVE, 1, 2, NULL, 0, NULL, "N",
      "layers ahead the lookahead predicts", "1"},
     CFG(lookahead_depth, ST_INT), KA_FIELD},
    {{"lookahead_prefill", C, SPILL_KNOB_BOOL, LIVE, 0, 0, NULL, 0, NULL, NULL,
      "also prefetch during chunked prefill", "false"},
     CFG(lookahead_prefill, ST_INT), KA_FIELD},
    {{"verify", C, SPILL_KNOB_BOOL, LIVE, 0, 0, NULL, 0, NULL, NULL,
      "crc32-check every expert record read", "false"},
     CFG(verify, ST_INT), KA_VERIFY},
    {{"overlap", C, SPILL_KNOB_BOOL, OPEN, 0, 0, NULL, 0, NULL, NULL,
      "issue a layer's reads at once (false: one at a time)", "true"},
     CFG(overlap, ST_INT), KA_NONE},
    {{"io_throttle", C, SPILL_KNOB_SIZE, OPEN, 0, 0, "off", 0, NULL, "RATE",
      "emulated device bandwidth in bytes/s (off: none)", "off"},
     CFG(io_throttle, ST_U64), KA_NONE},
    {{"seed", C, SPILL_KNOB_INT, OPEN, 0, 0x7fffffff, NULL, 0, NULL, "N", "cache policy seed", "1"},
     CFG(seed, ST_U64), KA_NONE},
    {{"profile", C, SPILL_KNOB_PATH, LIVE, 0, 0, NULL, 0, NULL, "FILE",
      "per-token JSONL profile (\"\": none)", ""},
     CFG(profile_path, ST_PTR), KA_PROFILE},
    {{"trace", C, SPILL_KNOB_PATH, LIVE, 0, 0, NULL, 0, NULL, "FILE",
      "router trace JSONL (docs/TRACE.md; \"\": none)", ""},
     CFG(trace_path, ST_PTR), KA_TRACE},
    {{"trace_max_bytes", C, SPILL_KNOB_SIZE, OPEN, 0, 0, "off", 0, NULL, "SIZE",
      "stop writing the trace past this size (off: no cap)", "off"},
     CFG(trace_max_bytes, ST_U64), KA_NONE},
    {{"routing_trace", C, SPILL_KNOB_PATH, OPEN, 0, 0, NULL, 0, NULL, "FILE",
      "replay a router trace's expert ids (docs/MODEL.md)", ""},
     CFG(routing_trace, ST_PTR), KA_NONE},
    {{"draft", C, SPILL_KNOB_INT, OPEN, 0, SPILL_DRAFT_MAX, "off", 0, NULL, "N",
      "greedy decode: tokens drafted per step from the context's n-grams (off: none)", "off"},
     CFG(draft, ST_INT), KA_NONE},
    {{"draft_adaptive", C, SPILL_KNOB_BOOL, OPEN, 0, 0, NULL, 0, NULL, NULL,
      "stop drafting while it requests more expert bytes per token than it saves", "true"},
     CFG(draft_adaptive, ST_INT), KA_NONE},
    {{"draft_accept_max", C, SPILL_KNOB_INT, LIVE, 0, SPILL_DRAFT_MAX, "off", -1, NULL, "N",
      "measurement: accept at most N drafts of a verify chunk, reject the rest (output "
      "unchanged; off: the model decides)", "off"},
     CFG(draft_accept_max, ST_INT), KA_FIELD},
    {{"temp", S, SPILL_KNOB_FLOAT, LIVE, 0, 1000, NULL, 0, NULL, "T",
      "sampling temperature (0: greedy)", "0"},
     SMP(temperature, ST_FLOAT), KA_NONE},
    {{"top_k", S, SPILL_KNOB_INT, LIVE, 0, 1 << 24, NULL, 0, NULL, "K",
      "sample from the K most likely tokens (0: off)", "0"},
     SMP(top_k, ST_INT), KA_NONE},
    {{"top_p", S, SPILL_KNOB_FLOAT, LIVE, 0, 1, NULL, 0, NULL, "P",
      "nucleus sampling mass (1: off)", "1"},
     SMP(top_p, ST_FLOAT), KA_NONE},
    {{"sample_seed", S, SPILL_KNOB_INT, LIVE, 0, 0x7fffffff, NULL, 0, NULL, "N", "sampling seed", "1"},
     SMP(seed, ST_U64), KA_NONE},
};

#undef C
#undef S

_Static_assert(SPILL_IO_PREAD == 0 && SPILL_IO_URING == 1 && SPILL_IO_AUTO == 2,
               "io_backend choices order");
_Static_assert(SPILL_STORAGE_DIRECT == 0 && SPILL_STORAGE_PAGECACHE == 1 &&
                   SPILL_STORAGE_MMAP == 2,
               "storage choices order");
_Static_assert(SPILL_TRUNK_READ == 0 && SPILL_TRUNK_MMAP == 1 && SPILL_TRUNK_MLOCK == 2,
               "trunk choices order");

_Static_assert(SPILL_ACT_F32 == 0 && SPILL_ACT_Q8 == 1, "act_quant choices order");
_Static_assert(SPILL_PRELOAD_NONE == 0 && SPILL_PRELOAD_ALL == 1, "preload choices order");
_Static_assert(sizeof(spill_storage) == sizeof(int) && sizeof(spill_trunk_mode) == sizeof(int) &&
                   sizeof(spill_act_quant) == sizeof(int) && sizeof(spill_preload) == sizeof(int) &&
                   sizeof(spill_io_backend_kind) == sizeof(int),
               "choice knobs are stored as int");

enum { N_KNOBS = (int)(sizeof k_knobs / sizeof k_knobs[0]) };

int spill_knob_count(void) { return N_KNOBS; }

const spill_knob *spill_knob_at(int i) { return i >= 0 && i < N_KNOBS ? &k_knobs[i].k : NULL; }

static const knob_row *row_of(const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < N_KNOBS; i++)
    if (!strcmp(k_knobs[i].k.name, name)) return &k_knobs[i];
  return NULL;
}

const spill_knob *spill_knob_find(const char *name) {
  const knob_row *r = row_of(name);
  return r ? &r->k : NULL;
}

int spill_knob_choices(const spill_knob *k, char *buf, size_t n) {
  if (!n) return 0;
  buf[0] = 0;
  if (!k || k->type != SPILL_KNOB_CHOICE) return 0;
  if (k->choices) {
    snprintf(buf, n, "%s", k->choices);
  } else {
    for (const char *const *p = spill_cache_policy_names(); p && *p; p++)
      snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? "|" : "", *p);
  }
  return (int)strlen(buf);
}

/* Index of v among the '|'-separated choices, or -1. */
static int choice_index(const char *choices, const char *v) {
  size_t len = strlen(v);
  int i = 0;
  for (const char *p = choices; *p; i++) {
    const char *bar = strchr(p, '|');
    size_t w = bar ? (size_t)(bar - p) : strlen(p);
    if (w == len && !strncmp(p, v, len)) return i;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

static int set_row(const knob_row *r, void *base, const char *v, spill_err *e);

/* Each row's default (its def text, parsed as a user's value would be):
 * zeroed first, so a field no row names could only be 0. */
static void defaults(spill_knob_target t, void *base, size_t size) {
  memset(base, 0, size);
  for (int i = 0; i < N_KNOBS; i++)
    if (k_knobs[i].k.target == t) set_row(&k_knobs[i], base, k_knobs[i].k.def, NULL);
}

void spill_config_default(spill_config *cfg) { defaults(SPILL_KNOB_CONFIG, cfg, sizeof *cfg); }

void spill_sampling_default(spill_sampling *s) { defaults(SPILL_KNOB_SAMPLING, s, sizeof *s); }

spill_knob_apply spill_knob_apply_of(const char *name) {
  const knob_row *r = row_of(name);
  return r ? r->apply : SPILL_KNOB_APPLY_NONE;
}

const char *spill_storage_name(spill_storage s) {
  return s == SPILL_STORAGE_PAGECACHE ? "pagecache" : s == SPILL_STORAGE_MMAP ? "mmap" : "direct";
}
const char *spill_trunk_mode_name(spill_trunk_mode t) {
  return t == SPILL_TRUNK_MMAP ? "mmap" : t == SPILL_TRUNK_MLOCK ? "mlock" : "read";
}
const char *spill_io_backend_kind_name(spill_io_backend_kind b) {
  return b == SPILL_IO_URING ? "uring" : b == SPILL_IO_AUTO ? "auto" : "pread";
}

static void store_int(const knob_row *r, void *base, long long x) {
  char *p = (char *)base + r->off;
  if (r->st == ST_INT) {
    int v = (int)x;
    memcpy(p, &v, sizeof v);
  } else if (r->st == ST_I64) {
    int64_t v = (int64_t)x;
    memcpy(p, &v, sizeof v);
  } else {
    uint64_t v = (uint64_t)x;
    memcpy(p, &v, sizeof v);
  }
}

static long long load_int(const knob_row *r, const void *base) {
  const char *p = (const char *)base + r->off;
  if (r->st == ST_INT) {
    int v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  if (r->st == ST_I64) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return (long long)v;
}

static int parse_bool(const char *v, int *out) {
  if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on")) *out = 1;
  else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off")) *out = 0;
  else return -1;
  return 0;
}

int spill_knob_is_bool_word(const char *v) {
  int b;
  return v && parse_bool(v, &b) == 0;
}

/* Parses v into the row's field of base (a spill_config or spill_sampling). */
static int set_row(const knob_row *r, void *base, const char *v, spill_err *e) {
  const spill_knob *k = &r->k;
  char *field = (char *)base + r->off;
  if (k->special && !strcmp(v, k->special)) {
    store_int(r, base, (long long)k->special_value);
    return SPILL_OK;
  }
  switch (k->type) {
    case SPILL_KNOB_INT: {
      char *end = NULL;
      long long x = strtoll(v, &end, 10);
      if (!*v || *end || x < (long long)k->lo || x > (long long)k->hi)
        return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not an integer in [%lld, %lld]%s%s",
                             k->name, v, (long long)k->lo, (long long)k->hi,
                             k->special ? " or " : "", k->special ? k->special : "");
      store_int(r, base, x);
      return SPILL_OK;
    }
    case SPILL_KNOB_FLOAT: {
      char *end = NULL;
      double x = strtod(v, &end);
      if (!*v || *end || !isfinite(x) || x < k->lo || x > k->hi)
        return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not a number in [%g, %g]", k->name,
                             v, k->lo, k->hi);
      float f = (float)x;
      memcpy(field, &f, sizeof f);
      return SPILL_OK;
    }
    case SPILL_KNOB_BOOL: {
      int b;
      if (parse_bool(v, &b))
        return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not a boolean (true/false)",
                             k->name, v);
      store_int(r, base, b);
      return SPILL_OK;
    }
    case SPILL_KNOB_SIZE: {
      /* "0" means the special value when that value is 0 ("default", "off") */
      if (k->special && k->special_value == 0 && !strcmp(v, "0")) {
        store_int(r, base, 0);
        return SPILL_OK;
      }
      uint64_t b = spill_parse_size(v);
      if (!b)
        return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not a size (e.g. 8G, 512M)%s%s",
                             k->name, v, k->special ? " or " : "", k->special ? k->special : "");
      memcpy(field, &b, sizeof b);
      return SPILL_OK;
    }
    case SPILL_KNOB_CHOICE: {
      char names[256];
      spill_knob_choices(k, names, sizeof names);
      int idx = choice_index(names, v);
      if (idx < 0 || (r->st == ST_CHARS && strlen(v) >= r->width)) {
        for (char *p = names; *p; p++)
          if (*p == '|') *p = '/';
        return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' (expected one of: %s)", k->name, v,
                             names);
      }
      if (r->st == ST_CHARS) snprintf(field, r->width, "%s", v);
      else store_int(r, base, idx);
      return SPILL_OK;
    }
    case SPILL_KNOB_PATH: {
      const char *p = *v ? v : NULL;
      memcpy(field, &p, sizeof p);
      return SPILL_OK;
    }
  }
  return spill_err_set(e, SPILL_E_CONFIG, "%s: bad knob type", k->name);
}

static int set_in(spill_knob_target t, void *base, const char *key, const char *v, spill_err *e) {
  SPILL_FAIL_IF(e, !base || !key || !v, SPILL_E_CONFIG, "config: NULL key or value");
  const knob_row *r = row_of(key);
  if (!r || r->k.target != t)
    return spill_err_set(e, SPILL_E_CONFIG, "unknown %s '%s'",
                         t == SPILL_KNOB_CONFIG ? "knob" : "sampling knob", key);
  return set_row(r, base, v, e);
}

int spill_config_set(spill_config *c, const char *key, const char *v, spill_err *e) {
  return set_in(SPILL_KNOB_CONFIG, c, key, v, e);
}

int spill_sampling_set(spill_sampling *s, const char *key, const char *v, spill_err *e) {
  return set_in(SPILL_KNOB_SAMPLING, s, key, v, e);
}

static int get_row(const knob_row *r, const void *base, char *buf, size_t n) {
  const spill_knob *k = &r->k;
  const char *field = (const char *)base + r->off;
  switch (k->type) {
    case SPILL_KNOB_INT:
    case SPILL_KNOB_SIZE: {
      long long x = load_int(r, base);
      if (k->special && x == (long long)k->special_value) return snprintf(buf, n, "%s", k->special);
      if (r->st == ST_U64) return snprintf(buf, n, "%llu", (unsigned long long)x);
      return snprintf(buf, n, "%lld", x);
    }
    case SPILL_KNOB_FLOAT: {
      float f;
      memcpy(&f, field, sizeof f);
      return snprintf(buf, n, "%.9g", (double)f);
    }
    case SPILL_KNOB_BOOL:
      return snprintf(buf, n, "%s", load_int(r, base) ? "true" : "false");
    case SPILL_KNOB_CHOICE: {
      if (r->st == ST_CHARS) return snprintf(buf, n, "%.*s", (int)r->width, field);
      char names[256];
      spill_knob_choices(k, names, sizeof names);
      long long idx = load_int(r, base);
      const char *p = names;
      for (long long i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
      }
      if (!p) return snprintf(buf, n, "%lld", idx);
      return snprintf(buf, n, "%.*s", (int)strcspn(p, "|"), p);
    }
    case SPILL_KNOB_PATH: {
      const char *p;
      memcpy(&p, field, sizeof p);
      return snprintf(buf, n, "%s", p ? p : "");
    }
  }
  return -1;
}

static int get_in(spill_knob_target t, const void *base, const char *key, char *buf, size_t n,
                  spill_err *e) {
  const knob_row *r = row_of(key);
  if (!r || r->k.target != t || !base)
    return spill_err_set(e, SPILL_E_CONFIG, "unknown %s '%s'",
                         t == SPILL_KNOB_CONFIG ? "knob" : "sampling knob", key ? key : "(null)");
  int w = get_row(r, base, buf, n);
  SPILL_FAIL_IF(e, w < 0 || (size_t)w >= n, SPILL_E_RANGE, "%s: value longer than %zu bytes", key,
                n);
  return SPILL_OK;
}

int spill_config_get(const spill_config *c, const char *key, char *buf, size_t n, spill_err *e) {
  return get_in(SPILL_KNOB_CONFIG, c, key, buf, n, e);
}

int spill_sampling_get(const spill_sampling *s, const char *key, char *buf, size_t n,
                       spill_err *e) {
  return get_in(SPILL_KNOB_SAMPLING, s, key, buf, n, e);
}

/* ------------------------------------------------------------ knob flags */

const spill_knob *spill_knob_flag(const char *a) {
  if (!a || strncmp(a, "--", 2) != 0) return NULL;
  char key[64];
  if (snprintf(key, sizeof key, "%s", a + 2) >= (int)sizeof key) return NULL;
  for (char *p = key; *p; p++) {
    if (*p == '_') return NULL; /* flags are kebab-case only */
    if (*p == '-') *p = '_';
  }
  return spill_knob_find(key);
}

int spill_knob_flag_set(const spill_knob *k, int argc, char **argv, int *i, spill_config *cfg,
                        spill_sampling *s, spill_err *e) {
  SPILL_FAIL_IF(e, !k || !argv || !i || *i < 0 || *i >= argc, SPILL_E_CONFIG,
                "knob flag: bad arguments");
  const char *v;
  if (k->type == SPILL_KNOB_BOOL) {
    v = *i + 1 < argc && spill_knob_is_bool_word(argv[*i + 1]) ? argv[++*i] : "true";
  } else {
    SPILL_FAIL_IF(e, *i + 1 >= argc, SPILL_E_CONFIG, "%s needs a value", argv[*i]);
    v = argv[++*i];
  }
  return k->target == SPILL_KNOB_CONFIG ? spill_config_set(cfg, k->name, v, e)
                                        : spill_sampling_set(s, k->name, v, e);
}

int spill_knob_flag_help(const spill_knob *k, char *buf, size_t n) {
  if (!n) return 0;
  char flag[64], arg[160], head[240];
  snprintf(flag, sizeof flag, "--%s", k->name);
  for (char *p = flag + 2; *p; p++)
    if (*p == '_') *p = '-';
  if (k->type == SPILL_KNOB_BOOL) snprintf(arg, sizeof arg, "[true|false]");
  else if (k->type == SPILL_KNOB_CHOICE) spill_knob_choices(k, arg, sizeof arg);
  else snprintf(arg, sizeof arg, "%s", k->arg ? k->arg : "X");
  snprintf(head, sizeof head, "%s %s", flag, arg);
  const char *d = k->def ? k->def : "";
  return snprintf(buf, n, "  %-34s %s%s%s%s", head, k->help, d[0] ? " [" : "", d, d[0] ? "]" : "");
}

uint64_t spill_parse_size(const char *s) { return spill_plan_parse_size(s); }
size_t spill_utf8_check(const char *s, size_t n) { return spill_json_utf8_check(s, n); }
