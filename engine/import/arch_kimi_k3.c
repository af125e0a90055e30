/* engine/import/arch_kimi_k3.c: Kimi K3 as released for `spill import`:
 * GGUF `kimi-k3` with llama.cpp de3ff81's keys and tensors (its
 * src/models/kimi-k3.cpp read as a specification; docs/MODEL.md "Kimi K3 as
 * released" lists them and the graph the engine computes).
 *
 * Layers with attention.head_count_kv 0 are KDA (the K3 decay when
 * kda.gate_lower_bound is set, else kimi-linear's softplus decay; full-rank
 * output gate ssm_g; ssm_a = -exp(A_log) written as log(-A)), the others
 * NoPE MLA (q LoRA when attn_q_a is present, attn_k_b / attn_v_b joined
 * into attn_kv_b, the optional output gate attn_gate). Leading dense
 * layers, then latent MoE: sigmoid + bias selection, no groups, optional
 * renormalisation (divided by max(sum, 2^-14)) and scale, routed experts on
 * ffn_routed_down h (no norm), their weighted sum RMS-normalised by
 * ffn_routed_norm when present, then ffn_routed_up; shared experts on h.
 * SiTU everywhere; attention residuals every attn_res.block_size layers.
 * Every optional part is decided by its key or tensor as llama.cpp decides
 * it; every tensor is consumed. Experts keep their bytes (MXFP4 as MXFP4)
 * under --experts keep. A row of arch_registry.c.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/import/import_internal.h"

#define GA "kimi-k3"

typedef struct k3_cfg {
  int V, D, L, H, dc, dn, dr, dv, ql, E, k, F, Fd, S, n_dense, Dl;
  int kd, kK, bs, norm, gate, rnorm, bos, eos;
  double eps, rscale, lb, beta, lbeta;
  uint8_t is_kda[SPILL_MAX_LAYERS];
} k3_cfg;

static int gkey(const spill_gguf *g, const char *key, int lo, int hi, int dflt, int req, int *out,
                spill_err *e) {
  return imp_gguf_int(g, GA, key, lo, hi, out, dflt, req, e);
}

/* A float key "kimi-k3.<key>": *out = dflt when absent and not required. */
static int gnum(const spill_gguf *g, const char *key, double lo, double hi, double dflt, int req, double *out,
                spill_err *e) {
  char k[96];
  snprintf(k, sizeof k, GA ".%s", key);
  *out = dflt;
  if (!spill_gguf_find_kv(g, k)) {
    SPILL_FAIL_IF(e, req, SPILL_E_FORMAT, "GGUF key %s is missing", k);
    return SPILL_OK;
  }
  SPILL_TRY(spill_gguf_get_f64(g, k, out, e));
  SPILL_FAIL_IF(e, !(*out >= lo && *out <= hi), SPILL_E_FORMAT, "GGUF key %s = %g out of range [%g, %g]", k,
                *out, lo, hi);
  return SPILL_OK;
}

static int has_tensor(const imp_src *s, int l, const char *suffix) {
  char b[96];
  snprintf(b, sizeof b, "blk.%d.%s", l, suffix);
  return spill_gguf_find(&s->gg, b) != NULL;
}

/* attention.head_count_kv: 0 marks a KDA layer (import_plan.c). */
static int layer_kinds(const spill_gguf *g, k3_cfg *c, spill_err *e) {
  return imp_gguf_kda_layers(g, GA, c->L, c->is_kda, e);
}

