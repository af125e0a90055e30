/* engine/plan/ram_plan.c: term-by-term RAM accounting and the budget rule.
 *
 * Every term is a product of architecture dimensions; all arithmetic is
 * overflow-checked because archs can come from untrusted manifests. The
 * state and scratch terms are engine/model's memory formula
 * (engine/model/model_memory.h): the very bytes spill_model_open allocates,
 * grouped as activations, the attention score rows, MoE buffers, rvq3 LUTs
 * and logits; see docs/PLAN.md for the K3 comparison. */
#define _POSIX_C_SOURCE 200809L
#include "engine/plan/ram_plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/alloc.h"

/* Saturating helpers: overflow is reported once at the end. */
typedef struct acc {
  int overflow;
} acc;
static uint64_t mul(acc *a, uint64_t x, uint64_t y) {
  uint64_t r;
  if (!spill_mul_u64(x, y, &r)) {
    a->overflow = 1;
    return 0;
  }
  return r;
}
static uint64_t add(acc *a, uint64_t x, uint64_t y) {
  uint64_t r;
  if (!spill_add_u64(x, y, &r)) {
    a->overflow = 1;
    return 0;
  }
  return r;
}
static uint64_t mul3(acc *a, uint64_t x, uint64_t y, uint64_t z) { return mul(a, mul(a, x, y), z); }

static uint64_t umax(uint64_t a, uint64_t b) { return a > b ? a : b; }

int spill_plan_compute(const spill_arch *a, uint64_t record_bytes, uint64_t trunk_bytes,
                       int ctx, int n_threads, spill_plan *p, spill_err *e) {
  /* the engine's defaults (prefill_chunk 16, act_quant q8); the q8 input
   * buffers and the int16 LUTs counted, as the dtypes are not known here
   * (an upper bound) */
  const spill_model_mem_opts o = {ctx, n_threads, 16, 1, 1, 0, 0};
  return spill_plan_compute_run(a, record_bytes, trunk_bytes, &o, p, e);
}

int spill_plan_compute_run(const spill_arch *a, uint64_t record_bytes, uint64_t trunk_bytes,
                           const spill_model_mem_opts *o, spill_plan *p, spill_err *e) {
  SPILL_FAIL_IF(e, !a || !p || !o, SPILL_E_INVALID_ARG, "plan: NULL argument");
  const int ctx = o->ctx;
  SPILL_FAIL_IF(e, ctx < 1, SPILL_E_INVALID_ARG, "plan: ctx %d must be >= 1", ctx);
  SPILL_FAIL_IF(e, a->n_layers < 1 || a->n_layers > SPILL_MAX_LAYERS, SPILL_E_INVALID_ARG,
                "plan: n_layers %d out of range", a->n_layers);
  memset(p, 0, sizeof *p);
  acc ac = {0};
  p->ctx = ctx;
  p->trunk = trunk_bytes;
  p->record_bytes = record_bytes;

  /* ---- state and scratch: engine/model's memory formula, the bytes
   * spill_model_open allocates (model_memory.h) ---- */
  /* swa_kv: ring or full as asked; auto is counted as a ring here and
   * decided by spill_plan_budget, which needs the budget. swa_full_extra is
   * what full takes beyond the rings either way. */
  spill_model_mem_opts mo = *o;
  spill_model_mem ring, full;
  mo.swa_full_kv = 0;
  spill_model_memory(a, &mo, &ring);
  mo.swa_full_kv = 1;
  spill_model_memory(a, &mo, &full);
  p->swa_kv = o->swa_full_kv == SPILL_SWA_KV_FULL || o->swa_full_kv == SPILL_SWA_KV_AUTO
                  ? o->swa_full_kv
                  : SPILL_SWA_KV_RING;
  const spill_model_mem mem = p->swa_kv == SPILL_SWA_KV_FULL ? full : ring;
  if (ring.overflow || full.overflow) ac.overflow = 1;
  p->swa_full_extra = full.state_total - ring.state_total;
  p->state.gqa_kv = mem.state[SPILL_ATTN_GQA][0];
  p->state.gqa_swa_kv = mem.state[SPILL_ATTN_GQA][1]; /* the sliding-window rings */
  p->state.mla_latent = mem.state[SPILL_ATTN_MLA][0] + mem.state[SPILL_ATTN_MLA][1];
  p->state.kda_state = mem.state[SPILL_ATTN_KDA][0];
  p->state.kda_conv = mem.state[SPILL_ATTN_KDA][1];
  p->state.gdn_state = mem.state[SPILL_ATTN_GDN][0] + mem.state[SPILL_ATTN_GDN][1];
  p->state.total = mem.state_total;
  p->scratch.activations = mem.scratch[SPILL_MEM_ACTIVATIONS];
  p->scratch.attn_scores = mem.scratch[SPILL_MEM_ATTN_SCORES];
  p->scratch.moe_buffers = mem.scratch[SPILL_MEM_MOE];
  p->scratch.rvq_luts = mem.scratch[SPILL_MEM_RVQ_LUTS];
  p->scratch.logits = mem.scratch[SPILL_MEM_LOGITS];
  p->scratch.total = mem.scratch_total;

  const int n_moe = spill_arch_n_moe(a);
  const spill_moe_cfg *moe = &a->moe;
  /* ---- floor, working set ---- */
  uint64_t k = n_moe ? (uint64_t)moe->top_k : 0;
  p->min_cache = mul3(&ac, 2, k, record_bytes);
  p->floor = add(&ac, add(&ac, trunk_bytes, p->state.total),
                 add(&ac, p->scratch.total, p->min_cache));
  p->ws = mul3(&ac, record_bytes, k, (uint64_t)n_moe);
  p->recommended = add(&ac, p->floor, mul(&ac, 3, p->ws));
  p->model_records = mul(&ac, (uint64_t)n_moe, n_moe ? (uint64_t)moe->n_experts : 0);
  uint64_t all = mul(&ac, p->model_records, record_bytes);
  p->model_max = add(&ac, p->floor - p->min_cache, umax(all, p->min_cache));
  SPILL_FAIL_IF(e, ac.overflow, SPILL_E_RANGE, "plan: a RAM term overflows 64 bits");
  return SPILL_OK;
}

