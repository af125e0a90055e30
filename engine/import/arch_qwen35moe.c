/* engine/import/arch_qwen35moe.c: Qwen3.5-MoE for `spill import`: GGUF
 * qwen35moe (llama.cpp's src/models/qwen35moe.cpp) and the Hugging Face
 * checkpoint as released (Qwen3_5MoeForConditionalGeneration / the flat
 * Qwen3_5MoeForCausalLM) to a spill architecture of Gated DeltaNet and
 * gated GQA layers and a tensor plan (docs/MODEL.md "ATTN GDN",
 * "Qwen3.5-MoE"). The HF form becomes the container its GGUF conversion
 * gives: llama.cpp's converter's transforms (norms 1 + w, A = -exp(A_log),
 * v heads grouped -> tiled) are plan flags import_run.c applies.
 *
 * Layer kinds from the bool array attention.recurrent_layers, else every
 * full_attention_interval-th layer (default 4) is attention. GDN layers:
 * attn_qkv (q, k, v with the v heads in llama.cpp's tiled order, which is
 * the container's), attn_gate (z), ssm_conv1d, ssm_dt.bias, ssm_a (=
 * -exp(A_log), kept as is), ssm_alpha, ssm_beta, ssm_norm, ssm_out.
 * Attention layers: attn_q giving each head's query then its gate, attn_k,
 * attn_v, per-head attn_q_norm / attn_k_norm, partial rotate-half RoPE on
 * rope.dimension_count dims (IMRoPE: for text every section but the fourth
 * sees the token's position; sections that leave a rotated pair at position
 * 0 are refused by name), sigmoid gate before attn_output. Every layer: a
 * softmax router, top-k renormalised (llama.cpp does not read
 * expert_weights_norm / _scale here), and a shared expert scaled by
 * sigmoid(ffn_gate_inp_shexp h). MTP layers after the trunk (block_count
 * includes nextn_predict_layers) are skipped and named in the summary. A
 * row of arch_registry.c.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/json_util.h"
#include "engine/import/import_internal.h"

typedef struct q35_cfg {
  int V, D, L, H, Hk, d, rd, E, k, F, Fs, n_mtp;
  int lk, lv, ld, K; /* GDN: k heads, v heads, head dim, conv kernel */
  int tied, bos, eos;
  double eps, theta;
  uint8_t recurrent[SPILL_MAX_LAYERS];
} q35_cfg;

#define ARCH "qwen35moe"

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out, spill_err *e) {
  return imp_gguf_int(g, ARCH, key, lo, hi, out, dflt, req, e);
}

static int gnum(const spill_gguf *g, const char *key, double dflt, double *out, spill_err *e) {
  char k[160];
  snprintf(k, sizeof k, ARCH ".%s", key);
  *out = dflt;
  if (!spill_gguf_find_kv(g, k)) return SPILL_OK;
  SPILL_TRY(spill_gguf_get_f64(g, k, out, e));
  SPILL_FAIL_IF(e, !isfinite(*out), SPILL_E_FORMAT, "GGUF key %s is not finite", k);
  return SPILL_OK;
}

/* rope.dimension_sections (4 ints, required by llama.cpp): ggml's IMRoPE
 * gives rotary pair i (i < rd/2) the section of sector s = i mod sum: the
 * token position when s%3==1 && s < 3 sec[1], s%3==2 && s < 3 sec[2] or
 * s%3==0 && s < 3 sec[0], else the fourth section's, which is 0 for text.
 * spill rotates every pair of the first rd dims by the position: sections
 * leaving one at 0 are refused by name. */