static int config(imp_src *s, k3_cfg *c, spill_err *e) {
  const spill_gguf *g = &s->gg;
  int klm, kl, vl, gf, ng, any_kda = 0, any_mla = 0;
  SPILL_TRY(gkey(g, "embedding_length", 1, 1048576, 0, 1, &c->D, e));
  SPILL_TRY(gkey(g, "block_count", 1, SPILL_MAX_LAYERS, 0, 1, &c->L, e));
  SPILL_TRY(gkey(g, "attention.head_count", 1, 4096, 0, 1, &c->H, e));
  SPILL_TRY(layer_kinds(g, c, e));
  for (int l = 0; l < c->L; l++) {
    any_kda |= c->is_kda[l];
    any_mla |= !c->is_kda[l];
  }
  SPILL_TRY(gnum(g, "attention.layer_norm_rms_epsilon", 1e-30, 1, 0, 1, &c->eps, e));
  SPILL_TRY(gkey(g, "kda.head_dim", 1, 4096, 0, any_kda, &c->kd, e));
  SPILL_TRY(gkey(g, "ssm.conv_kernel", 1, 64, 0, any_kda, &c->kK, e));
  SPILL_TRY(gnum(g, "kda.gate_lower_bound", -1e6, 0, 0, 0, &c->lb, e));
  SPILL_FAIL_IF(e, spill_gguf_find_kv(g, GA ".kda.gate_lower_bound") && !(c->lb < 0), SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".kda.gate_lower_bound %g: only a negative bound is supported", c->lb);
  SPILL_TRY(gkey(g, "attention.kv_lora_rank", 1, 1048576, 0, 1, &c->dc, e));
  SPILL_TRY(gkey(g, "rope.dimension_count", 0, 4096, 0, 1, &c->dr, e));
  SPILL_TRY(gkey(g, "attention.key_length_mla", 1, 1048576, 0, 1, &klm, e));
  SPILL_TRY(gkey(g, "attention.value_length_mla", 1, 4096, 0, 1, &c->dv, e));
  c->dn = klm - c->dr;
  SPILL_FAIL_IF(e, c->dn < 1, SPILL_E_FORMAT, "GGUF " GA ": key_length_mla %d <= rope.dimension_count %d", klm, c->dr);
  SPILL_FAIL_IF(e, c->dr % 2, SPILL_E_FORMAT, "GGUF " GA ": rope.dimension_count %d is odd", c->dr);
  SPILL_TRY(gkey(g, "attention.key_length", 1, 1048576, c->dc + c->dr, 0, &kl, e));
  SPILL_TRY(gkey(g, "attention.value_length", 1, 1048576, c->dc, 0, &vl, e));
  SPILL_FAIL_IF(e, kl != c->dc + c->dr || vl != c->dc, SPILL_E_FORMAT,
                "GGUF " GA ": key_length %d / value_length %d are not kv_lora_rank + rope / kv_lora_rank", kl, vl);
  SPILL_TRY(gkey(g, "expert_count", 1, SPILL_MAX_EXPERTS, 0, 1, &c->E, e));
  SPILL_TRY(gkey(g, "expert_used_count", 1, SPILL_MAX_TOPK, 0, 1, &c->k, e));
  SPILL_FAIL_IF(e, c->k > c->E, SPILL_E_FORMAT, "GGUF " GA ": top-k %d > %d experts", c->k, c->E);
  SPILL_TRY(gkey(g, "expert_feed_forward_length", 1, 1048576, 0, 1, &c->F, e));
  SPILL_TRY(gkey(g, "expert_shared_count", 0, 64, 0, 1, &c->S, e));
  SPILL_TRY(gkey(g, "leading_dense_block_count", 0, c->L, 0, 0, &c->n_dense, e));
  SPILL_TRY(gkey(g, "feed_forward_length", 1, 1048576, 0, c->n_dense > 0, &c->Fd, e));
  SPILL_TRY(gkey(g, "expert_latent_length", 0, 1048576, 0, 0, &c->Dl, e));
  SPILL_TRY(gkey(g, "expert_gating_func", 0, 16, 0, 1, &gf, e));
  SPILL_FAIL_IF(e, gf != 2, SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".expert_gating_func %d: only 2 (sigmoid) is supported for kimi-k3", gf);
  SPILL_TRY(gkey(g, "expert_group_count", 0, SPILL_MAX_EXPERTS, 0, 0, &ng, e));
  SPILL_FAIL_IF(e, ng > 1, SPILL_E_UNSUPPORTED,
                "GGUF key " GA ".expert_group_count %d: kimi-k3 has no group-limited routing", ng);
  c->norm = 0;
  if (spill_gguf_find_kv(g, GA ".expert_weights_norm"))
    SPILL_TRY(spill_gguf_get_bool(g, GA ".expert_weights_norm", &c->norm, e));
  SPILL_TRY(gnum(g, "expert_weights_scale", 0, 1e6, 0, 0, &c->rscale, e));
  if (c->rscale == 0) c->rscale = 1.0; /* llama.cpp: applied unless 0 or 1 */
  SPILL_TRY(gnum(g, "activation.situ_beta", 1e-30, 1e6, 0, 1, &c->beta, e));
  SPILL_TRY(gnum(g, "activation.situ_linear_beta", -1e6, 1e6, 0, 1, &c->lbeta, e));
  SPILL_TRY(gkey(g, "attn_res.block_size", 0, c->L, 0, 1, &c->bs, e));
  const spill_src_tensor *emb = spill_gguf_find(g, "token_embd.weight");
  SPILL_FAIL_IF(e, !emb || emb->ndim != 2 || emb->shape[0] > 16777216, SPILL_E_FORMAT,
                GA " tensor token_embd.weight is missing or too large");
  c->V = (int)emb->shape[0];
  SPILL_FAIL_IF(e, !spill_gguf_find(g, "output.weight"), SPILL_E_FORMAT,
                GA " tensor output.weight is missing (llama.cpp requires it)");
  /* the optional tensors: llama.cpp decides per layer; spill's arch holds
   * one choice, so every layer of the kind must agree */
  int first_mla = -1, first_moe = c->n_dense < c->L ? c->n_dense : -1;
  for (int l = 0; l < c->L && first_mla < 0; l++)
    if (!c->is_kda[l]) first_mla = l;
  c->ql = 0;
  if (any_mla) {
    c->gate = has_tensor(s, first_mla, "attn_gate.weight");
    char b[64];
    snprintf(b, sizeof b, "blk.%d.attn_q_a.weight", first_mla);
    const spill_src_tensor *qa = spill_gguf_find(g, b);
    if (qa) {
      SPILL_FAIL_IF(e, qa->ndim != 2 || qa->shape[0] < 1 || qa->shape[0] > 1048576, SPILL_E_FORMAT,
                    "tensor %s: not a matrix of at most 1048576 rows", b);
      c->ql = (int)qa->shape[0];
    }
    for (int l = first_mla; l < c->L; l++) {
      if (c->is_kda[l]) continue;
      SPILL_FAIL_IF(e, has_tensor(s, l, "attn_gate.weight") != c->gate, SPILL_E_UNSUPPORTED,
                    "tensor blk.%d.attn_gate.weight: the MLA output gate is on some MLA layers and not on "
                    "others (spill's arch holds one choice)", l);
      SPILL_FAIL_IF(e, has_tensor(s, l, "attn_q_a.weight") != (c->ql > 0), SPILL_E_UNSUPPORTED,
                    "tensor blk.%d.attn_q_a.weight: q LoRA on some MLA layers and not on others", l);
    }
  }
  c->rnorm = first_moe >= 0 && has_tensor(s, first_moe, "ffn_routed_norm.weight");
  for (int l = c->n_dense; l < c->L; l++)
    SPILL_FAIL_IF(e, has_tensor(s, l, "ffn_routed_norm.weight") != c->rnorm, SPILL_E_UNSUPPORTED,
                  "tensor blk.%d.ffn_routed_norm.weight: on some MoE layers and not on others", l);
  SPILL_FAIL_IF(e, c->rnorm && c->Dl == 0, SPILL_E_UNSUPPORTED,
                "tensor blk.%d.ffn_routed_norm.weight without " GA ".expert_latent_length", first_moe);
  return imp_gguf_bos_eos(g, c->V, 0, &c->bos, &c->eos, e);
}

