/* engine/model/model_memory.c: the one memory formula (model_memory.h).
 *
 * State: each layer's kind gives its floats (the attention table's
 * state_floats); model.c allocates their sum once and binds each layer's
 * views. Scratch: plan_scratch lists every forward buffer with its shape;
 * run with a measuring carver it gives the bytes (per group, for the plan),
 * run with a base it carves the one allocation spill_model_open made from
 * that measure, so what is reported is what is allocated. Widths the
 * attention kinds need come from their table rows. Nothing here runs per
 * token.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/base/alloc.h"
#include "engine/model/model_internal.h"
#include "engine/model/model_memory.h"

#define MAXI(a, b) ((a) > (b) ? (a) : (b))

#define sat_mul spill_sat_mul
#define sat_add spill_sat_add

int spill_model_rvq3_qlut(int expert_dtype) {
  /* rvq3 through int16 LUTs (engine/quant/kernels.h) only on request
   * (SPILL_RVQ3_QLUT=1) and where VBMI makes it fast: its rounding moves the
   * logits ~1e-4 relative, past the reference agreement tolerance on the
   * nano models (see refuted/0301), so the f32-LUT path stays the default. */
  if (expert_dtype != SPILL_DT_RVQ3) return 0;
  const char *ql = getenv("SPILL_RVQ3_QLUT");
  if (!ql || strcmp(ql, "1") != 0) return 0;
  spill_k_init();
  return spill_k_apply_rvq3_i16_fast();
}

int spill_model_act_q8(const spill_manifest *m, int requested) {
  if (!requested || !m) return 0;
  for (int i = 0; i < m->n_tensors; i++)
    if (m->tensors[i].ndim == 2 && spill_k_dtype_has_xq(m->tensors[i].dtype)) return 1;
  if (spill_k_dtype_has_xq(m->expert_dtype)) return 1;
  for (int b = 0; b < m->n_banks; b++)
    for (int s = 0; s < SPILL_SEC_COUNT; s++)
      if (spill_k_dtype_has_xq(m->banks[b].sect_dtype[s])) return 1;
  return 0;
}

/* ---- scratch: one plan for measuring and carving ---- */

typedef struct carver {
  uint8_t *base; /* NULL: measure only */
  uint64_t off;
  uint64_t group[SPILL_MEM_GROUPS];
} carver;

static void *carve(carver *cv, int group, uint64_t n_elems, uint64_t elem) {
  uint64_t bytes = sat_mul(n_elems ? n_elems : 1, elem);
  bytes = sat_add(bytes, 63) & ~(uint64_t)63;
  void *p = cv->base ? cv->base + cv->off : NULL;
  cv->off = sat_add(cv->off, bytes);
  cv->group[group] = sat_add(cv->group[group], bytes);
  return p;
}

#define ACT SPILL_MEM_ACTIVATIONS
#define MOE SPILL_MEM_MOE
#define LUT SPILL_MEM_RVQ_LUTS

/* Speculation (spec_max > 0, spill_model_forward_verify): every position's
 * logits of a verify chunk, a copy of the recurrent layers' state and those
 * layers' inputs of each chunk token (none without a recurrent layer). */
static void plan_spec(const spill_arch *a, const spill_model_mem_opts *o, carver *cv,
                      spill_model_scratch *s) {
  const uint64_t D = (uint64_t)a->d_model, V = (uint64_t)a->vocab_size;
  const uint64_t sp = o->spec_max > 0 ? (uint64_t)o->spec_max : 0;
  uint64_t rec_floats = 0, n_rec = 0;
  for (int l = 0; l < a->n_layers && l < SPILL_MAX_LAYERS; l++) {
    const spill_attn_ops *k = spill_attn_kind_ops(a->layer_attn[l]);
    if (!k || !k->reset_zero) continue;
    uint64_t part[2] = {0, 0};
    const spill_state_geom g = {l, (uint64_t)o->ctx, (uint64_t)o->max_chunk, o->swa_full_kv};
    k->state_floats(a, &g, part);
    rec_floats = sat_add(rec_floats, sat_add(part[0], part[1]));
    n_rec++;
  }
  s->spec_logits = sp ? carve(cv, SPILL_MEM_LOGITS, sat_mul(sp, V), 4) : NULL; /* (sp, V) */
  s->spec_snap = sp && n_rec ? carve(cv, ACT, rec_floats, 4) : NULL;
  s->spec_h = sp && n_rec ? carve(cv, ACT, sat_mul(sat_mul(n_rec, sp), D), 4) : NULL; /* (n_rec, sp, D) */
}