static int gguf_sections(const spill_gguf *g, int rd, spill_err *e) {
  const char *key = ARCH ".rope.dimension_sections";
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, key);
  SPILL_FAIL_IF(e, !kv, SPILL_E_FORMAT, "GGUF key %s is missing", key);
  SPILL_FAIL_IF(e, kv->type != SPILL_GGUF_ARRAY || kv->n < 3 || kv->n > 4, SPILL_E_FORMAT,
                "GGUF key %s is not an array of 4 integers", key);
  int64_t sec[4] = {0, 0, 0, 0}, sum = 0;
  for (uint64_t i = 0; i < kv->n; i++) {
    SPILL_TRY(spill_gguf_arr_i64(kv, i, &sec[i], e));
    SPILL_FAIL_IF(e, sec[i] < 0 || sec[i] > 4096, SPILL_E_FORMAT, "GGUF key %s[%d] = %lld out of range", key,
                  (int)i, (long long)sec[i]);
    sum += sec[i];
  }
  SPILL_FAIL_IF(e, sum < 1 || sum > rd / 2, SPILL_E_FORMAT, "GGUF key %s sums to %lld (rotary pairs %d)", key,
                (long long)sum, rd / 2);
  for (int i = 0; i < rd / 2; i++) {
    const int64_t s = i % sum;
    const int pos = (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]) || (s % 3 == 0 && s < 3 * sec[0]);
    if (!pos)
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           "GGUF key %s = [%lld, %lld, %lld, %lld] leaves rotary pair %d at the fourth section's "
                           "position (0 for text): not supported",
                           key, (long long)sec[0], (long long)sec[1], (long long)sec[2], (long long)sec[3], i);
  }
  return SPILL_OK;
}

/* attention.recurrent_layers (bool per layer, all blocks) or full_attention_interval */
static int gguf_layers(const spill_gguf *g, q35_cfg *c, int n_all, spill_err *e) {
  const char *key = ARCH ".attention.recurrent_layers";
  const spill_gguf_kv *kv = spill_gguf_find_kv(g, key);
  memset(c->recurrent, 0, sizeof c->recurrent);
  if (kv) {
    SPILL_FAIL_IF(e, kv->type != SPILL_GGUF_ARRAY || kv->n != (uint64_t)n_all, SPILL_E_FORMAT,
                  "GGUF key %s is not an array of block_count (%d) entries", key, n_all);
    for (int l = 0; l < c->L; l++) {
      int64_t v;
      SPILL_TRY(spill_gguf_arr_i64(kv, (uint64_t)l, &v, e));
      SPILL_FAIL_IF(e, v != 0 && v != 1, SPILL_E_FORMAT, "GGUF key %s[%d] = %lld is not a bool", key, l,
                    (long long)v);
      c->recurrent[l] = (uint8_t)v;
    }
    return SPILL_OK;
  }
  int fi;
  SPILL_TRY(gkey(g, "full_attention_interval", 1, SPILL_MAX_LAYERS, 4, 0, &fi, e));
  for (int l = 0; l < c->L; l++) c->recurrent[l] = (l + 1) % fi != 0;
  return SPILL_OK;
}

/* Keys whose maths llama.cpp applies and spill does not: refused by name. */
static int gguf_refused(const spill_gguf *g, spill_err *e) {
  static const char *const bad[] = {"rope.scaling.type", "attention.sliding_window", "attention.scale",
                                    "expert_gating_func", NULL};
  for (int i = 0; bad[i]; i++) {
    char k[160];
    snprintf(k, sizeof k, ARCH ".%s", bad[i]);
    const spill_gguf_kv *kv = spill_gguf_find_kv(g, k);
    if (!kv) continue;
    if (!strcmp(bad[i], "rope.scaling.type") && kv->type == SPILL_GGUF_STRING && !strcmp(kv->str[0], "none"))
      continue;
    if (!strcmp(bad[i], "expert_gating_func")) { /* qwen35moe always routes by softmax */
      uint64_t v;
      SPILL_TRY(spill_gguf_get_u64(g, k, &v, e));
      if (v == 1) continue;
    }
    return spill_err_set(e, SPILL_E_UNSUPPORTED, "GGUF key %s changes the maths and is not supported", k);
  }
  return SPILL_OK;
}

