/* engine/plan/ram_plan.c: term-by-term RAM accounting and the budget rule.
 *
 * Every term is a product of architecture dimensions; all arithmetic is
 * overflow-checked because archs can come from untrusted manifests. The
 * scratch terms mirror the buffers engine/model allocates at open (one
 * token's activations, the attention score row, MoE buffers, rvq3 LUTs,
 * logits); see docs/PLAN.md for the K3 comparison. */
#define _POSIX_C_SOURCE 200809L
#include "engine/plan/ram_plan.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/alloc.h"

#define F32 4ull

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
  SPILL_FAIL_IF(e, !a || !p, SPILL_E_INVALID_ARG, "plan: NULL argument");
  SPILL_FAIL_IF(e, ctx < 1, SPILL_E_INVALID_ARG, "plan: ctx %d must be >= 1", ctx);
  SPILL_FAIL_IF(e, a->n_layers < 1 || a->n_layers > SPILL_MAX_LAYERS, SPILL_E_INVALID_ARG,
                "plan: n_layers %d out of range", a->n_layers);
  if (n_threads < 1) n_threads = 1;
  memset(p, 0, sizeof *p);
  acc ac = {0};
  p->ctx = ctx;
  p->trunk = trunk_bytes;
  p->record_bytes = record_bytes;

  int n_mla = 0, n_kda = 0, n_gqa = 0;
  for (int l = 0; l < a->n_layers; l++) {
    if (a->layer_attn[l] == SPILL_ATTN_MLA) n_mla++;
    else if (a->layer_attn[l] == SPILL_ATTN_KDA) n_kda++;
    else n_gqa++;
  }
  const uint64_t D = (uint64_t)a->d_model;
  /* ---- attention state ---- */
  const spill_mla_cfg *mla = &a->mla;
  const spill_kda_cfg *kda = &a->kda;
  const spill_gqa_cfg *gqa = &a->gqa;
  if (n_mla)
    p->state.mla_latent = mul3(&ac, (uint64_t)(mla->kv_lora_rank + mla->qk_rope_dim) * F32,
                               (uint64_t)ctx, (uint64_t)n_mla);
  if (n_kda) {
    uint64_t hd = mul(&ac, (uint64_t)kda->n_heads, (uint64_t)kda->head_dim);
    p->state.kda_state = mul3(&ac, mul(&ac, hd, (uint64_t)kda->head_dim), F32, (uint64_t)n_kda);
    uint64_t km1 = kda->conv_kernel > 1 ? (uint64_t)(kda->conv_kernel - 1) : 0;
    p->state.kda_conv = mul3(&ac, mul3(&ac, 3, km1, hd), F32, (uint64_t)n_kda);
  }
  if (n_gqa)
    p->state.gqa_kv = mul3(&ac, mul3(&ac, 2, (uint64_t)gqa->n_kv_heads, (uint64_t)gqa->head_dim),
                           mul(&ac, (uint64_t)ctx, F32), (uint64_t)n_gqa);
  p->state.total = add(&ac, add(&ac, p->state.mla_latent, p->state.kda_state),
                       add(&ac, p->state.kda_conv, p->state.gqa_kv));

  /* ---- scratch, term by term (what engine/model allocates once) ---- */
  /* activations: x, h, attention out, ffn out (4 D) plus the widest projection
   * outputs of one token: q, k, v, gate (each H*d) for KDA/GQA, q (H*(dn+dr))
   * + kv_a + absorbed queries (H*dc) + latent outputs (H*dc) + values (H*dv)
   * for MLA; dense FFN 2 d_ff; shared experts 2 S. */
  uint64_t widest = 0;
  if (n_kda) {
    uint64_t hd = (uint64_t)kda->n_heads * (uint64_t)kda->head_dim;
    uint64_t gr = (uint64_t)(kda->gate_rank > kda->out_gate_rank ? kda->gate_rank : kda->out_gate_rank);
    widest = umax(widest, 4 * hd + gr + (uint64_t)kda->n_heads);
  }
  if (n_mla) {
    uint64_t H = (uint64_t)mla->n_heads;
    uint64_t w = (uint64_t)mla->q_lora_rank + H * (uint64_t)(mla->qk_nope_dim + mla->qk_rope_dim) +
                 (uint64_t)(mla->kv_lora_rank + mla->qk_rope_dim) +
                 2 * H * (uint64_t)mla->kv_lora_rank + H * (uint64_t)mla->v_head_dim;
    widest = umax(widest, w);
  }
  if (n_gqa) {
    uint64_t w = (uint64_t)gqa->head_dim * (uint64_t)(2 * gqa->n_heads + 2 * gqa->n_kv_heads);
    widest = umax(widest, w);
  }
  int n_moe = spill_arch_n_moe(a);
  const spill_moe_cfg *moe = &a->moe;
  if (a->n_dense_layers > 0) widest = umax(widest, 2 * (uint64_t)a->d_ff);
  if (n_moe && moe->n_shared > 0)
    widest = umax(widest, 2 * (uint64_t)moe->n_shared * (uint64_t)moe->d_shared);
  p->scratch.activations = mul(&ac, add(&ac, 4 * D, widest), F32);
  /* attention score row: heads x ctx */
  uint64_t max_heads = 0;
  if (n_mla) max_heads = umax(max_heads, (uint64_t)mla->n_heads);
  if (n_gqa) max_heads = umax(max_heads, (uint64_t)gqa->n_heads);
  p->scratch.attn_scores = mul3(&ac, max_heads, (uint64_t)ctx, F32);
  /* MoE: router scores (E), latent in/out (2 d_in), per-selection outputs
   * (top_k x d_in), per-thread expert intermediates (2 d_expert). */
  if (n_moe) {
    uint64_t d_in = moe->d_latent > 0 ? (uint64_t)moe->d_latent : D;
    uint64_t k = (uint64_t)moe->top_k;
    uint64_t t = (uint64_t)moe->n_experts + 2 * d_in + mul(&ac, k, d_in) +
                 mul(&ac, (uint64_t)n_threads, 2 * (uint64_t)moe->d_expert);
    p->scratch.moe_buffers = mul(&ac, t, F32);
    /* rvq3 LUTs: gate and up of the layer input (2 x 3 x d_in/8 x 256) and one
     * down LUT per thread (3 x d_expert/8 x 256). Counted for every expert
     * dtype: the f32/q8/q4 paths use no LUTs but the bound stays simple. */
    uint64_t lut_in = mul(&ac, 3 * (d_in / 8), 256);
    uint64_t lut_dn = mul(&ac, 3 * ((uint64_t)moe->d_expert / 8), 256);
    p->scratch.rvq_luts = mul(&ac, add(&ac, 2 * lut_in, mul(&ac, (uint64_t)n_threads, lut_dn)), F32);
    /* + their int16 copies on the VBMI path (engine/quant/kernels.h
     * spill_k_qlut_rvq3_i16_bytes: per group of 8 columns, 3 stages x 256 entries
     * x 2 bytes + one f32 scale): gate and up of the input, one down. */
    uint64_t qlut_in = mul(&ac, d_in / 8, 3 * 256 * 2 + F32);
    uint64_t qlut_dn = mul(&ac, (uint64_t)moe->d_expert / 8, 3 * 256 * 2 + F32);
    p->scratch.rvq_luts = add(&ac, p->scratch.rvq_luts, add(&ac, 2 * qlut_in, qlut_dn));
  }
  p->scratch.logits = mul(&ac, (uint64_t)a->vocab_size, F32);
  p->scratch.total = add(&ac, add(&ac, p->scratch.activations, p->scratch.attn_scores),
                         add(&ac, add(&ac, p->scratch.moe_buffers, p->scratch.rvq_luts),
                             p->scratch.logits));

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

int spill_plan_budget(spill_plan *p, uint64_t usable_ram, uint64_t explicit_budget, int force,
                      spill_err *e) {
  p->usable_ram = usable_ram;
  p->cap = usable_ram / 8 * 7 + (usable_ram % 8) * 7 / 8;
  p->budget_explicit = explicit_budget > 0;
  p->below_recommended_warning = 0;
  p->budget_above_model = 0;
  p->budget_forced = 0;
  p->budget_ws = 0;
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