/* ---- tensors ---- */

static int T(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, int nd, uint64_t r, uint64_t co,
             spill_err *e) {
  return imp_add_layer(s, p, l, dst, g, NULL, nd, r, co, 0, e);
}

/* A tensor of shape [rows, cols] (cols 0: [rows]) up to unit dimensions
 * (conv weights numpy (1, C, 1, K) or (C, 1, K); ssm_a (H) or (1, 1, H, 1));
 * f32: the container keeps it as f32. */
static int T_squeezed(imp_src *s, imp_plan *p, int l, const char *dst, const char *g, uint64_t rows,
                      uint64_t cols, int f32, spill_err *e) {
  imp_trunk *t = &p->trunk[p->n_trunk];
  memset(t, 0, sizeof *t);
  char b[200];
  snprintf(t->name, sizeof t->name, "blk.%d.%s", l, dst);
  snprintf(b, sizeof b, "blk.%d.%s", l, g);
  SPILL_TRY(imp_need(s, b, &t->src, e));
  uint64_t got[SPILL_SRC_MAX_DIMS], want[2];
  int ng = 0, nw = 0;
  for (int i = 0; i < t->src->ndim; i++)
    if (t->src->shape[i] != 1) got[ng++] = t->src->shape[i];
  if (rows != 1) want[nw++] = rows;
  if (cols > 1) want[nw++] = cols;
  if (ng != nw || (nw > 0 && memcmp(got, want, (size_t)nw * sizeof *got)))
    return spill_err_set(e, SPILL_E_FORMAT, "tensor %s: shape is not [%llu, %llu] up to unit dimensions", b,
                         (unsigned long long)rows, (unsigned long long)(cols ? cols : 1));
  t->ndim = cols ? 2 : 1;
  t->rows = rows;
  t->cols = cols ? cols : 1;
  t->f32 = f32;
  p->n_trunk++;
  return SPILL_OK;
}