static int gguf_config(imp_src *s, q35_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  int n_all, kl, vl, inner;
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &n_all, e));
  SPILL_TRY(gkey(g, "nextn_predict_layers", 0, n_all - 1, 0, 0, &c->n_mtp, e));
  c->L = n_all - c->n_mtp;
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(gkey(g, "attention.head_count_kv", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(gkey(g, "attention.key_length", 2, 4096, c->D / c->H, 0, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 2, 4096, kl, 0, &vl, e));
  SPILL_FAIL_IF(e, vl != kl, SPILL_E_UNSUPPORTED, "GGUF " ARCH ": value_length %d != key_length %d", vl, kl);
  c->d = kl;
  SPILL_TRY(gkey(g, "rope.dimension_count", 2, c->d, c->d, 0, &c->rd, e));
  SPILL_FAIL_IF(e, c->rd % 2, SPILL_E_FORMAT, "GGUF " ARCH ".rope.dimension_count %d is odd", c->rd);
  SPILL_TRY(gguf_sections(g, c->rd, e));
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gkey(g, "expert_shared_feed_forward_length", 1, 1048576, 0, 1, &c->Fs, e));
  SPILL_TRY(gkey(g, "ssm.conv_kernel", 1, 64, 0, 1, &c->K, e));
  SPILL_TRY(gkey(g, "ssm.state_size", 1, 4096, 0, 1, &c->ld, e));
  SPILL_TRY(gkey(g, "ssm.group_count", 1, 4096, 0, 1, &c->lk, e));
  SPILL_TRY(gkey(g, "ssm.time_step_rank", 1, 4096, 0, 1, &c->lv, e));
  SPILL_TRY(gkey(g, "ssm.inner_size", 1, 1 << 24, 0, 1, &inner, e));
  SPILL_FAIL_IF(e, inner != c->lv * c->ld, SPILL_E_FORMAT,
                "GGUF " ARCH ".ssm.inner_size %d != time_step_rank %d x state_size %d", inner, c->lv, c->ld);
  SPILL_FAIL_IF(e, c->lv % c->lk, SPILL_E_FORMAT, "GGUF " ARCH ": %d v heads not a multiple of %d k heads", c->lv,
                c->lk);
  SPILL_TRY(gnum(g, "attention.layer_norm_rms_epsilon", 0, &c->eps, e));
  SPILL_TRY(gnum(g, "rope.freq_base", 10000.0, &c->theta, e));
  SPILL_FAIL_IF(e, !(c->eps > 0 && c->eps <= 1) || !(c->theta > 0 && c->theta <= 1e12), SPILL_E_FORMAT,
                "GGUF " ARCH ": epsilon %g or freq_base %g out of range", c->eps, c->theta);
  SPILL_TRY(gguf_refused(g, e));
  SPILL_TRY(gguf_layers(g, c, n_all, e));
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                ARCH " tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  c->tied = !spill_gguf_find(g, "output.weight");
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* Layer tensor dst from GGUF g / HF h; on an HF source, its transforms. */
enum { X_NONE = 0, X_ADD_ONE = 1, X_NEG_EXP = 2 };
static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, const char *h, int nd, uint64_t r,
             uint64_t co, int x, spill_err *e) {
  SPILL_TRY(imp_add_layer(s, p, l, dst, g, h, nd, r, co, 0, e));
  if (!s->is_gguf) p->trunk[p->n_trunk - 1].add_one = x == X_ADD_ONE;
  return SPILL_OK;
}

/* HF: the last trunk entry's v heads from the grouped order to llama.cpp's
 * tiled one (rows from off on in blocks of hd, or its columns). */
static void v_tiled(const imp_src *s, const q35_cfg *c, imp_plan *p, uint64_t off, uint64_t hd, int cols) {
  if (s->is_gguf || c->lv == c->lk) return; /* GGUF: tiled already; one v head per k head: no change */
  imp_trunk *t = &p->trunk[p->n_trunk - 1];
  t->vh_off = (uint32_t)off;
  t->vh_hk = (uint32_t)c->lk;
  t->vh_r = (uint32_t)(c->lv / c->lk);
  t->vh_hd = (uint32_t)hd;
  t->vh_cols = cols;
}

/* Experts: GGUF stacked; HF fused mlp.experts.gate_up_proj [E, 2F, D] +
 * down_proj [E, D, F] (as released), or per expert mlp.experts.N.*_proj. */