static void plan_scratch(const spill_arch *a, const spill_model_mem_opts *o, carver *cv,
                         spill_model_scratch *s) {
  const uint64_t D = (uint64_t)a->d_model, V = (uint64_t)a->vocab_size;
  const int xq = o->act_q8, qlut = o->rvq3_qlut;
  int has[SPILL_ATTN_KINDS] = {0};
  for (int l = 0; l < a->n_layers && l < SPILL_MAX_LAYERS; l++)
    if (spill_attn_kind_ops(a->layer_attn[l])) has[a->layer_attn[l]] = 1;
  spill_attn_dims d = {1, 1, 1, 1, 2, 1, 1, 1, 1, 1};
  for (int k = 0; k < SPILL_ATTN_KINDS; k++)
    if (has[k]) spill_attn_kind_ops(k)->scratch(a, &d);
  const uint64_t q = d.q, kv = d.kv, heads = d.heads, ohead = d.ohead, cq = d.cq, dc = d.dc,
                 kda = d.kda, fa = d.fa;
  const uint64_t Tn = (uint64_t)o->max_chunk, nt = (uint64_t)o->n_threads;
  /* residual stream and sub-block buffers of a chunk */
  s->x = carve(cv, ACT, Tn * D, 4);          /* (T, D) */
  s->h = carve(cv, ACT, Tn * D, 4);          /* (T, D) */
  s->attn_out = carve(cv, ACT, D, 4);        /* (D) */
  s->ffn_out = carve(cv, ACT, Tn * D, 4);    /* (T, D) */
  s->shared_out = carve(cv, ACT, Tn * D, 4); /* (T, D) */
  if (a->attn_res_block > 0) { /* (n_bank, T, D): layers 0, bs, 2 bs, ... */
    const uint64_t nbank = ((uint64_t)a->n_layers + (uint64_t)a->attn_res_block - 1) / (uint64_t)a->attn_res_block;
    s->bank = carve(cv, ACT, sat_mul(nbank, Tn * D), 4);
  } else {
    s->bank = NULL;
  }
  /* attention, one token at a time */
  s->q = carve(cv, ACT, q, 4);
  s->k = carve(cv, ACT, kv, 4);
  s->v = carve(cv, ACT, kv, 4);
  s->cq = carve(cv, ACT, cq, 4);
  s->att = carve(cv, SPILL_MEM_ATTN_SCORES, sat_mul(nt, (uint64_t)o->ctx), 4); /* (nt, ctx) */
  s->qa = carve(cv, ACT, MAXI(heads * dc, kda), 4);
  s->ol = carve(cv, ACT, heads * dc, 4);
  s->o = carve(cv, ACT, ohead, 4);
  s->rowtmp = carve(cv, ACT, nt * dc, 4);
  s->rope_cs = carve(cv, ACT, d.rope, 4);
  s->kq = carve(cv, ACT, kda, 4);
  s->kk = carve(cv, ACT, kda, 4);
  s->kv = carve(cv, ACT, kda, 4);
  s->kfa = carve(cv, ACT, fa, 4);
  s->kalpha = carve(cv, ACT, kda, 4);
  s->kbeta = carve(cv, ACT, heads, 4);
  s->ku = carve(cv, ACT, nt * d.kd, 4);
  /* FFN and MoE */
  uint64_t ff = (uint64_t)a->d_ff;
  const int n_moe = spill_arch_n_moe(a);
  uint64_t E = 1, K = 1, din = D, de = 1;
  if (n_moe > 0) {
    const spill_moe_cfg *c = &a->moe;
    E = (uint64_t)c->n_experts;
    K = (uint64_t)c->top_k;
    din = c->d_latent > 0 ? (uint64_t)c->d_latent : D;
    de = (uint64_t)c->d_expert;
    ff = MAXI(ff, (uint64_t)c->n_shared * c->d_shared);
    ff = MAXI(ff, de);
  }
  s->ff_g = carve(cv, ACT, ff, 4);
  s->ff_u = carve(cv, ACT, ff, 4);
  s->router = carve(cv, MOE, Tn * E, 4);  /* (T, E) */
  s->router_sel = carve(cv, MOE, E, 4);   /* (E) */
  s->sel = carve(cv, MOE, Tn * K, 4);     /* (T, K) */
  s->selw = carve(cv, MOE, Tn * K, 4);    /* (T, K) */
  s->u = carve(cv, MOE, Tn * din, 4);     /* (T, d_in) */
  /* rvq3 LUTs are always planned (the arch does not carry the expert dtype),
   * so for other dtypes this is an upper bound of 2*T*96*d_in floats. */
  const uint64_t lut_in = (din / 8) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  const uint64_t lut_de = (de / 8) * SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES;
  s->lut_g = carve(cv, LUT, n_moe ? Tn * lut_in : 0, 4);
  s->lut_u = carve(cv, LUT, n_moe ? Tn * lut_in : 0, 4);
  s->lut_d = carve(cv, LUT, n_moe ? nt * lut_de : 0, 4); /* one per thread */
  /* int16 LUTs of the VBMI path: only when the model uses it */
  const int nq = n_moe && qlut;
  s->qlut_g = nq ? carve(cv, LUT, Tn * spill_k_qlut_rvq3_i16_bytes((uint32_t)din), 1) : NULL;
  s->qlut_u = nq ? carve(cv, LUT, Tn * spill_k_qlut_rvq3_i16_bytes((uint32_t)din), 1) : NULL;
  s->qlut_d = nq ? carve(cv, LUT, nt * spill_k_qlut_rvq3_i16_bytes((uint32_t)de), 1) : NULL;
  /* act_q8 inputs: per-token expert inputs, and a pair sized for the widest
   * matvec input (rounded up to 256: spill_k_xq_bytes grows with n) */
  uint64_t maxc = MAXI(MAXI(MAXI(D, din), MAXI(de, ff)), MAXI(MAXI(q, kv), MAXI(ohead, cq)));
  maxc = MAXI(maxc, MAXI(MAXI(heads * dc, kda), fa));
  maxc = (maxc + 255) / 256 * 256;
  s->xq_u_bytes = xq ? spill_k_xq_bytes((uint32_t)din) : 0;
  s->xq_cap = xq && maxc <= UINT32_MAX ? spill_k_xq_bytes((uint32_t)maxc) : 0;
  s->xq_u = xq ? carve(cv, MOE, Tn * s->xq_u_bytes, 1) : NULL;
  s->xq0 = xq ? carve(cv, ACT, s->xq_cap, 1) : NULL;
  s->xq1 = xq ? carve(cv, ACT, s->xq_cap, 1) : NULL;
  /* each use (token, slot) keeps its own gate/up outputs, so the experts of
   * a layer run in parallel (moe.c) */
  const uint64_t TK = Tn * K;
  s->eg = carve(cv, MOE, TK * de, 4);
  s->eu = carve(cv, MOE, TK * de, 4);
  s->xq_d_bytes = xq ? spill_k_xq_bytes((uint32_t)de) : 0;
  s->xq_d = xq ? carve(cv, MOE, TK * s->xq_d_bytes, 1) : NULL;
  s->slot = carve(cv, MOE, Tn * K * din, 4); /* (T, K, d_in) */
  s->y = carve(cv, MOE, din, 4);
  s->uniq = carve(cv, MOE, Tn * K, 4);
  s->use_start = carve(cv, MOE, Tn * K + 1, 4);
  s->use = carve(cv, MOE, Tn * K, 4);
  s->use_fill = carve(cv, MOE, Tn * K, 4);
  s->stamp = carve(cv, MOE, E, 4);
  s->stamp_idx = carve(cv, MOE, E, 4);
  s->delivered = carve(cv, MOE, Tn * K, 1);
  s->use_owner = carve(cv, MOE, TK, 4);
  s->tasks = carve(cv, MOE, TK * 2 * SPILL_MOE_MAX_PARTS, 4);
  s->parts_left = carve(cv, MOE, TK, 4);
  s->rec_left = carve(cv, MOE, TK, 4);
  s->rel = carve(cv, MOE, TK, 4);
  s->rec_mat = carve(cv, MOE, TK * 3, sizeof(spill_qmat));
  s->logits = carve(cv, SPILL_MEM_LOGITS, V, 4);
  s->la_h = carve(cv, MOE, D, 4);
  s->la_s = carve(cv, MOE, E, 4);
  plan_spec(a, o, cv, s);
}
static spill_model_mem_opts resolved(const spill_model_mem_opts *o) {
  spill_model_mem_opts r = *o;
  if (r.n_threads <= 0) r.n_threads = 1;
  if (r.max_chunk <= 0) r.max_chunk = 16;
  if (r.ctx < 0) r.ctx = 0;
  if (r.spec_max < 0) r.spec_max = 0;
  if (r.spec_max > r.max_chunk) r.spec_max = r.max_chunk;
  return r;
}