static int plan_kda(imp_src *s, const k3_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, n = (uint64_t)c->H * c->kd, d = c->kd, K = c->kK;
  static const char *const qkv[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    char dst[32], g[48];
    snprintf(dst, sizeof dst, "attn_%s", qkv[i]);
    snprintf(g, sizeof g, "attn_%s.weight", qkv[i]);
    SPILL_TRY(T(s, p, l, dst, g, 2, n, D, e));
    snprintf(dst, sizeof dst, "attn_%s_conv", qkv[i]);
    snprintf(g, sizeof g, "ssm_conv1d_%s.weight", qkv[i]);
    SPILL_TRY(T_squeezed(s, p, l, dst, g, n, K, 1, e));
  }
  SPILL_TRY(T(s, p, l, "attn_f_a", "ssm_f_a.weight", 2, d, D, e));
  SPILL_TRY(T(s, p, l, "attn_f_b", "ssm_f_b.weight", 2, n, d, e));
  SPILL_TRY(T(s, p, l, "attn_dt_bias", "ssm_dt.bias", 1, n, 0, e));
  SPILL_TRY(T_squeezed(s, p, l, "attn_a_log", "ssm_a", (uint64_t)c->H, 0, 0, e));
  p->trunk[p->n_trunk - 1].log_neg = 1; /* -exp(A_log) -> A_log */
  SPILL_TRY(T(s, p, l, "attn_b", "ssm_beta.weight", 2, (uint64_t)c->H, D, e));
  SPILL_TRY(T(s, p, l, "attn_g", "ssm_g.weight", 2, n, D, e)); /* the full-rank output gate */
  SPILL_TRY(T(s, p, l, "attn_o_norm", "ssm_norm.weight", 1, d, 0, e));
  return T(s, p, l, "attn_output", "attn_output.weight", 2, D, n, e);
}