static int plan_experts(imp_src *s, const q35_cfg *c, imp_plan *p, int l, spill_err *e) {
  static const char *const hf[SPILL_SEC_COUNT] = {"gate_proj", "up_proj", "down_proj"};
  const uint64_t E = c->E, D = c->D, F = c->F;
  char gu[160], dn[160];
  snprintf(gu, sizeof gu, "%slayers.%d.mlp.experts.gate_up_proj", s->hf_model, l);
  snprintf(dn, sizeof dn, "%slayers.%d.mlp.experts.down_proj", s->hf_model, l);
  if (s->is_gguf || !spill_st_find(&s->st, gu))
    return imp_plan_experts(s, &p->moe[l], l, E, D, F, "mlp.experts", hf, e);
  imp_moe_layer *m = &p->moe[l];
  SPILL_TRY(imp_hf_experts_fused(s, m, SPILL_SEC_GATE, gu, E, 2 * F, 0, F, D, e));
  SPILL_TRY(imp_hf_experts_fused(s, m, SPILL_SEC_UP, gu, E, 2 * F, F, F, D, e));
  return imp_hf_experts_fused(s, m, SPILL_SEC_DOWN, dn, E, D, 0, D, F, e);
}

static int plan_layer(imp_src *s, const q35_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, H = c->H, Hk = c->Hk, d = c->d, E = c->E;
  SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", "input_layernorm.weight", 1, D, 0, X_ADD_ONE, e));
  if (c->recurrent[l]) {
    const uint64_t nv = (uint64_t)c->lv * c->ld, qk = 2 * (uint64_t)c->lk * c->ld, C = qk + nv, Hv = c->lv;
    SPILL_TRY(T(s, p, l, "attn_qkv", "attn_qkv.weight", "linear_attn.in_proj_qkv.weight", 2, C, D, 0, e));
    v_tiled(s, c, p, qk, c->ld, 0);
    SPILL_TRY(T(s, p, l, "attn_gate", "attn_gate.weight", "linear_attn.in_proj_z.weight", 2, nv, D, 0, e));
    v_tiled(s, c, p, 0, c->ld, 0);
    SPILL_TRY(imp_add_squeezed(s, p, l, "ssm_conv", "ssm_conv1d.weight", "linear_attn.conv1d.weight", C,
                               (uint64_t)c->K, 1, 0, e));
    v_tiled(s, c, p, qk, c->ld, 0);
    SPILL_TRY(imp_add_squeezed(s, p, l, "ssm_dt_bias", "ssm_dt.bias", "linear_attn.dt_bias", Hv, 0, 1, 0, e));
    v_tiled(s, c, p, 0, 1, 0);
    SPILL_TRY(imp_add_squeezed(s, p, l, "ssm_a", "ssm_a", "linear_attn.A_log", Hv, 0, 1, 0, e));
    if (!s->is_gguf) p->trunk[p->n_trunk - 1].neg_exp = 1;
    v_tiled(s, c, p, 0, 1, 0);
    SPILL_TRY(T(s, p, l, "ssm_alpha", "ssm_alpha.weight", "linear_attn.in_proj_a.weight", 2, Hv, D, 0, e));
    v_tiled(s, c, p, 0, 1, 0);
    SPILL_TRY(T(s, p, l, "ssm_beta", "ssm_beta.weight", "linear_attn.in_proj_b.weight", 2, Hv, D, 0, e));
    v_tiled(s, c, p, 0, 1, 0);
    /* the gated norm is stored as is (not zero-centred) */
    SPILL_TRY(T(s, p, l, "ssm_norm", "ssm_norm.weight", "linear_attn.norm.weight", 1, (uint64_t)c->ld, 0, 0, e));
    SPILL_TRY(T(s, p, l, "attn_output", "ssm_out.weight", "linear_attn.out_proj.weight", 2, D, nv, 0, e));
    v_tiled(s, c, p, 0, c->ld, 1);
  } else {
    SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", "self_attn.q_proj.weight", 2, 2 * H * d, D, 0, e));
    SPILL_TRY(T(s, p, l, "attn_k", "attn_k.weight", "self_attn.k_proj.weight", 2, Hk * d, D, 0, e));
    SPILL_TRY(T(s, p, l, "attn_v", "attn_v.weight", "self_attn.v_proj.weight", 2, Hk * d, D, 0, e));
    SPILL_TRY(T(s, p, l, "attn_q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight", 1, d, 0, X_ADD_ONE, e));
    SPILL_TRY(T(s, p, l, "attn_k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight", 1, d, 0, X_ADD_ONE, e));
    SPILL_TRY(T(s, p, l, "attn_output", "attn_output.weight", "self_attn.o_proj.weight", 2, D, H * d, 0, e));
  }
  SPILL_TRY(T(s, p, l, "ffn_norm", "post_attention_norm.weight", "post_attention_layernorm.weight", 1, D, 0,
              X_ADD_ONE, e));
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", "mlp.gate.weight", 2, E, D, 0, e));
  SPILL_TRY(imp_add_squeezed(s, p, l, "ffn_gate_inp_shexp", "ffn_gate_inp_shexp.weight",
                             "mlp.shared_expert_gate.weight", 1, D, 0, 0, e));
  SPILL_TRY(imp_plan_shared_experts(s, p, l, D, (uint64_t)c->Fs, "mlp.shared_expert", e));
  return plan_experts(s, c, p, l, e);
}

