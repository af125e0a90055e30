/* engine/import/arch_qwen35moe.c: Qwen3.5-MoE for `spill import`: GGUF
 * qwen35moe (llama.cpp's src/models/qwen35moe.cpp) to a spill architecture
 * of Gated DeltaNet and gated GQA layers and a tensor plan (docs/MODEL.md
 * "ATTN GDN", "Qwen3.5-MoE").
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

static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, int nd, uint64_t r, uint64_t co,
             spill_err *e) {
  return imp_add_layer(s, p, l, dst, g, NULL, nd, r, co, 0, e);
}

static int plan_layer(imp_src *s, const q35_cfg *c, imp_plan *p, int l, spill_err *e) {
  static const char *const hf[SPILL_SEC_COUNT] = {"gate_proj", "up_proj", "down_proj"};
  const uint64_t D = c->D, H = c->H, Hk = c->Hk, d = c->d, E = c->E;
  SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", 1, D, 0, e));
  if (c->recurrent[l]) {
    const uint64_t nv = (uint64_t)c->lv * c->ld, C = 2 * (uint64_t)c->lk * c->ld + nv;
    SPILL_TRY(T(s, p, l, "attn_qkv", "attn_qkv.weight", 2, C, D, e));
    SPILL_TRY(T(s, p, l, "attn_gate", "attn_gate.weight", 2, nv, D, e));
    SPILL_TRY(imp_add_squeezed(s, p, l, "ssm_conv", "ssm_conv1d.weight", NULL, C, (uint64_t)c->K, 1, 0, e));
    SPILL_TRY(imp_add_squeezed(s, p, l, "ssm_dt_bias", "ssm_dt.bias", NULL, (uint64_t)c->lv, 0, 1, 0, e));
    SPILL_TRY(imp_add_squeezed(s, p, l, "ssm_a", "ssm_a", NULL, (uint64_t)c->lv, 0, 1, 0, e));
    SPILL_TRY(T(s, p, l, "ssm_alpha", "ssm_alpha.weight", 2, (uint64_t)c->lv, D, e));
    SPILL_TRY(T(s, p, l, "ssm_beta", "ssm_beta.weight", 2, (uint64_t)c->lv, D, e));
    SPILL_TRY(T(s, p, l, "ssm_norm", "ssm_norm.weight", 1, (uint64_t)c->ld, 0, e));
    SPILL_TRY(T(s, p, l, "attn_output", "ssm_out.weight", 2, D, nv, e));
  } else {
    SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", 2, 2 * H * d, D, e));
    SPILL_TRY(T(s, p, l, "attn_k", "attn_k.weight", 2, Hk * d, D, e));
    SPILL_TRY(T(s, p, l, "attn_v", "attn_v.weight", 2, Hk * d, D, e));
    SPILL_TRY(T(s, p, l, "attn_q_norm", "attn_q_norm.weight", 1, d, 0, e));
    SPILL_TRY(T(s, p, l, "attn_k_norm", "attn_k_norm.weight", 1, d, 0, e));
    SPILL_TRY(T(s, p, l, "attn_output", "attn_output.weight", 2, D, H * d, e));
  }
  SPILL_TRY(T(s, p, l, "ffn_norm", "post_attention_norm.weight", 1, D, 0, e));
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", 2, E, D, e));
  SPILL_TRY(imp_add_squeezed(s, p, l, "ffn_gate_inp_shexp", "ffn_gate_inp_shexp.weight", NULL, 1, D, 0, 0, e));
  SPILL_TRY(imp_plan_shared_experts(s, p, l, D, (uint64_t)c->Fs, "mlp.shared_expert", e));
  return imp_plan_experts(s, &p->moe[l], l, E, D, (uint64_t)c->F, "mlp.experts", hf, e);
}

static void fill_arch(const q35_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "%s", ARCH);
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = 0;
  a->d_ff = 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = c->bos < c->V ? c->bos : -1;
  a->eos_id = c->eos < c->V ? c->eos : -1;
  for (int l = 0; l < c->L; l++) a->layer_attn[l] = c->recurrent[l] ? SPILL_ATTN_GDN : SPILL_ATTN_GQA;
  spill_gqa_cfg *g = &a->gqa;
  g->n_heads = c->H;
  g->n_kv_heads = c->Hk;
  g->head_dim = c->d;
  g->rope_theta = c->theta;
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
  for (int l = 0; l < c->L; l++) SPILL_TRY(plan_layer(s, c, p, l, e));
  if (c->n_mtp > 0)
    snprintf(p->skipped, sizeof p->skipped, "layers %d..%d (next-token prediction, nextn/MTP)", c->L,
             c->L + c->n_mtp - 1);
  return imp_check_consumed(s, p, c->n_mtp > 0 ? c->L : -1, e);
}

int imp_qwen35moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  q35_cfg c;
  memset(&c, 0, sizeof c);
  SPILL_TRY(gguf_config(s, &c, e));
  return plan(s, &c, p, e);
}