static int plan_mla(imp_src *s, const k3_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, H = c->H, dn = c->dn, dr = c->dr, dv = c->dv, dc = c->dc, ql = c->ql;
  char pre[32], b[64];
  snprintf(pre, sizeof pre, "blk.%d.", l);
  snprintf(b, sizeof b, "%sattn_kv_b.weight", pre);
  SPILL_FAIL_IF(e, spill_gguf_find(&s->gg, b), SPILL_E_UNSUPPORTED,
                "tensor %s: the unsplit kv_b is not part of kimi-k3 (llama.cpp's graph needs attn_k_b / attn_v_b)", b);
  if (ql > 0) {
    SPILL_TRY(T(s, p, l, "attn_q_a", "attn_q_a.weight", 2, ql, D, e));
    SPILL_TRY(T(s, p, l, "attn_q_a_norm", "attn_q_a_norm.weight", 1, ql, 0, e));
    SPILL_TRY(T(s, p, l, "attn_q_b", "attn_q_b.weight", 2, H * (dn + dr), ql, e));
  } else {
    SPILL_TRY(T(s, p, l, "attn_q", "attn_q.weight", 2, H * (dn + dr), D, e));
  }
  SPILL_TRY(T(s, p, l, "attn_kv_a", "attn_kv_a_mqa.weight", 2, dc + dr, D, e));
  SPILL_TRY(T(s, p, l, "attn_kv_a_norm", "attn_kv_a_norm.weight", 1, dc, 0, e));
  SPILL_TRY(imp_add_kv_b_split(s, p, pre, l, H, dc, dn, dv, e));
  if (c->gate) SPILL_TRY(T(s, p, l, "attn_gate", "attn_gate.weight", 2, H * dv, D, e));
  return T(s, p, l, "attn_output", "attn_output.weight", 2, D, H * dv, e);
}

static int plan_ffn(imp_src *s, const k3_cfg *c, imp_plan *p, int l, spill_err *e) {
  const uint64_t D = c->D, E = c->E, Dl = c->Dl, S = (uint64_t)c->S * c->F;
  static const char *const w[SPILL_SEC_COUNT] = {NULL, NULL, NULL};
  if (l < c->n_dense) return imp_plan_dense_ffn(s, p, l, D, (uint64_t)c->Fd, e);
  SPILL_TRY(T(s, p, l, "ffn_gate_inp", "ffn_gate_inp.weight", 2, E, D, e));
  SPILL_TRY(T(s, p, l, "exp_probs_b", "exp_probs_b.bias", 1, E, 0, e));
  if (Dl > 0) {
    SPILL_TRY(T(s, p, l, "moe_down_proj", "ffn_routed_down.weight", 2, Dl, D, e));
    if (c->rnorm) SPILL_TRY(T(s, p, l, "moe_latent_norm", "ffn_routed_norm.weight", 1, Dl, 0, e));
    SPILL_TRY(T(s, p, l, "moe_up_proj", "ffn_routed_up.weight", 2, D, Dl, e));
  }
  if (S > 0) SPILL_TRY(imp_plan_shared_experts(s, p, l, D, S, "block_sparse_moe.shared_experts", e));
  return imp_plan_experts(s, &p->moe[l - c->n_dense], l, E, Dl > 0 ? Dl : D, (uint64_t)c->F, NULL, w, e);
}

static int plan_tensors(imp_src *s, const k3_cfg *c, imp_plan *p, spill_err *e) {
  const uint64_t D = c->D;
  SPILL_TRY(imp_plan_init(s, p, 4 + 28 * c->L, c->L - c->n_dense + 1, (uint64_t)c->V, D, 0, e));
  if (c->bs > 0) SPILL_TRY(imp_add_trunk(s, p, "output_res_score", "output_res_score.weight", 1, D, 0, 0, e));
  for (int l = 0; l < c->L; l++) {
    SPILL_TRY(T(s, p, l, "attn_norm", "attn_norm.weight", 1, D, 0, e));
    if (c->bs > 0) {
      SPILL_TRY(T(s, p, l, "attn_res_score", "attn_res_score.weight", 1, D, 0, e));
      SPILL_TRY(T(s, p, l, "ffn_res_score", "ffn_res_score.weight", 1, D, 0, e));
    }
    SPILL_TRY(c->is_kda[l] ? plan_kda(s, c, p, l, e) : plan_mla(s, c, p, l, e));
    SPILL_TRY(T(s, p, l, "ffn_norm", "ffn_norm.weight", 1, D, 0, e));
    SPILL_TRY(plan_ffn(s, c, p, l, e));
  }
  return imp_check_consumed(s, p, -1, e);
}