/* "1.50 GiB", "576.0 KiB": a size with enough precision to compare. */
static const char *fmt_size(char *buf, size_t n, uint64_t b) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, u++;
  if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)b);
  else snprintf(buf, n, v < 10 ? "%.2f %s" : "%.1f %s", v, unit[u]);
  return buf;
}

static int apply_budget(spill_plan *p, uint64_t usable_ram, uint64_t explicit_budget, int force,
                        spill_err *e);

/* Adds the ctx rows of the sliding-window layers beyond their rings: state
 * is a term of the floor, and recommended and model_max are the floor plus
 * expert bytes, so each grows by the same bytes (scratch does not depend on
 * the rows). 0 if a term would overflow. */
static int add_swa_full(spill_plan *p) {
  uint64_t *t[] = {&p->state.gqa_swa_kv, &p->state.total, &p->floor, &p->recommended,
                   &p->model_max};
  const uint64_t x = p->swa_full_extra;
  for (size_t i = 0; i < sizeof t / sizeof *t; i++)
    if (*t[i] > UINT64_MAX - x) return 0;
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) *t[i] += x;
  return 1;
}

int spill_plan_budget(spill_plan *p, uint64_t usable_ram, uint64_t explicit_budget, int force,
                      spill_err *e) {
  if (p->swa_kv != SPILL_SWA_KV_AUTO) return apply_budget(p, usable_ram, explicit_budget, force, e);
  /* swa_kv auto, decided once (a later budget keeps the choice: the model is
   * open with it): the budget with rings; full when its extra rows take at
   * most 1/8 of that budget and the budget still holds with them (a chat's
   * prefix reuse for a small share of RAM; docs/MODEL.md "Sliding-window KV") */
  p->swa_kv = SPILL_SWA_KV_RING;
  SPILL_TRY(apply_budget(p, usable_ram, explicit_budget, force, e));
  if (p->swa_full_extra == 0) return SPILL_OK; /* no sliding layers, or ctx fits a ring */
  if (p->swa_full_extra > p->budget / 8) return SPILL_OK;
  const spill_plan ring = *p;
  spill_err fe = {0};
  if (add_swa_full(p) && apply_budget(p, usable_ram, explicit_budget, force, &fe) == SPILL_OK) {
    p->swa_kv = SPILL_SWA_KV_FULL;
    return SPILL_OK;
  }
  *p = ring; /* full does not fit the budget: rings */
  return SPILL_OK;
}

