/* engine/spill_config.c: defaults, names and text parsing of every engine
 * knob. The experiment runner and the CLI set knobs only through
 * spill_config_set, so a knob has one spelling and one validation. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cache/cache_policy.h"
#include "engine/spill.h"

void spill_config_default(spill_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->cache_slots = -1;
  cfg->ctx = 4096;
  cfg->threads = 2;
  cfg->prefill_chunk = 16;
  cfg->io_threads = 4;
  cfg->io_depth = 32;
  cfg->io_backend = SPILL_IO_PREAD;
  cfg->storage = SPILL_STORAGE_DIRECT;
  cfg->trunk = SPILL_TRUNK_READ;
  snprintf(cfg->policy, sizeof cfg->policy, "lfru");
  cfg->lookahead = 0;
  cfg->lookahead_depth = 1;
  cfg->seed = 1;
  cfg->overlap = 1;
}

const char *spill_storage_name(spill_storage s) {
  return s == SPILL_STORAGE_PAGECACHE ? "pagecache" : s == SPILL_STORAGE_MMAP ? "mmap" : "direct";
}
const char *spill_trunk_mode_name(spill_trunk_mode t) {
  return t == SPILL_TRUNK_MMAP ? "mmap" : t == SPILL_TRUNK_MLOCK ? "mlock" : "read";
}
const char *spill_io_backend_kind_name(spill_io_backend_kind b) {
  return b == SPILL_IO_URING ? "uring" : "pread";
}

static int parse_long(const char *key, const char *v, long lo, long hi, long *out, spill_err *e) {
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi)
    return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not an integer in [%ld, %ld]", key, v,
                         lo, hi);
  *out = x;
  return SPILL_OK;
}

static int parse_bool(const char *key, const char *v, int *out, spill_err *e) {
  if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on")) *out = 1;
  else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off")) *out = 0;
  else return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not a boolean (true/false)", key, v);
  return SPILL_OK;
}

static int parse_size(const char *key, const char *v, uint64_t *out, spill_err *e) {
  uint64_t b = spill_plan_parse_size(v);
  if (!b) return spill_err_set(e, SPILL_E_CONFIG, "%s: '%s' is not a size (e.g. 8G, 512M)", key, v);
  *out = b;
  return SPILL_OK;
}

int spill_config_set(spill_config *c, const char *key, const char *v, spill_err *e) {
  long x;
  SPILL_FAIL_IF(e, !key || !v, SPILL_E_CONFIG, "config: NULL key or value");
  if (!strcmp(key, "budget")) {
    if (!strcmp(v, "default") || !strcmp(v, "0")) c->budget_bytes = 0;
    else SPILL_TRY(parse_size(key, v, &c->budget_bytes, e));
  } else if (!strcmp(key, "usable_ram")) {
    SPILL_TRY(parse_size(key, v, &c->usable_ram, e));
  } else if (!strcmp(key, "cache_slots")) {
    if (!strcmp(v, "auto")) c->cache_slots = -1;
    else {
      SPILL_TRY(parse_long(key, v, 0, 1L << 30, &x, e));
      c->cache_slots = x;
    }
  } else if (!strcmp(key, "ctx")) {
    SPILL_TRY(parse_long(key, v, 1, 1L << 24, &x, e));
    c->ctx = (int)x;
  } else if (!strcmp(key, "threads")) {
    SPILL_TRY(parse_long(key, v, 1, 256, &x, e));
    c->threads = (int)x;
  } else if (!strcmp(key, "prefill_chunk")) {
    SPILL_TRY(parse_long(key, v, 1, 4096, &x, e));
    c->prefill_chunk = (int)x;
  } else if (!strcmp(key, "io_threads")) {
    SPILL_TRY(parse_long(key, v, 1, 256, &x, e));
    c->io_threads = (int)x;
  } else if (!strcmp(key, "io_depth")) {
    SPILL_TRY(parse_long(key, v, 1, 4096, &x, e));
    c->io_depth = (int)x;
  } else if (!strcmp(key, "io_backend")) {
    if (!strcmp(v, "pread")) c->io_backend = SPILL_IO_PREAD;
    else if (!strcmp(v, "uring")) c->io_backend = SPILL_IO_URING;
    else return spill_err_set(e, SPILL_E_CONFIG, "io_backend: '%s' (expected pread or uring)", v);
  } else if (!strcmp(key, "storage")) {
    if (!strcmp(v, "direct")) c->storage = SPILL_STORAGE_DIRECT;
    else if (!strcmp(v, "pagecache")) c->storage = SPILL_STORAGE_PAGECACHE;
    else if (!strcmp(v, "mmap")) c->storage = SPILL_STORAGE_MMAP;
    else
      return spill_err_set(e, SPILL_E_CONFIG,
                           "storage: '%s' (expected direct, pagecache or mmap)", v);
  } else if (!strcmp(key, "trunk")) {
    if (!strcmp(v, "read")) c->trunk = SPILL_TRUNK_READ;
    else if (!strcmp(v, "mmap")) c->trunk = SPILL_TRUNK_MMAP;
    else if (!strcmp(v, "mlock")) c->trunk = SPILL_TRUNK_MLOCK;
    else return spill_err_set(e, SPILL_E_CONFIG, "trunk: '%s' (expected read, mmap or mlock)", v);
  } else if (!strcmp(key, "policy")) {
    if (!spill_cache_policy_find(v)) {
      char names[256] = "";
      for (const char *const *n = spill_cache_policy_names(); n && *n; n++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "", *n);
      return spill_err_set(e, SPILL_E_CONFIG, "policy: '%s' (expected one of: %s)", v, names);
    }
    snprintf(c->policy, sizeof c->policy, "%s", v);
  } else if (!strcmp(key, "lookahead")) {
    SPILL_TRY(parse_long(key, v, 0, 64, &x, e));
    c->lookahead = (int)x;
  } else if (!strcmp(key, "lookahead_depth")) {
    SPILL_TRY(parse_long(key, v, 1, 2, &x, e));
    c->lookahead_depth = (int)x;
  } else if (!strcmp(key, "lookahead_prefill")) {
    SPILL_TRY(parse_bool(key, v, &c->lookahead_prefill, e));
  } else if (!strcmp(key, "overlap")) {
    SPILL_TRY(parse_bool(key, v, &c->overlap, e));
  } else if (!strcmp(key, "verify")) {
    SPILL_TRY(parse_bool(key, v, &c->verify, e));
  } else if (!strcmp(key, "io_throttle")) {
    if (!strcmp(v, "0") || !strcmp(v, "off")) c->io_throttle = 0;
    else SPILL_TRY(parse_size(key, v, &c->io_throttle, e));
  } else if (!strcmp(key, "seed")) {
    SPILL_TRY(parse_long(key, v, 0, 0x7fffffffL, &x, e));
    c->seed = (uint64_t)x;
  } else if (!strcmp(key, "profile")) {
    c->profile_path = *v ? v : NULL;
  } else if (!strcmp(key, "trace")) {
    c->trace_path = *v ? v : NULL;
  } else if (!strcmp(key, "routing_trace")) {
    c->routing_trace = *v ? v : NULL;
  } else if (!strcmp(key, "trace_max_bytes")) {
    SPILL_TRY(parse_size(key, v, &c->trace_max_bytes, e));
  } else {
    return spill_err_set(e, SPILL_E_CONFIG, "unknown knob '%s'", key);
  }
  return SPILL_OK;
}