static void fill_arch(const k3_cfg *c, spill_arch *a) {
  snprintf(a->family, sizeof a->family, "kimi-k3");
  a->vocab_size = c->V;
  a->d_model = c->D;
  a->n_layers = c->L;
  a->n_dense_layers = c->n_dense;
  a->d_ff = c->n_dense > 0 ? c->Fd : 0;
  a->norm_eps = c->eps;
  a->activation = SPILL_ACT_SITU;
  a->situ_beta = c->beta;
  a->situ_lambda = c->lbeta;
  a->attn_res_block = c->bs;
  a->bos_id = c->bos < c->V ? c->bos : -1;
  a->eos_id = c->eos < c->V ? c->eos : -1;
  int any_mla = 0, any_kda = 0;
  for (int l = 0; l < c->L; l++) {
    a->layer_attn[l] = c->is_kda[l] ? SPILL_ATTN_KDA : SPILL_ATTN_MLA;
    any_kda |= c->is_kda[l];
    any_mla |= !c->is_kda[l];
  }
  if (any_mla) {
    spill_mla_cfg *m = &a->mla;
    m->n_heads = c->H;
    m->q_lora_rank = c->ql;
    m->kv_lora_rank = c->dc;
    m->qk_nope_dim = c->dn;
    m->qk_rope_dim = c->dr;
    m->v_head_dim = c->dv;
    m->use_rope = 0;         /* NoPE: k_pe / q_pe unrotated */
    m->rope_theta = 10000.0; /* unused without RoPE; the manifest needs a positive value */
    m->kv_norm_eps = 0;      /* rms_norm_eps */
    m->out_gate = c->gate;
  }
  if (any_kda) {
    spill_kda_cfg *k = &a->kda;
    k->n_heads = c->H;
    k->head_dim = c->kd;
    k->conv_kernel = c->kK;
    k->gate_rank = c->kd; /* ssm_f_a (d, D) */
    k->out_gate_rank = 0; /* ssm_g (H d, D), full rank */
    k->decay_floor = 0;
    k->l2norm_eps = c->eps; /* llama.cpp's q/k norm: x / sqrt(|x|^2 + rms eps) */
    k->gate_lower_bound = c->lb;
  }
  spill_moe_cfg *o = &a->moe;
  o->n_experts = c->E;
  o->top_k = c->k;
  o->d_expert = c->F;
  o->n_shared = c->S;
  o->d_shared = c->S > 0 ? c->F : 0;
  o->d_latent = c->Dl;
  o->latent_norm = c->Dl > 0 ? (c->rnorm ? SPILL_LATENT_NORM_OUTPUT : SPILL_LATENT_NORM_NONE)
                             : SPILL_LATENT_NORM_INPUT;
  o->router = SPILL_ROUTER_SIGMOID;
  o->norm_topk = c->norm;
  o->norm_min = 6.103515625e-5; /* llama.cpp clamps the sum at 2^-14 */
  o->routed_scale = c->rscale;
}

int imp_kimi_k3_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e) {
  (void)variant;
  k3_cfg *c = calloc(1, sizeof *c);
  int rc = c ? config(s, c, e) : spill_err_set(e, SPILL_E_NOMEM, "out of memory");
  if (rc == SPILL_OK) {
    fill_arch(c, &p->arch);
    rc = plan_tensors(s, c, p, e);
  }
  free(c);
  return rc;
}