static int apply_budget(spill_plan *p, uint64_t usable_ram, uint64_t explicit_budget, int force,
                        spill_err *e) {
  p->usable_ram = usable_ram;
  p->cap = usable_ram / 8 * 7 + (usable_ram % 8) * 7 / 8;
  p->budget_explicit = explicit_budget > 0;
  p->below_recommended_warning = 0;
  p->budget_above_model = 0;
  p->budget_forced = 0;
  p->budget_ws = 0;
  p->budget_all = 0;
  char s1[32], s2[32], s3[32], s4[32], s5[32], s6[32];
  if (explicit_budget > 0) {
    p->budget = explicit_budget;
    if (explicit_budget < p->floor) {
      p->expert_cache = p->cache_slots = 0;
      return spill_err_set(e, SPILL_E_RAM_BUDGET,
                           "budget %s is below the RAM floor of %s (trunk %s + state %s + "
                           "scratch %s + minimum cache %s)",
                           fmt_size(s1, sizeof s1, explicit_budget),
                           fmt_size(s2, sizeof s2, p->floor), fmt_size(s3, sizeof s3, p->trunk),
                           fmt_size(s4, sizeof s4, p->state.total),
                           fmt_size(s5, sizeof s5, p->scratch.total),
                           fmt_size(s6, sizeof s6, p->min_cache));
    }
  } else if (p->model_max && p->model_max <= p->cap) {
    /* every expert record fits under the cap: the whole model (the cache
     * fills on first use; preload all reads it up front) */
    p->budget = p->model_max;
    p->budget_all = 1;
  } else {
    p->budget = p->floor;
    p->below_recommended_warning = 1;
    for (int n = 3; n >= 1; n--) {
      uint64_t b;
      if (!spill_mul_u64(p->ws, (uint64_t)n, &b) || !spill_add_u64(b, p->floor, &b)) continue;
      if (b <= p->cap) {
        p->budget = b;
        p->budget_ws = n;
        p->below_recommended_warning = 0;
        break;
      }
    }
  }
  /* never more cache than the model has records */
  uint64_t use = p->budget;
  if (p->model_max && use > p->model_max) {
    use = p->model_max;
    p->budget_above_model = 1;
  }
  p->expert_cache = use - (p->floor - p->min_cache);
  p->cache_slots = p->record_bytes ? p->expert_cache / p->record_bytes : 0;
  if (p->budget_explicit && use > p->cap) {
    if (!force)
      return spill_err_set(e, SPILL_E_RAM_BUDGET,
                           "budget %s would use %s, above the %s this machine can give (7/8 of "
                           "%s usable RAM); pass --force-budget (force_budget) to use it anyway",
                           fmt_size(s1, sizeof s1, p->budget), fmt_size(s2, sizeof s2, use),
                           fmt_size(s3, sizeof s3, p->cap), fmt_size(s4, sizeof s4, p->usable_ram));
    p->budget_forced = 1;
  }
  return SPILL_OK;
}

/* ---- machine ---- */

static uint64_t read_u64_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = {0};
  uint64_t v = 0;
  if (fgets(buf, sizeof buf, f) && isdigit((unsigned char)buf[0])) v = strtoull(buf, NULL, 10);
  fclose(f);
  return v; /* "max" (v2 unlimited) reads as 0 = no limit */
}

/* Where the cgroup limit is read from (tests point these at fixtures). */
static const char *g_proc_cgroup = "/proc/self/cgroup", *g_cgroup_root = "/sys/fs/cgroup";

void spill_plan_test_cgroup_paths(const char *proc_cgroup, const char *cgroup_root) {
  g_proc_cgroup = proc_cgroup ? proc_cgroup : "/proc/self/cgroup";
  g_cgroup_root = cgroup_root ? cgroup_root : "/sys/fs/cgroup";
}

uint64_t spill_plan_usable_ram(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  uint64_t phys = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : 0;
  uint64_t limit = 0;
  FILE *f = fopen(g_proc_cgroup, "r");
  if (f) {
    char line[1024];
    while (fgets(line, sizeof line, f)) {
      /* v2: "0::/path"; v1 memory: "N:memory:/path" (or "N:...,memory,...:/path") */
      char *c1 = strchr(line, ':');
      char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      if (!c2) continue;
      char *path = c2 + 1;
      path[strcspn(path, "\n")] = 0;
      char file[1400];
      uint64_t v = 0;
      if (c2 == c1 + 1) {
        snprintf(file, sizeof file, "%s%s/memory.max", g_cgroup_root, path);
        v = read_u64_file(file);
      } else {
        *c2 = 0;
        if (strstr(c1 + 1, "memory")) {
          snprintf(file, sizeof file, "%s/memory%s/memory.limit_in_bytes", g_cgroup_root, path);
          v = read_u64_file(file);
        }
      }
      if (v > 0 && (limit == 0 || v < limit)) limit = v;
    }
    fclose(f);
  }
  if (limit > 0 && (phys == 0 || limit < phys)) return limit;
  return phys;
}

static const char *g_meminfo = "/proc/meminfo";

void spill_plan_test_meminfo_path(const char *meminfo) {
  g_meminfo = meminfo ? meminfo : "/proc/meminfo";
}

uint64_t spill_plan_available_ram(void) {
  FILE *f = fopen(g_meminfo, "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f)) found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
  fclose(f);
  return found && kb <= UINT64_MAX / 1024 ? (uint64_t)kb * 1024u : 0;
}

uint64_t spill_plan_parse_size(const char *s) {
  if (!s || !*s) return 0;
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || !(v > 0)) return 0;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1048576.0; end++; break;
    case 'G': mult = 1073741824.0; end++; break;
    case 'T': mult = 1099511627776.0; end++; break;
    case 0: break;
    default: return 0;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return 0;
  double b = v * mult;
  if (b >= 1.8e19) return 0;
  return (uint64_t)b;
}