static void fill_arch(const q35_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "%s", ARCH);
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = 0;
  a->d_ff = 0;
  a->norm_eps = (float)c->eps; /* f32 as llama.cpp holds it (GGUF keys), from either source */
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = c->bos < c->V ? c->bos : -1;
  a->eos_id = c->eos < c->V ? c->eos : -1;
  for (int l = 0; l < c->L; l++) a->layer_attn[l] = c->recurrent[l] ? SPILL_ATTN_GDN : SPILL_ATTN_GQA;
  spill_gqa_cfg *g = &a->gqa;
  g->n_heads = c->H;
  g->n_kv_heads = c->Hk;
  g->head_dim = c->d;
  g->rope_theta = (float)c->theta;
  g->qk_norm = SPILL_QK_NORM_HEAD;
  g->rope_dim = c->rd < c->d ? c->rd : 0;
  g->out_gate = 1;
  a->gdn.n_k_heads = c->lk;
  a->gdn.n_v_heads = c->lv;
  a->gdn.head_dim = c->ld;
  a->gdn.conv_kernel = c->K;
  spill_moe_cfg *o = &a->moe;
  o->n_experts = c->E;
  o->top_k = c->k;
  o->d_expert = c->F;
  o->n_shared = 1;
  o->d_shared = c->Fs;
  o->router = SPILL_ROUTER_SOFTMAX;
  o->norm_topk = 1; /* the sum of the k largest softmax scores is >= k/E, far above llama.cpp's 2^-14 clamp */
  o->routed_scale = 1.0;
  o->shared_gate = 1;
}

static int plan(imp_src *s, q35_cfg *c, imp_plan *p, spill_err *e) {
  SPILL_FAIL_IF(e, c->H % c->Hk, SPILL_E_FORMAT, ARCH ": %d heads not a multiple of %d kv heads", c->H, c->Hk);
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, ARCH ": top-k %d > %d experts", c->k, c->E);
  fill_arch(c, &p->arch);
  SPILL_TRY(imp_plan_init(s, p, 3 + 20 * c->L, c->L, (uint64_t)c->V, (uint64_t)c->D, c->tied, e));
  if (!s->is_gguf) p->trunk[1].add_one = 1; /* the final norm, zero-centred too */
  for (int l = 0; l < c->L; l++) SPILL_TRY(plan_layer(s, c, p, l, e));
  if (c->n_mtp > 0 && s->is_gguf) /* HF: mtp.* is skipped by prefix and named in the summary */
    snprintf(p->skipped, sizeof p->skipped, "layers %d..%d (next-token prediction, nextn/MTP)", c->L,
             c->L + c->n_mtp - 1);
  return imp_check_consumed(s, p, c->n_mtp > 0 && s->is_gguf ? c->L : -1, e);
}

int imp_qwen35moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  q35_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(gguf_config(s, &c, e));
  return plan(s, &c, p, e);
}

/* ---- Hugging Face: Qwen3_5MoeForConditionalGeneration (model_type
 * qwen3_5_moe, the text model's keys under text_config, tensors under
 * model.language_model., the vision tower model.visual.* skipped) or
 * Qwen3_5MoeForCausalLM (qwen3_5_moe_text, flat, model.*); the MTP layers
 * (mtp.*) are skipped. Read as llama.cpp's converter reads them
 * (conversion/qwen.py: {**top, **text_config}), so the checkpoint and its
 * GGUF conversion give one container. ---- */

#define HF "config.json (qwen3_5_moe)"

static int refuse(const char *key, const char *why, spill_err *e) {
  return spill_err_set(e, SPILL_E_UNSUPPORTED, HF ": %s: %s", key, why);
}