void spill_model_memory(const spill_arch *a, const spill_model_mem_opts *o, spill_model_mem *out) {
  memset(out, 0, sizeof *out);
  const spill_model_mem_opts r = resolved(o);
  for (int l = 0; l < a->n_layers && l < SPILL_MAX_LAYERS; l++) {
    const spill_attn_ops *k = spill_attn_kind_ops(a->layer_attn[l]);
    if (!k) continue;
    uint64_t part[2] = {0, 0};
    const spill_state_geom g = {l, (uint64_t)r.ctx, (uint64_t)r.max_chunk, r.swa_full_kv};
    k->state_floats(a, &g, part);
    for (int i = 0; i < 2; i++) {
      uint64_t *t = &out->state[a->layer_attn[l]][i];
      *t = sat_add(*t, sat_mul(part[i], sizeof(float)));
      out->state_total = sat_add(out->state_total, sat_mul(part[i], sizeof(float)));
    }
  }
  carver cv = {NULL, 0, {0}};
  spill_model_scratch s;
  plan_scratch(a, &r, &cv, &s);
  memcpy(out->scratch, cv.group, sizeof cv.group);
  out->scratch_total = cv.off;
  out->overflow = out->state_total == UINT64_MAX || out->scratch_total == UINT64_MAX;
}

uint64_t spill_model_carve_scratch(spill_model *m, void *base) {
  const spill_model_mem_opts o = {m->o.ctx, m->o.n_threads, m->o.max_chunk, m->o.act_q8,
                                  m->rvq_q, m->o.spec_max, m->o.swa_full_kv};
  carver cv = {base, 0, {0}};
  plan_scratch(&m->a, &o, &cv, &m->s);
  return cv.off;
}

uint64_t spill_model_state_bytes(const spill_arch *a, int ctx, int max_chunk) {
  if (!a || ctx < 0) return 0;
  const spill_model_mem_opts o = {ctx, 1, max_chunk, 0, 0, 0, 0}; /* max_chunk <= 0: 16 */
  spill_model_mem mem;
  spill_model_memory(a, &o, &mem);
  return mem.state_total;
}

uint64_t spill_model_scratch_bytes(const spill_arch *a, int ctx, int n_threads, int max_chunk) {
  if (!a || ctx < 0) return 0;
  const spill_model_mem_opts o = {ctx, n_threads, max_chunk, 1, 1, 0, 0}; /* upper bound */
  spill_model_mem mem;
  spill_model_memory(a, &o, &mem);
  return mem.scratch_total;
}