/* A string key that must have one of the values in ok (absent: fine). */
static int str_is(const cJSON *r, const char *key, const char *const *ok, const char *why, spill_err *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, key);
  if (!v || cJSON_IsNull(v)) return SPILL_OK;
  if (cJSON_IsString(v) && imp_in_list(ok, v->valuestring)) return SPILL_OK;
  return refuse(key, why, e);
}

/* rope_parameters (transformers >= 5) or the flat rope_theta /
 * partial_rotary_factor: rotate-half RoPE on the first rd dims. For text
 * the interleaved MRoPE gives every section the token's position
 * (Qwen3_5MoeTextRotaryEmbedding), so mrope_section only has to be sane. */
static int hf_rope(const cJSON *r, q35_cfg *c, spill_err *e) {
  static const char *const rkeys[] = {"rope_type", "rope_theta", "partial_rotary_factor", "mrope_section",
                                      "mrope_interleaved", NULL};
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(r, "rope_parameters");
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(r, "rope_scaling");
  if (rs && !cJSON_IsNull(rs)) return refuse("rope_scaling", "RoPE scaling is not supported", e);
  double prf = 0.25, prf_top = -1;
  c->theta = 10000.0;
  SPILL_TRY(spill_json_num_opt(r, "rope_theta", HF, 1e-6, 1e12, c->theta, &c->theta, SPILL_E_FORMAT, e));
  SPILL_TRY(spill_json_num_opt(r, "partial_rotary_factor", HF, 1e-6, 1, -1, &prf_top, SPILL_E_FORMAT, e));
  if (prf_top > 0) prf = prf_top;
  if (rp && !cJSON_IsNull(rp)) {
    SPILL_FAIL_IF(e, !cJSON_IsObject(rp), SPILL_E_FORMAT, HF ": rope_parameters is not an object");
    for (const cJSON *it = rp->child; it; it = it->next)
      if (!imp_in_list(rkeys, it->string))
        return spill_err_set(e, SPILL_E_UNSUPPORTED,
                             HF ": rope_parameters.%.60s is not understood (it may change the maths; refusing)",
                             it->string);
    static const char *const dflt[] = {"default", NULL};
    if (str_is(rp, "rope_type", dflt, "", e) != SPILL_OK)
      return refuse("rope_parameters.rope_type", "only \"default\" RoPE is supported", e);
    SPILL_TRY(spill_json_num_opt(rp, "rope_theta", HF ": rope_parameters", 1e-6, 1e12, c->theta, &c->theta,
                                 SPILL_E_FORMAT, e));
    double p2 = -1;
    SPILL_TRY(spill_json_num_opt(rp, "partial_rotary_factor", HF ": rope_parameters", 1e-6, 1, -1, &p2,
                                 SPILL_E_FORMAT, e));
    if (p2 > 0 && prf_top > 0 && p2 != prf_top)
      return refuse("partial_rotary_factor", "rope_parameters and the text config disagree", e);
    if (p2 > 0) prf = p2;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(rp, "mrope_section");
    if (ms && !cJSON_IsNull(ms)) {
      double sum = 0;
      int n = 0;
      SPILL_FAIL_IF(e, !cJSON_IsArray(ms), SPILL_E_FORMAT, HF ": rope_parameters.mrope_section is not an array");
      for (const cJSON *x = ms->child; x; x = x->next, n++) {
        SPILL_FAIL_IF(e, !cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != (double)(int)x->valuedouble,
                      SPILL_E_FORMAT, HF ": rope_parameters.mrope_section holds a non-integer or a negative");
        sum += x->valuedouble;
      }
      SPILL_FAIL_IF(e, n < 3 || n > 4 || sum > 4096, SPILL_E_FORMAT,
                    HF ": rope_parameters.mrope_section is not 3 section sizes");
    }
    const cJSON *mi = cJSON_GetObjectItemCaseSensitive(rp, "mrope_interleaved");
    SPILL_FAIL_IF(e, mi && !cJSON_IsNull(mi) && !cJSON_IsBool(mi), SPILL_E_FORMAT,
                  HF ": rope_parameters.mrope_interleaved is not a bool");
  }
  c->rd = (int)(c->d * prf); /* transformers: int(head_dim * partial_rotary_factor) */
  SPILL_FAIL_IF(e, c->rd < 2 || c->rd % 2, SPILL_E_UNSUPPORTED,
                HF ": partial_rotary_factor %g of head_dim %d gives %d rotary dims (not even and >= 2)", prf, c->d,
                c->rd);
  return SPILL_OK;
}

/* layer_types (per layer "linear_attention" / "full_attention"), else every
 * full_attention_interval-th layer is attention (default 4) */
static int hf_layers(const cJSON *r, q35_cfg *c, spill_err *e) {
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(r, "layer_types");
  int fi;
  SPILL_TRY(imp_cfg_int(r, HF, "full_attention_interval", 1, SPILL_MAX_LAYERS, 4, 0, &fi, e));
  memset(c->recurrent, 0, sizeof c->recurrent);
  if (!lt || cJSON_IsNull(lt)) {
    for (int l = 0; l < c->L; l++) c->recurrent[l] = (l + 1) % fi != 0;
    return SPILL_OK;
  }
  SPILL_FAIL_IF(e, !cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->L, SPILL_E_FORMAT,
                HF ": layer_types is not an array of num_hidden_layers (%d) entries", c->L);
  int l = 0;
  for (const cJSON *x = lt->child; x; x = x->next, l++) {
    if (cJSON_IsString(x) && !strcmp(x->valuestring, "linear_attention")) c->recurrent[l] = 1;
    else if (!cJSON_IsString(x) || strcmp(x->valuestring, "full_attention"))
      return spill_err_set(e, SPILL_E_UNSUPPORTED,
                           HF ": layer_types[%d] is not \"linear_attention\" or \"full_attention\"", l);
  }
  return SPILL_OK;
}

static int hf_values(const cJSON *r, q35_cfg *c, spill_err *e) {
  int vd, b;
  SPILL_TRY(imp_cfg_int(r, HF, "vocab_size", 1, 16777216, 0, 1, &c->V, e));
  SPILL_TRY(imp_cfg_int(r, HF, "hidden_size", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_hidden_layers", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_attention_heads", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_key_value_heads", 1, 4096, c->H, 0, &c->Hk, e));
  SPILL_TRY(imp_cfg_int(r, HF, "head_dim", 2, 4096, c->D / c->H, 0, &c->d, e));
  SPILL_TRY(spill_json_num(r, "rms_norm_eps", HF, 1e-30, 1, &c->eps, SPILL_E_FORMAT, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_experts", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(imp_cfg_int(r, HF, "num_experts_per_tok", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_TRY(imp_cfg_int(r, HF, "moe_intermediate_size", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(imp_cfg_int(r, HF, "shared_expert_intermediate_size", 1, 1048576, 0, 1, &c->Fs, e));
  SPILL_TRY(imp_cfg_int(r, HF, "linear_conv_kernel_dim", 1, 64, 0, 1, &c->K, e));
  SPILL_TRY(imp_cfg_int(r, HF, "linear_key_head_dim", 1, 4096, 0, 1, &c->ld, e));
  SPILL_TRY(imp_cfg_int(r, HF, "linear_value_head_dim", 1, 4096, 0, 1, &vd, e));
  SPILL_TRY(imp_cfg_int(r, HF, "linear_num_key_heads", 1, 4096, 0, 1, &c->lk, e));
  SPILL_TRY(imp_cfg_int(r, HF, "linear_num_value_heads", 1, 4096, 0, 1, &c->lv, e));
  SPILL_TRY(imp_cfg_int(r, HF, "mtp_num_hidden_layers", 0, 64, 0, 0, &c->n_mtp, e));
  SPILL_FAIL_IF(e, vd != c->ld, SPILL_E_UNSUPPORTED,
                HF ": linear_value_head_dim %d != linear_key_head_dim %d (spill's GDN has one head size)", vd, c->ld);
  SPILL_FAIL_IF(e, c->lv % c->lk, SPILL_E_FORMAT, HF ": %d linear value heads not a multiple of %d key heads",
                c->lv, c->lk);
  static const char *const silu[] = {"silu", NULL}, *const f32[] = {"float32", NULL};
  SPILL_TRY(str_is(r, "hidden_act", silu, "only silu", e));
  SPILL_TRY(str_is(r, "mamba_ssm_dtype", f32, "the DeltaNet state is f32 in spill", e));
  SPILL_TRY(spill_json_bool_opt(r, "attention_bias", HF, 0, &b, SPILL_E_FORMAT, e));
  if (b) return refuse("attention_bias", "Qwen3.5's attention has no biases", e);
  SPILL_TRY(spill_json_bool_opt(r, "attn_output_gate", HF, 1, &b, SPILL_E_FORMAT, e));
  if (!b) return refuse("attn_output_gate", "Qwen3.5's attention is gated (q_proj gives the gate)", e);
  SPILL_TRY(spill_json_bool_opt(r, "norm_topk_prob", HF, 1, &b, SPILL_E_FORMAT, e));
  if (!b) return refuse("norm_topk_prob", "Qwen3.5's router always renormalises the top-k", e);
  SPILL_TRY(imp_cfg_int(r, HF, "decoder_sparse_step", 0, 1 << 20, 1, 0, &b, e));
  if (b != 1) return refuse("decoder_sparse_step", "every layer is MoE", e);
  const cJSON *mo = cJSON_GetObjectItemCaseSensitive(r, "mlp_only_layers");
  if (mo && !cJSON_IsNull(mo) && !(cJSON_IsArray(mo) && !mo->child))
    return refuse("mlp_only_layers", "every layer is MoE", e);
  SPILL_TRY(spill_json_bool_opt(r, "tie_word_embeddings", HF, 0, &c->tied, SPILL_E_FORMAT, e));
  SPILL_TRY(hf_rope(r, c, e));
  return hf_layers(r, c, e);
}

static const char *const k_skip[] = {"mtp.", "model.visual.", NULL};

static int hf_config(imp_src *s, const char *dir, const cJSON *root, q35_cfg *c, spill_err *e) {
  /* read or checked; the vision wrapper's token ids, use_cache-like
   * bookkeeping (the shared harmless list) and the MTP's own switch
   * (mtp_use_dedicated_embeddings) do not touch the text forward pass */
  static const char *const keys[] = {
      "text_config", "vision_config", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "rms_norm_eps", "num_experts", "num_experts_per_tok",
      "moe_intermediate_size", "shared_expert_intermediate_size", "linear_conv_kernel_dim", "linear_key_head_dim",
      "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads", "mtp_num_hidden_layers",
      "mtp_use_dedicated_embeddings", "hidden_act", "mamba_ssm_dtype", "attention_bias", "attn_output_gate",
      "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers", "tie_word_embeddings", "rope_parameters",
      "rope_scaling", "rope_theta", "partial_rotary_factor", "layer_types", "full_attention_interval",
      "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id", NULL};
  SPILL_TRY(imp_cfg_only_keys(root, "qwen3_5_moe", keys, e));
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
  if (cJSON_IsObject(tc)) {
    SPILL_TRY(imp_cfg_only_keys(tc, "qwen3_5_moe (text_config)", keys, e));
    static const char *const mt[] = {"qwen3_5_moe_text", NULL};
    SPILL_TRY(str_is(tc, "model_type", mt, "text_config is not qwen3_5_moe_text", e));
  }
  cJSON *r = NULL;
  SPILL_TRY(imp_cfg_text_merged(root, HF, &r, e));
  int rc = hf_values(r, c, e);
  if (rc == SPILL_OK) rc = imp_cfg_bos_eos(r, dir, &c->bos, &c->eos, e);
  cJSON_Delete(r);
  SPILL_TRY(rc);
  /* the released checkpoint's text model sits under model.language_model. */
  snprintf(s->hf_model, sizeof s->hf_model, "%s",
           spill_st_find(&s->st, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.");
  s->skip_prefixes = k_skip;
  if (c->tied && spill_st_find(&s->st, "lm_head.weight"))
    return refuse("tie_word_embeddings", "true, yet the checkpoint holds lm_head.weight", e);
  return SPILL_OK;
}

int imp_qwen35moe_plan_hf(imp_src *s, const char *dir, const cJSON *root, int variant, imp_plan *p,
                          spill_err *e) {
  (void)variant;
  q35_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(hf_config(s, dir, root, &c, e));
  return plan(s, &c, p, e);
}
