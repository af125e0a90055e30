/* research/gen/synth_plan.c: presets, the twin derivation and the tensor list.
 *
 * A plan is an architecture (spill_arch) plus the ordered list of trunk
 * tensors with, for each, how its values are drawn (spill_gen_init). The
 * tensor names and shapes are those of docs/MODEL.md; the planner is the only
 * place that decides them, and the writer and the coverage probe both read
 * the plan, so what is measured is what is written.
 *
 * Weight scales keep the residual stream bounded over many layers: inputs of
 * projections have unit rms (they follow an rmsnorm), so reading matrices get
 * std 1/sqrt(cols); every matrix that writes into the residual stream gets
 * an extra 1/sqrt(2 n_layers) (there are 2 n_layers additions), and SwiGLU
 * outputs are divided by ~0.6, the rms of silu(g) * u for unit Gaussians.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "research/gen/synth_internal.h"
#include "research/sim/routing_defaults.h"

/* The shape knobs a preset sets; everything else is derived from them. */
typedef struct gen_shape {
  const char *name;
  int vocab, d_model, n_layers, n_dense, d_ff;
  int mix; /* MIX_*: k3 (Kimi K3 as released), mla, kda, gqa, qwen35, k3-family */
  int res_block; /* released K3: AttnRes checkpoint every res_block layers (k3_res_block) */
  int heads, head_dim;               /* KDA, MLA and GQA heads */
  int kv_heads;                      /* GQA */
  int q_lora, kv_lora, nope, rope, vdim, use_rope;
  int gate_rank, out_gate_rank;
  int n_experts, top_k, d_expert, n_shared, d_shared, d_latent;
  int softmax_router;
  int swa_window; /* gqa-swa: gpt-oss's sliding window on the even layers, a sink per head */
  uint32_t trunk_group;
} gen_shape;

/* MIX_K3 is Kimi K3 as released (docs/MODEL.md "Kimi K3 as released":
 * AttnRes, SiTU, the MLA output gate, the KDA gate lower bound, the latent
 * MoE's norm on the routed sum); MIX_K3_FAMILY is the earlier reconstruction
 * ("the K3 family": plain residual adds, SwiGLU, a normed latent input), the
 * layer pattern of both 3 KDA : 1 MLA. mla / kda / gqa are the family's
 * single-kind variants; qwen35 is Qwen3.5-MoE's 3 GDN : 1 gated GQA. */
enum {
  MIX_K3 = 0,
  MIX_MLA = 1,
  MIX_KDA = 2,
  MIX_GQA = 3,
  MIX_QWEN35 = 4,
  MIX_K3_FAMILY = 5,
  MIX_GPTOSS = 6, /* gpt-oss (openai-moe): sinks, sliding window on even layers, biases, YaRN,
                     softmax over the chosen top-k, expert biases, clamped SwiGLU; no dense layer */
  MIX_GLM4 = 7,   /* GLM-4.5: q/k/v biases, half-head RoPE, sigmoid router, one shared expert */
};

/* Mixes whose every layer is GQA-style attention with a plain MoE (no latent). */
static int plain_moe(int mix) {
  return mix == MIX_GQA || mix == MIX_QWEN35 || mix == MIX_GPTOSS || mix == MIX_GLM4;
}

static int k3_pattern(int mix) { return mix == MIX_K3 || mix == MIX_K3_FAMILY; }

/* Released K3: SiTU's betas, the KDA decay's lower bound, and the AttnRes
 * block (12 of 93 layers: 8 checkpoints), scaled to n_layers with at least
 * 2 so that a small model banks more than its embedding. */
#define K3_SITU_BETA 4.0
#define K3_SITU_LAMBDA 25.0
#define K3_GATE_LOWER_BOUND -5.0
static int k3_res_block(int n_layers) {
  int bs = (int)floor(12.0 * n_layers / 93.0 + 0.5);
  return bs < 2 ? 2 : bs;
}

/* Released K3's parts that depend on the final shape: the full-rank decay
 * gate (ssm_f_a is (head_dim, D) in K3) and the AttnRes block. */
static void k3_released(gen_shape *s) {
  if (s->mix != MIX_K3) return;
  s->gate_rank = s->head_dim;
  s->res_block = k3_res_block(s->n_layers);
}

static int round64(double x) {
  int v = (int)floor(x / 64.0 + 0.5) * 64;
  return v < 64 ? 64 : v;
}

void spill_gen_opts_init(spill_gen_opts *o) {
  memset(o, 0, sizeof *o);
  o->preset = "nano";
  o->ram_bytes = SPILL_GEN_DEFAULT_RAM;
  o->disk_bytes = SPILL_GEN_DEFAULT_DISK;
  o->seed = 1;
  o->attn_mix = "k3";
  o->trunk = SPILL_GEN_TRUNK_Q4;
  o->expert_dtype = SPILL_DT_RVQ3;
  o->skew = -1.0;
  o->la_precision = -1.0;
  o->coact = -1.0;
  o->reuse = -1.0;
  o->threads = 1;
}

static spill_attn_kind layer_kind(int mix, int l, int n_layers) {
  switch (mix) {
    case MIX_MLA: return SPILL_ATTN_MLA;
    case MIX_KDA: return SPILL_ATTN_KDA;
    case MIX_GQA:
    case MIX_GPTOSS:
    case MIX_GLM4: return SPILL_ATTN_GQA;
    case MIX_QWEN35: /* Qwen3.5-MoE: every 4th layer gated GQA, the others Gated DeltaNet */
      return (l + 1) % 4 == 0 ? SPILL_ATTN_GQA : SPILL_ATTN_GDN;
    default: /* K3 (both): every 4th layer and the last are MLA (93 -> 69 KDA + 24 MLA) */
      return (l % 4 == 3 || l == n_layers - 1) ? SPILL_ATTN_MLA : SPILL_ATTN_KDA;
  }
}

/* ---------------------------------------------------------------- tensor list */

typedef struct tlist {
  spill_tensor_info *t;
  spill_gen_init *init;
  int n, cap;
  int oom;
  int layer; /* the layer being listed (spill_gen_init.layer) */
} tlist;

enum { CLS_BULK = 0, CLS_EMBD = 1, CLS_F32 = 2 };

static void tl_add(tlist *tl, const spill_gen_opts *o, uint32_t group, int cls, int ndim,
                   uint64_t rows, uint64_t cols, spill_gen_init_kind kind, float a,
                   const char *fmt, ...) __attribute__((format(printf, 10, 11)));

static void tl_add(tlist *tl, const spill_gen_opts *o, uint32_t group, int cls, int ndim,
                   uint64_t rows, uint64_t cols, spill_gen_init_kind kind, float a,
                   const char *fmt, ...) {
  if (tl->oom) return;
  if (tl->n == tl->cap) {
    int cap = tl->cap ? tl->cap * 2 : 256;
    spill_tensor_info *t = realloc(tl->t, (size_t)cap * sizeof *t);
    if (!t) { tl->oom = 1; return; }
    tl->t = t;
    spill_gen_init *in = realloc(tl->init, (size_t)cap * sizeof *in);
    if (!in) { tl->oom = 1; return; }
    tl->init = in;
    tl->cap = cap;
  }
  spill_tensor_info *t = &tl->t[tl->n];
  memset(t, 0, sizeof *t);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  t->ndim = ndim;
  t->shape[0] = rows;
  t->shape[1] = ndim == 1 ? 1 : cols;
  uint64_t c = t->shape[1];
  t->dtype = SPILL_DT_F32;
  if (o->trunk == SPILL_GEN_TRUNK_Q4 && ndim == 2 && c % group == 0) {
    if (cls == CLS_BULK) t->dtype = SPILL_DT_Q4;
    if (cls == CLS_EMBD) t->dtype = SPILL_DT_Q8;
  }
  t->group = (t->dtype == SPILL_DT_Q4 || t->dtype == SPILL_DT_Q8) ? group : 0;
  tl->init[tl->n].kind = kind;
  tl->init[tl->n].a = a;
  tl->init[tl->n].layer = tl->layer;
  tl->n++;
}

#define M(cls, r, c, a, ...) tl_add(tl, o, g, cls, 2, r, c, SPILL_GEN_INIT_GAUSS, a, __VA_ARGS__)
#define NORM(n, ...) tl_add(tl, o, g, CLS_F32, 1, n, 1, SPILL_GEN_INIT_NORM, 0.02f, __VA_ARGS__)
#define VEC(n, a, ...) tl_add(tl, o, g, CLS_F32, 1, n, 1, SPILL_GEN_INIT_GAUSS, a, __VA_ARGS__)

/* KDA attention of layer l (mixer, norm and output writing with rms ro):
 * box conv taps and faster decay when the plan carries reuse, else the
 * earlier random taps and decay range. */
static void kda_tensors(const gen_shape *s, const spill_gen_opts *o, uint32_t g, float ro,
                        int reuse, int l, tlist *tl) {
  const int D = s->d_model, H = s->heads, hd = s->head_dim, C = H * hd, K = 4;
  const float inD = 1.0f / sqrtf((float)D);
  const spill_gen_init_kind conv = reuse ? SPILL_GEN_INIT_CONV_BOX : SPILL_GEN_INIT_CONV;
  const float ca = reuse ? 0.5f : 0.5f / sqrtf((float)K); /* box: rms-preserving sum of K */
  static const char *const qkv[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) M(CLS_BULK, C, D, inD, "blk.%d.attn_%s", l, qkv[i]);
  for (int i = 0; i < 3; i++)
    tl_add(tl, o, g, CLS_F32, 2, C, K, conv, ca, "blk.%d.attn_%s_conv", l, qkv[i]);
  M(CLS_BULK, s->gate_rank, D, inD, "blk.%d.attn_f_a", l);
  M(CLS_BULK, C, s->gate_rank, 0.5f / sqrtf((float)s->gate_rank), "blk.%d.attn_f_b", l);
  /* dt from [a, 0.1] (a = 1e-3 when 0): with reuse, 1e-2, so that no channel
   * keeps a near-constant memory of the whole context */
  if (s->mix == MIX_K3) { /* lb sigmoid(exp(A_log) f), A_log 0: decay -dt for f = dt_bias */
    tl_add(tl, o, g, CLS_F32, 1, C, 1, SPILL_GEN_INIT_DT_BIAS_LB,
           reuse ? SPILL_GEN_REUSE_DT_MIN : 0.0f, "blk.%d.attn_dt_bias", l);
    tl_add(tl, o, g, CLS_F32, 1, H, 1, SPILL_GEN_INIT_GAUSS, 0.0f, "blk.%d.attn_a_log", l);
  } else {
    tl_add(tl, o, g, CLS_F32, 1, C, 1, SPILL_GEN_INIT_DT_BIAS,
           reuse ? SPILL_GEN_REUSE_DT_MIN : 0.0f, "blk.%d.attn_dt_bias", l);
    tl_add(tl, o, g, CLS_F32, 1, H, 1, SPILL_GEN_INIT_A_LOG, 0.0f, "blk.%d.attn_a_log", l);
  }
  M(CLS_BULK, H, D, inD, "blk.%d.attn_b", l);
  if (s->out_gate_rank == 0) {
    M(CLS_BULK, C, D, inD, "blk.%d.attn_g", l);
  } else {
    M(CLS_BULK, s->out_gate_rank, D, inD, "blk.%d.attn_g_a", l);
    M(CLS_BULK, C, s->out_gate_rank, 1.0f / sqrtf((float)s->out_gate_rank), "blk.%d.attn_g_b",
      l);
  }
  NORM(hd, "blk.%d.attn_o_norm", l);
  /* o = rmsnorm(o) * sigmoid(gate): rms ~0.5 */
  M(CLS_BULK, D, C, 2.0f * ro / sqrtf((float)C), "blk.%d.attn_output", l);
}

/* Gated DeltaNet attention of layer l (Qwen3.5 shape: k heads = the GQA
 * kv heads, v heads = the heads), output writing with rms ro. */
static void gdn_tensors(const gen_shape *s, const spill_gen_opts *o, uint32_t g, float ro, int l,
                        tlist *tl) {
  const int D = s->d_model, hd = s->head_dim, nv = s->heads * hd, K = 4;
  const int C = 2 * s->kv_heads * hd + nv;
  const float inD = 1.0f / sqrtf((float)D);
  M(CLS_BULK, C, D, inD, "blk.%d.attn_qkv", l);
  M(CLS_BULK, nv, D, inD, "blk.%d.attn_gate", l);
  tl_add(tl, o, g, CLS_F32, 2, C, K, SPILL_GEN_INIT_CONV, 0.5f / sqrtf((float)K), "blk.%d.ssm_conv", l);
  M(CLS_BULK, s->heads, D, inD, "blk.%d.ssm_alpha", l);
  M(CLS_BULK, s->heads, D, inD, "blk.%d.ssm_beta", l);
  tl_add(tl, o, g, CLS_F32, 1, s->heads, 1, SPILL_GEN_INIT_DT_BIAS, 0.0f, "blk.%d.ssm_dt_bias", l);
  tl_add(tl, o, g, CLS_F32, 1, s->heads, 1, SPILL_GEN_INIT_NEG_A, 0.0f, "blk.%d.ssm_a", l);
  NORM(hd, "blk.%d.ssm_norm", l);
  /* o = rmsnorm(o) * silu(z): rms ~0.5 */
  M(CLS_BULK, D, nv, 2.0f * ro / sqrtf((float)nv), "blk.%d.attn_output", l);
}

/* GQA attention of layer l, output writing with rms ro: Qwen3.5's query +
 * gate rows and head q/k norms, GLM-4.5's and gpt-oss's q/k/v biases, gpt-oss's
 * output bias and per-head sink logits. */
static void gqa_tensors(const gen_shape *s, const spill_gen_opts *o, uint32_t g, float ro, int l,
                        tlist *tl) {
  const int D = s->d_model, H = s->heads, hd = s->head_dim;
  const int q35 = s->mix == MIX_QWEN35;
  const float inD = 1.0f / sqrtf((float)D);
  M(CLS_BULK, (q35 ? 2 : 1) * H * hd, D, inD, "blk.%d.attn_q", l); /* qwen35: query + gate */
  M(CLS_BULK, s->kv_heads * hd, D, inD, "blk.%d.attn_k", l);
  M(CLS_BULK, s->kv_heads * hd, D, inD, "blk.%d.attn_v", l);
  M(CLS_BULK, D, H * hd, ro / sqrtf((float)(H * hd)), "blk.%d.attn_output", l);
  if (q35) {
    NORM(hd, "blk.%d.attn_q_norm", l);
    NORM(hd, "blk.%d.attn_k_norm", l);
  }
  if (s->mix == MIX_GPTOSS || s->mix == MIX_GLM4) { /* q/k/v biases */
    VEC(H * hd, 0.05f, "blk.%d.attn_q_bias", l);
    VEC(s->kv_heads * hd, 0.05f, "blk.%d.attn_k_bias", l);
    VEC(s->kv_heads * hd, 0.05f, "blk.%d.attn_v_bias", l);
  }
  if (s->mix == MIX_GPTOSS) { /* output bias (a residual writer), sink logits per head */
    VEC(D, 0.1f * ro, "blk.%d.attn_output_bias", l);
    VEC(H, 0.5f, "blk.%d.attn_sinks", l);
  }
  if (s->swa_window > 0) VEC(H, 1.0f, "blk.%d.attn_sinks", l); /* gqa-swa: a logit per head */
}

static void build_tensors(const gen_shape *s, const spill_gen_opts *o, float bias_spread,
                          float rho, float base, tlist *tl) {
  const uint32_t g = s->trunk_group;
  const int D = s->d_model, L = s->n_layers;
  float ro = 0; /* residual writers of layer l: spill_gen_write_scale */
  /* reuse: layer 0's KDA attention writes base, every other writer scales with
   * the stream's rms after it (spill_gen_reuse_scale) */
  const float sb = spill_gen_reuse_scale(base);
  const float sw = 1.0f / 0.6f;                    /* swiglu output rms */
  const float inD = 1.0f / sqrtf((float)D);
  const int k3 = s->mix == MIX_K3; /* released: AttnRes, SiTU, MLA gate, routed-sum norm */
  /* AttnRes score vectors: scores sum(rmsnorm(e) w) of std 0.25, so the mix
   * weights vary around uniform, and a uniform mix points where the plain
   * residual stream does (every write sits in one bank entry or the stream):
   * the writer scales and routing calibration of the family carry over */
  const float res_a = 0.25f * inD;
  M(CLS_EMBD, s->vocab, D, 1.0f, "tok_embd");
  for (int l = 0; l < L; l++) {
    ro = sb * spill_gen_write_scale(rho, l);
    tl->layer = l;
    NORM(D, "blk.%d.attn_norm", l);
    if (k3) {
      VEC(D, res_a, "blk.%d.attn_res_score", l);
      VEC(D, res_a, "blk.%d.ffn_res_score", l);
    }
    spill_attn_kind k = layer_kind(s->mix, l, L);
    const int H = s->heads;
    if (k == SPILL_ATTN_GQA) {
      gqa_tensors(s, o, g, ro, l, tl);
    } else if (k == SPILL_ATTN_GDN) {
      gdn_tensors(s, o, g, ro, l, tl);
    } else if (k == SPILL_ATTN_MLA) {
      const int qd = H * (s->nope + s->rope);
      if (s->q_lora > 0) {
        M(CLS_BULK, s->q_lora, D, inD, "blk.%d.attn_q_a", l);
        NORM(s->q_lora, "blk.%d.attn_q_a_norm", l);
        M(CLS_BULK, qd, s->q_lora, 1.0f / sqrtf((float)s->q_lora), "blk.%d.attn_q_b", l);
      } else {
        M(CLS_BULK, qd, D, inD, "blk.%d.attn_q", l);
      }
      M(CLS_BULK, s->kv_lora + s->rope, D, inD, "blk.%d.attn_kv_a", l);
      NORM(s->kv_lora, "blk.%d.attn_kv_a_norm", l);
      M(CLS_BULK, H * (s->nope + s->vdim), s->kv_lora, 1.0f / sqrtf((float)s->kv_lora),
        "blk.%d.attn_kv_b", l);
      /* released: o * sigmoid(attn_gate h) halves o's rms */
      if (k3) M(CLS_BULK, H * s->vdim, D, inD, "blk.%d.attn_gate", l);
      M(CLS_BULK, D, H * s->vdim, (k3 ? 2.0f : 1.0f) * ro / sqrtf((float)(H * s->vdim)),
        "blk.%d.attn_output", l);
    } else {
      kda_tensors(s, o, g, (l == 0 && base > 0) ? base : ro, base > 0, l, tl);
    }
    NORM(D, "blk.%d.ffn_norm", l);
    if (l < s->n_dense) {
      M(CLS_BULK, s->d_ff, D, inD, "blk.%d.ffn_gate", l);
      M(CLS_BULK, s->d_ff, D, inD, "blk.%d.ffn_up", l);
      M(CLS_BULK, D, s->d_ff, sw * ro / sqrtf((float)s->d_ff), "blk.%d.ffn_down", l);
      continue;
    }
    const int E = s->n_experts;
    /* router: f32, logits ~N(0, 1) for unit-rms h */
    tl_add(tl, o, g, CLS_F32, 2, E, D, SPILL_GEN_INIT_ROUTER, inD, "blk.%d.ffn_gate_inp", l);
    if (!s->softmax_router)
      tl_add(tl, o, g, CLS_F32, 1, E, 1, SPILL_GEN_INIT_PROBS_B, bias_spread,
             "blk.%d.exp_probs_b", l);
    if (s->mix == MIX_GPTOSS) { /* router bias; per-expert biases after gate, up and down */
      VEC(E, 0.1f, "blk.%d.ffn_gate_inp_bias", l);
      tl_add(tl, o, g, CLS_F32, 2, E, s->d_expert, SPILL_GEN_INIT_GAUSS, 0.05f,
             "blk.%d.ffn_gate_exps_bias", l);
      tl_add(tl, o, g, CLS_F32, 2, E, s->d_expert, SPILL_GEN_INIT_GAUSS, 0.05f,
             "blk.%d.ffn_up_exps_bias", l);
      tl_add(tl, o, g, CLS_F32, 2, E, D, SPILL_GEN_INIT_GAUSS, 0.1f * ro,
             "blk.%d.ffn_down_exps_bias", l);
    }
    if (s->d_latent > 0) {
      M(CLS_BULK, s->d_latent, D, inD, "blk.%d.moe_down_proj", l);
      NORM(s->d_latent, "blk.%d.moe_latent_norm", l);
      /* family: y = weighted mean of unit-rms expert outputs; released: y is
       * the routed sum after moe_latent_norm, unit rms */
      M(CLS_BULK, D, s->d_latent, (k3 ? 1.0f : 2.0f) * ro / sqrtf((float)s->d_latent),
        "blk.%d.moe_up_proj", l);
    }
    if (s->n_shared > 0) {
      const int S = s->n_shared * s->d_shared;
      M(CLS_BULK, S, D, inD, "blk.%d.ffn_gate_shexp", l);
      M(CLS_BULK, S, D, inD, "blk.%d.ffn_up_shexp", l);
      M(CLS_BULK, D, S, sw * ro / sqrtf((float)S), "blk.%d.ffn_down_shexp", l);
      if (s->mix == MIX_QWEN35)
        tl_add(tl, o, g, CLS_F32, 2, 1, D, SPILL_GEN_INIT_GAUSS, inD, "blk.%d.ffn_gate_inp_shexp", l);
    }
    if (o->expert_dtype == SPILL_DT_RVQ3) {
      static const char *mat[3] = {"gate", "up", "down"};
      for (int m = 0; m < 3; m++)
        tl_add(tl, o, g, CLS_F32, 2, SPILL_RVQ_STAGES * SPILL_RVQ_ENTRIES, SPILL_RVQ_DIM,
               SPILL_GEN_INIT_CODEBOOK, 1.0f, "blk.%d.ffn_%s_exps.codebook", l, mat[m]);
    }
  }
  NORM(D, "output_norm");
  if (k3) {
    VEC(D, res_a, "output_res_score");
  }
  M(CLS_EMBD, s->vocab, D, 2.0f * inD, "output");
#undef M
#undef NORM
#undef VEC
}

/* ---------------------------------------------------------------- arch */

static void fill_arch(const gen_shape *s, spill_arch *a) {
  memset(a, 0, sizeof *a);
  snprintf(a->family, sizeof a->family, "%s",
           s->mix == MIX_GQA      ? "olmoe"
           : s->mix == MIX_QWEN35 ? "qwen35moe"
           : s->mix == MIX_GPTOSS ? "gpt-oss"
           : s->mix == MIX_GLM4   ? "glm4moe"
           : s->mix == MIX_K3     ? "kimi-k3"
                                  : "k3");
  a->vocab_size = s->vocab;
  a->d_model = s->d_model;
  a->n_layers = s->n_layers;
  a->n_dense_layers = s->n_dense;
  a->d_ff = s->d_ff;
  a->norm_eps = 1e-5;
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = 256;
  a->eos_id = 257;
  for (int l = 0; l < s->n_layers; l++) a->layer_attn[l] = layer_kind(s->mix, l, s->n_layers);
  if (s->mix == MIX_K3) { /* Kimi K3 as released (docs/MODEL.md) */
    a->activation = SPILL_ACT_SITU;
    a->situ_beta = K3_SITU_BETA;
    a->situ_lambda = K3_SITU_LAMBDA;
    a->attn_res_block = s->res_block;
    a->mla.out_gate = 1;
    a->kda.gate_lower_bound = K3_GATE_LOWER_BOUND;
    a->moe.latent_norm = SPILL_LATENT_NORM_OUTPUT;
    a->moe.norm_min = 1.0 / 16384.0; /* llama.cpp's 2^-14 */
  }
  if (k3_pattern(s->mix) || s->mix == MIX_MLA) {
    a->mla.n_heads = s->heads;
    a->mla.q_lora_rank = s->q_lora;
    a->mla.kv_lora_rank = s->kv_lora;
    a->mla.qk_nope_dim = s->nope;
    a->mla.qk_rope_dim = s->rope;
    a->mla.v_head_dim = s->vdim;
    a->mla.use_rope = s->use_rope;
    a->mla.rope_theta = 10000.0;
  }
  if (k3_pattern(s->mix) || s->mix == MIX_KDA) {
    a->kda.n_heads = s->heads;
    a->kda.head_dim = s->head_dim;
    a->kda.conv_kernel = 4;
    a->kda.gate_rank = s->gate_rank;
    a->kda.out_gate_rank = s->out_gate_rank;
    a->kda.decay_floor = s->mix == MIX_K3 ? 0.0 : -5.0; /* released: the lower bound instead */
  }
  if (plain_moe(s->mix)) {
    a->gqa.n_heads = s->heads;
    a->gqa.n_kv_heads = s->kv_heads;
    a->gqa.head_dim = s->head_dim;
    a->gqa.rope_theta = 10000.0;
  }
  if (s->swa_window > 0) { /* gpt-oss's attention: llama.cpp's pattern 2, sinks */
    a->gqa.swa_window = s->swa_window;
    a->gqa.swa_pattern = 2;
    a->gqa.sinks = 1;
  }
  if (s->mix == MIX_QWEN35) { /* gated GQA with head q/k norms and a quarter of each head rotated */
    a->gqa.qk_norm = SPILL_QK_NORM_HEAD;
    a->gqa.out_gate = 1;
    a->gqa.rope_dim = s->head_dim / 4 >= 2 ? (s->head_dim / 4) & ~1 : 2;
    a->gdn.n_k_heads = s->kv_heads;
    a->gdn.n_v_heads = s->heads;
    a->gdn.head_dim = s->head_dim;
    a->gdn.conv_kernel = 4;
    a->moe.shared_gate = 1;
  }
  if (s->mix == MIX_GPTOSS) { /* docs/MODEL.md "gpt-oss", with the released model's constants */
    a->activation = SPILL_ACT_SWIGLU_OAI;
    a->gqa.qkv_bias = 1;
    a->gqa.o_bias = 1;
    a->gqa.sinks = 1;
    a->gqa.swa_window = 128; /* on the even layers (pattern 2) */
    a->gqa.swa_pattern = 2;
    a->gqa.rope_theta = 150000.0;
    a->gqa.yarn_factor = 32.0;
    a->gqa.yarn_orig_ctx = 4096;
    a->gqa.yarn_beta_fast = 32.0;
    a->gqa.yarn_beta_slow = 1.0;
    a->gqa.rope_mscale = 1.0 + 0.1 * log(32.0);
    a->moe.router_bias = 1;
    a->moe.expert_bias = 1;
  }
  if (s->mix == MIX_GLM4) { /* docs/MODEL.md "GLM-4.5": biases, RoPE on half of each head */
    a->gqa.qkv_bias = 1;
    a->gqa.rope_dim = s->head_dim / 2;
  }
  a->moe.n_experts = s->n_experts;
  a->moe.top_k = s->top_k;
  a->moe.d_expert = s->d_expert;
  a->moe.n_shared = s->n_shared;
  a->moe.d_shared = s->d_shared;
  a->moe.d_latent = s->d_latent;
  a->moe.router = s->mix == MIX_GPTOSS ? SPILL_ROUTER_SOFTMAX_TOPK
                  : s->softmax_router    ? SPILL_ROUTER_SOFTMAX
                                         : SPILL_ROUTER_SIGMOID;
  a->moe.norm_topk = s->softmax_router && s->mix != MIX_QWEN35 ? 0 : 1;
  a->moe.routed_scale = 1.0;
}

/* ---------------------------------------------------------------- presets */

static int parse_mix(const char *m) {
  if (!m || !strcmp(m, "k3")) return MIX_K3;
  if (!strcmp(m, "k3-family")) return MIX_K3_FAMILY;
  if (!strcmp(m, "mla")) return MIX_MLA;
  if (!strcmp(m, "kda")) return MIX_KDA;
  if (!strcmp(m, "gqa") || !strcmp(m, "gqa-swa")) return MIX_GQA; /* -swa: gen_shape.swa_window */
  if (!strcmp(m, "qwen35")) return MIX_QWEN35;
  if (!strcmp(m, "gptoss")) return MIX_GPTOSS;
  if (!strcmp(m, "glm4moe")) return MIX_GLM4;
  return -1;
}

/* The family mixes' own layer pattern: gpt-oss has no dense layer and no
 * shared expert, GLM-4.5 one shared expert (its leading dense layer is the
 * presets'). */
static void family_parts(gen_shape *s) {
  if (s->mix == MIX_GPTOSS) {
    s->n_dense = 0;
    s->n_shared = 0;
    s->d_shared = 0;
  } else if (s->mix == MIX_GLM4) {
    s->n_shared = 1;
  }
}

static void shape_nano(gen_shape *s, int mix) {
  memset(s, 0, sizeof *s);
  s->name = "nano";
  s->vocab = 320;
  s->d_model = 64;
  s->n_layers = 4;
  s->n_dense = 1;
  s->d_ff = 128;
  s->mix = mix;
  s->heads = 4;
  s->head_dim = 16;
  s->kv_heads = 2;
  s->q_lora = mix == MIX_MLA ? 0 : 32; /* the mla variant covers the attn_q path */
  s->kv_lora = 32;
  s->nope = 16;
  s->rope = 8;
  s->vdim = 16;
  s->use_rope = mix == MIX_MLA; /* k3 is NoPE; the mla variant covers RoPE */
  s->gate_rank = 16;
  s->out_gate_rank = mix == MIX_KDA ? 16 : 0;
  s->n_experts = 16;
  s->top_k = 4;
  s->d_expert = 32;
  s->n_shared = 1;
  s->d_shared = 32;
  s->d_latent = plain_moe(mix) ? 0 : 32;
  s->softmax_router = mix == MIX_GQA || mix == MIX_QWEN35 || mix == MIX_GPTOSS;
  s->trunk_group = 32;
  family_parts(s);
}

static void shape_mini(gen_shape *s, int mix) {
  memset(s, 0, sizeof *s);
  s->name = "mini";
  s->vocab = 320;
  s->d_model = 1024;
  s->n_layers = 16;
  s->n_dense = 1;
  s->d_ff = 2624; /* 18432 * 1024 / 7168 */
  s->mix = mix;
  s->heads = 8;
  s->head_dim = 128;
  s->kv_heads = 2;
  s->q_lora = 256;
  s->kv_lora = 128;
  s->nope = 64;
  s->rope = 32;
  s->vdim = 64;
  s->use_rope = 0;
  s->gate_rank = 64;
  s->out_gate_rank = 0;
  s->n_experts = 256;
  s->top_k = 8;
  s->d_expert = 448;
  s->n_shared = 2;
  s->d_shared = 448;
  s->d_latent = plain_moe(mix) ? 0 : 512;
  s->softmax_router = mix == MIX_GQA || mix == MIX_QWEN35 || mix == MIX_GPTOSS;
  s->trunk_group = 128;
  family_parts(s);
}

/* The twin's dims for a given d_latent and head count (n_experts set later). */
static void shape_twin(gen_shape *s, int mix, int d_latent, int heads) {
  memset(s, 0, sizeof *s);
  s->name = "twin";
  const int D = 2 * d_latent;
  const double f = (double)D / 7168.0;
  s->vocab = round64(163840.0 * f);
  if (s->vocab < 320) s->vocab = 320;
  s->d_model = D;
  s->n_layers = 93;
  s->n_dense = 1;
  s->d_ff = round64(18432.0 * f);
  s->mix = mix;
  s->heads = heads;
  s->head_dim = 128;
  s->kv_heads = heads % 4 == 0 ? heads / 4 : heads;
  s->q_lora = round64(1536.0 * f);
  s->kv_lora = round64(512.0 * f);
  s->nope = 128;
  s->rope = 64;
  s->vdim = 128;
  s->use_rope = 0;
  s->gate_rank = 128;
  s->out_gate_rank = 0;
  s->top_k = 16;
  s->d_expert = round64((double)d_latent * 3072.0 / 3584.0);
  s->n_shared = 2;
  s->d_shared = s->d_expert;
  s->d_latent = plain_moe(mix) ? 0 : d_latent;
  s->softmax_router = mix == MIX_GQA || mix == MIX_QWEN35 || mix == MIX_GPTOSS;
  s->trunk_group = 128;
  s->n_experts = s->top_k;
  k3_released(s);
}

/* ---------------------------------------------------------------- sizing */

static uint64_t align64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* Fills offsets/bytes of tl and returns the trunk size. */
static int size_tensors(tlist *tl, uint64_t *trunk, spill_err *e) {
  uint64_t off = 0;
  for (int i = 0; i < tl->n; i++) {
    spill_tensor_info *t = &tl->t[i];
    SPILL_TRY(spill_dtype_matrix_bytes(t->dtype, t->shape[0], t->shape[1], t->group, &t->bytes, e));
    t->offset = off;
    off = align64(off + t->bytes);
  }
  *trunk = off;
  return SPILL_OK;
}

static uint32_t expert_group_for(const gen_shape *s, spill_dtype dt) {
  if (dt != SPILL_DT_Q8 && dt != SPILL_DT_Q4) return 0;
  int din = s->d_latent > 0 ? s->d_latent : s->d_model;
  for (uint32_t g = 128; g >= 32; g /= 2)
    if (din % g == 0 && s->d_expert % g == 0) return g;
  return 32;
}

static int record_bytes_for(const gen_shape *s, spill_dtype dt, uint64_t *rec, spill_err *e) {
  spill_arch a;
  fill_arch(s, &a);
  spill_section_info sect[SPILL_SEC_COUNT];
  uint32_t payload;
  return spill_record_layout(&a, dt, expert_group_for(s, dt), sect, &payload, rec, e);
}

/* Conservative manifest.json size: per tensor/bank/file entries + arch. */
static uint64_t manifest_estimate(int n_tensors, int n_banks) {
  return 65536u + 512u * (uint64_t)n_tensors + 512u * (uint64_t)n_banks;
}

typedef struct sized {
  uint64_t trunk, record, container;
  int n_tensors;
} sized;

static int measure(const gen_shape *s, const spill_gen_opts *o, sized *z, spill_err *e) {
  tlist tl = {0};
  build_tensors(s, o, 1.0f, 0.1f, 0.0f, &tl); /* sizes only */
  int rc = tl.oom ? spill_err_set(e, SPILL_E_NOMEM, "gen: tensor list") : SPILL_OK;
  if (rc == SPILL_OK) rc = size_tensors(&tl, &z->trunk, e);
  if (rc == SPILL_OK) rc = record_bytes_for(s, o->expert_dtype, &z->record, e);
  z->n_tensors = tl.n;
  free(tl.t);
  free(tl.init);
  if (rc != SPILL_OK) return rc;
  int n_moe = s->n_layers - s->n_dense;
  z->container = z->trunk + (uint64_t)n_moe * (SPILL_BANK_HEADER_BYTES +
                                               (uint64_t)s->n_experts * z->record) +
                 manifest_estimate(z->n_tensors, n_moe);
  return SPILL_OK;
}

/* Largest n_experts whose container fits in disk (routers grow with it). */
static int fit_experts(gen_shape *s, const spill_gen_opts *o, uint64_t disk, sized *z,
                       spill_err *e) {
  const int n_moe = s->n_layers - s->n_dense;
  s->n_experts = s->top_k;
  SPILL_TRY(measure(s, o, z, e));
  if (z->container > disk)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "gen: disk cap %" PRIu64 " B too small: %d experts need %" PRIu64 " B",
                         disk, s->top_k, z->container);
  /* per extra expert: one record and one router row (+ bias) per MoE layer */
  uint64_t per = (uint64_t)n_moe * (z->record + 4u * (uint64_t)s->d_model + 4u + 64u);
  uint64_t extra = (disk - z->container) / per;
  uint64_t n = (uint64_t)s->top_k + extra;
  if (n > SPILL_MAX_EXPERTS) n = SPILL_MAX_EXPERTS;
  s->n_experts = (int)n;
  SPILL_TRY(measure(s, o, z, e));
  while (z->container > disk && s->n_experts > s->top_k) {
    s->n_experts--;
    SPILL_TRY(measure(s, o, z, e));
  }
  return SPILL_OK;
}

static double absdiff(double a, double b) { return a > b ? a - b : b - a; }

#define TWIN_TRUNK_FRAC 0.43
#define TWIN_WS_FRAC 0.27

static int plan_twin(const spill_gen_opts *o, int mix, gen_shape *s, spill_gen_summary *sum,
                     spill_err *e) {
  const uint64_t ram = o->ram_bytes ? o->ram_bytes : SPILL_GEN_DEFAULT_RAM;
  const uint64_t disk = o->disk_bytes ? o->disk_bytes : SPILL_GEN_DEFAULT_DISK;
  const int n_moe = 92, top_k = 16;
  const double ws_target = TWIN_WS_FRAC * (double)ram;
  const double trunk_target = TWIN_TRUNK_FRAC * (double)ram;
  /* 0. R must hold the smallest twin (d_latent 64, 1 head, top_k experts):
   * its working set at 0.27 R and its trunk at 0.43 R. Below that the
   * derivation has nothing to scale (1 KiB of RAM gave a 1 GB model over
   * 65,536 experts, planned for minutes): refused with the minimum. */
  {
    gen_shape t;
    shape_twin(&t, mix, 64, 1);
    t.n_experts = top_k;
    uint64_t rec;
    sized z;
    SPILL_TRY(record_bytes_for(&t, o->expert_dtype, &rec, e));
    SPILL_TRY(measure(&t, o, &z, e));
    const double ws = (double)rec * top_k * n_moe;
    double need = ws / TWIN_WS_FRAC;
    if ((double)z.trunk / TWIN_TRUNK_FRAC > need) need = (double)z.trunk / TWIN_TRUNK_FRAC;
    const uint64_t min_ram = (uint64_t)need + 1;
    SPILL_FAIL_IF(e, ram < min_ram, SPILL_E_CONFIG,
                  "gen: RAM %" PRIu64 " B is below the smallest K3 twin: d_latent 64 and 1 head "
                  "need a per-token expert set of %.0f B (0.27 R) and a trunk of %" PRIu64
                  " B (0.43 R): RAM >= %" PRIu64 " B (%.1f MiB)",
                  ram, ws, z.trunk, min_ram, (double)min_ram / 1048576.0);
  }
  /* 1. d_latent from the working set */
  int best_lat = 0;
  uint64_t best_rec = 0;
  double best_err = 0;
  for (int lat = 64; lat <= 16384; lat += 64) {
    gen_shape t;
    shape_twin(&t, mix, lat, 1);
    uint64_t rec;
    SPILL_TRY(record_bytes_for(&t, o->expert_dtype, &rec, e));
    double ws = (double)rec * top_k * n_moe;
    double err = absdiff(ws, ws_target);
    if (!best_lat || err < best_err) best_lat = lat, best_rec = rec, best_err = err;
    if (ws > 2 * ws_target) break;
  }
  /* 3. heads from the trunk, with experts fitted to the disk each time */
  int best_h = 0;
  double best_terr = 0;
  int max_h = 4 * 96;
  for (int h = 1; h <= max_h; h++) {
    gen_shape t;
    shape_twin(&t, mix, best_lat, h);
    sized z;
    int rc = fit_experts(&t, o, disk, &z, e);
    if (rc == SPILL_E_CONFIG) break; /* more heads only make it worse */
    SPILL_TRY(rc);
    double err = absdiff((double)z.trunk, trunk_target);
    if (!best_h || err < best_terr) best_h = h, best_terr = err;
    if ((double)z.trunk > trunk_target) break;
  }
  if (!best_h)
    return spill_err_set(e, SPILL_E_CONFIG,
                         "gen: twin at %" PRIu64 " B RAM does not fit in a %" PRIu64
                         " B disk cap",
                         ram, disk);
  shape_twin(s, mix, best_lat, best_h);
  sized z;
  SPILL_TRY(fit_experts(s, o, disk, &z, e));
  if (sum) {
    const double gib = 1073741824.0;
    sum->ram_bytes = ram;
    snprintf(
        sum->text, sizeof sum->text,
        "twin of Kimi K3 scaled to RAM R = %.2f GiB (K3: trunk 27.28 GB = 42.6%%, per-token "
        "expert set 17.0 GiB = 26.6%% of 64 GiB)\n"
        "  1. working set target 0.27 R = %.3f GiB = record x %d x %d -> d_latent %d, "
        "d_expert %d (= round64(d_latent x 3072/3584)), record %" PRIu64 " B; "
        "d_model = 2 d_latent = %d\n"
        "  2. K3 dims x d_model/7168: vocab %d, dense d_ff %d, q_lora %d, kv_lora %d; head "
        "dims KDA %d, MLA %d/%d/%d; 2 shared experts of %d\n"
        "  3. trunk target 0.43 R = %.3f GiB -> %d heads (K3: 96), trunk %.3f GiB\n"
        "  4. experts per layer to fill disk cap %.2f GB: %d (K3: 896), container %.2f GB\n",
        ram / gib, ws_target / gib, top_k, n_moe, best_lat, s->d_expert, best_rec, s->d_model,
        s->vocab, s->d_ff, s->q_lora, s->kv_lora, s->head_dim, s->nope, s->rope, s->vdim,
        s->d_shared, trunk_target / gib, best_h, (double)z.trunk / gib, disk / 1e9,
        s->n_experts, (double)z.container / 1e9);
  }
  return SPILL_OK;
}

/* ---------------------------------------------------------------- plan */

static const char *human(uint64_t b, char buf[32]) {
  if (b >= 1000000000ull) snprintf(buf, 32, "%.3f GB", b / 1e9);
  else if (b >= 1000000ull) snprintf(buf, 32, "%.1f MB", b / 1e6);
  else snprintf(buf, 32, "%.1f kB", b / 1e3);
  return buf;
}

void spill_gen_plan_full_free(spill_gen_plan_full *p) {
  if (!p) return;
  spill_manifest_free(&p->m);
  free(p->init);
  memset(p, 0, sizeof *p);
}

/* The preset's shape with the caller's overrides (MoE layers, top-k,
 * experts per layer); the twin's derivation fills sum. */
static int plan_shape(const spill_gen_opts *o, int mix, gen_shape *s, spill_gen_summary *sum,
                      spill_err *e) {
  const char *preset = o->preset ? o->preset : "nano";
  SPILL_FAIL_IF(e, (o->n_moe_layers > 0 || o->top_k > 0) && strcmp(preset, "nano") &&
                       strcmp(preset, "mini"),
                SPILL_E_CONFIG, "gen: MoE-layer and top-k overrides need preset nano or mini, not %s",
                preset);
  if (!strcmp(preset, "nano")) {
    shape_nano(s, mix);
  } else if (!strcmp(preset, "mini")) {
    shape_mini(s, mix);
  } else if (!strcmp(preset, "twin") || !strcmp(preset, "k3")) {
    SPILL_FAIL_IF(e, mix == MIX_GPTOSS || mix == MIX_GLM4, SPILL_E_CONFIG,
                  "gen: the twin scales Kimi K3's shape; mix %s takes preset nano or mini",
                  o->attn_mix);
    SPILL_TRY(plan_twin(o, mix, s, sum, e));
  } else {
    return spill_err_set(e, SPILL_E_CONFIG, "gen: unknown preset '%s' (nano, mini, twin)",
                         preset);
  }

  if (o->n_moe_layers > 0 || o->top_k > 0) { /* shape overrides (spill gen --like-trace) */
    if (o->n_moe_layers > 0) {
      SPILL_FAIL_IF(e, o->n_moe_layers > SPILL_MAX_LAYERS - s->n_dense, SPILL_E_CONFIG,
                    "gen: %d MoE layers: at most %d (with %d dense)", o->n_moe_layers,
                    SPILL_MAX_LAYERS - s->n_dense, s->n_dense);
      s->n_layers = s->n_dense + o->n_moe_layers;
    }
    if (o->top_k > 0) {
      SPILL_FAIL_IF(e, o->top_k > SPILL_MAX_TOPK, SPILL_E_CONFIG, "gen: top_k %d: at most %d",
                    o->top_k, SPILL_MAX_TOPK);
      s->top_k = o->top_k;
      SPILL_FAIL_IF(e, o->n_experts <= 0 && s->n_experts < s->top_k, SPILL_E_CONFIG,
                    "gen: top_k %d exceeds the preset's %d experts (give experts too)", s->top_k,
                    s->n_experts);
    }
  }
  if (o->n_experts > 0) { /* override of the preset's experts per layer */
    SPILL_FAIL_IF(e, o->n_experts < s->top_k || o->n_experts > SPILL_MAX_EXPERTS, SPILL_E_CONFIG,
                  "gen: experts %d must be in [top_k %d, %d]", o->n_experts, s->top_k,
                  SPILL_MAX_EXPERTS);
    s->n_experts = o->n_experts;
  }
  k3_released(s);
  return SPILL_OK;
}

/* The modelled consecutive-token correlation of the MoE layers' router
 * inputs at base G (mean over MoE layers): SPILL_GEN_KDA_LAG1 times the KDA
 * outputs' share of the stream's variance at the router. Layer 0's KDA
 * attention writes G (relative to the embedding's 1), every later writer
 * spill_gen_write_scale times sqrt(1 + G^2); the KDA layers' writes are the
 * slow part, the embedding and the FFN / MoE writes the fast part. */
static double kda_corr(const gen_shape *s, float rho, float G) {
  const double b = 1.0 + (double)G * G;
  double var = 1.0, slow = 0.0, sum = 0.0;
  for (int l = 0; l < s->n_layers; l++) {
    const double ro2 = b * spill_gen_write_scale(rho, l) * spill_gen_write_scale(rho, l);
    const double a = l == 0 ? (double)G * G : ro2;
    var += a;
    if (layer_kind(s->mix, l, s->n_layers) == SPILL_ATTN_KDA) slow += a;
    if (l >= s->n_dense) sum += slow / var;
    var += ro2; /* the FFN / MoE writer */
  }
  const int n_moe = s->n_layers - s->n_dense;
  return n_moe > 0 ? SPILL_GEN_KDA_LAG1 * sum / n_moe : 0.0;
}

/* Next-token reuse: the router-input correlation rho it needs (mean-field,
 * synth_calib.c), then the base G whose modelled correlation is rho (capped
 * at SPILL_GEN_MAX_REUSE_BASE). Off (G 0: the earlier conv taps, decay and
 * writer sizes) for reuse 0 or a plan whose layer 0 is not KDA. */
static int plan_reuse(const spill_gen_opts *o, const gen_shape *s, spill_gen_plan_full *p,
                      spill_err *e) {
  const double want = o->reuse < 0 ? SPILL_SIM_DEFAULT_REUSE : o->reuse;
  SPILL_FAIL_IF(e, !(want >= 0 && want < 1), SPILL_E_CONFIG, "gen: reuse %g must be in [0, 1)",
                want);
  p->want_reuse = want;
  p->reuse_base = 0.0f;
  const int kda0 = layer_kind(s->mix, 0, s->n_layers) == SPILL_ATTN_KDA;
  if (want <= 0 || !kda0 || s->n_layers == s->n_dense || o->shape_only) return SPILL_OK;
  SPILL_TRY(spill_gen_calibrate_reuse(s->n_experts, s->top_k, !s->softmax_router, o->seed,
                                      p->bias_spread, p->chain, want, &p->reuse_rho,
                                      &p->model_reuse, e));
  float lo = 0.0f, hi = SPILL_GEN_MAX_REUSE_BASE;
  for (int it = 0; it < 24; it++) { /* kda_corr rises with the base */
    float mid = 0.5f * (lo + hi);
    if (kda_corr(s, p->write_rho, mid) < p->reuse_rho) lo = mid;
    else hi = mid;
  }
  p->reuse_base = hi > 0.01f ? hi : 0.01f; /* > 0: the plan carries reuse */
  p->model_corr = kda_corr(s, p->write_rho, hi);
  return SPILL_OK;
}

/* The routing targets and the two router constants solved for them
 * (synth_calib.c): the write ratio rho = eps / sqrt(2) (two writers between
 * the lookahead point and the next router) and the row correlation. */
static int plan_routing(const spill_gen_opts *o, const gen_shape *s, float skew, float spread,
                        spill_gen_plan_full *p, spill_err *e) {
  double prec = o->la_precision, co = o->coact;
  if (prec < 0) {
    prec = 0;
    for (int i = 0; i < SPILL_SIM_DEFAULT_LA_RANKS; i++) prec += spill_sim_default_la_precision[i];
    prec /= SPILL_SIM_DEFAULT_LA_RANKS;
  }
  if (co < 0) co = SPILL_SIM_DEFAULT_COACT;
  SPILL_FAIL_IF(e, !(prec > 0 && prec <= 1), SPILL_E_CONFIG,
                "gen: lookahead precision %g must be in (0, 1]", prec);
  SPILL_FAIL_IF(e, !(co >= 0 && co < 1), SPILL_E_CONFIG,
                "gen: co-activation %g must be in [0, 1)", co);
  p->want_precision = prec;
  p->want_coact = co;
  memset(&p->cal, 0, sizeof p->cal);
  p->cal.bias_spread = spread;
  /* two writers between the lookahead point and the next router: eps =
   * sqrt(2) rho, rho held where the stream would outgrow f16 scales */
  const float eps_max = (float)(sqrt(2.0) * spill_gen_max_write_rho(s->n_layers));
  p->write_rho_capped = 0;
  if (s->n_layers > s->n_dense && !o->shape_only) {
    SPILL_TRY(spill_gen_calibrate_routing(s->n_experts, s->top_k, !s->softmax_router, o->seed, skew,
                                          spread, prec, co, eps_max, &p->cal, e));
    p->write_rho_capped = p->cal.eps == eps_max;
  }
  p->write_rho = p->cal.eps / sqrtf(2.0f);
  p->chain = p->cal.chain;
  p->bias_spread = p->cal.bias_spread;
  return plan_reuse(o, s, p, e);
}

/* One bank per MoE layer, and the generator JSON the container records. */
static int plan_banks(const spill_gen_opts *o, const gen_shape *s, float skew, float spread,
                      uint64_t disk, spill_gen_plan_full *p, spill_err *e) {
  spill_manifest *m = &p->m;
  const int n_moe = s->n_layers - s->n_dense;
  m->banks = calloc((size_t)n_moe, sizeof *m->banks);
  SPILL_FAIL_IF(e, !m->banks, SPILL_E_NOMEM, "gen: banks");
  m->n_banks = n_moe;
  for (int i = 0; i < n_moe; i++) {
    spill_bank_info *b = &m->banks[i];
    b->layer = s->n_dense + i;
    snprintf(b->file, sizeof b->file, "experts-%03d.bin", b->layer);
    b->n_experts = (uint32_t)s->n_experts;
    b->record_bytes = m->record_bytes;
    b->data_offset = SPILL_BANK_HEADER_BYTES;
  }
  char js[1024];
  snprintf(js, sizeof js,
           "{\"preset\":\"%s\",\"attn_mix\":\"%s\",\"seed\":%" PRIu64
           ",\"skew\":%.4f,\"bias_spread\":%.6f,\"trunk\":\"%s\",\"expert_dtype\":\"%s\",\"ram_bytes\":%" PRIu64
           ",\"disk_bytes\":%" PRIu64
           ",\"routing\":{\"lookahead_precision\":%.4f,\"lookahead_width\":%d,\"coact\":%.4f"
           ",\"write_rho\":%.6f,\"router_chain\":%.6f,\"reuse\":%.4f,\"reuse_base\":%.6f}}",
           s->name, o->attn_mix ? o->attn_mix : "k3", o->seed, (double)skew, (double)spread,
           o->trunk == SPILL_GEN_TRUNK_Q4 ? "q4" : "f32", spill_dtype_name(m->expert_dtype),
           p->sum.ram_bytes, disk, p->want_precision, SPILL_GEN_LA_WIDTH, p->want_coact,
           (double)p->write_rho, (double)p->chain, p->want_reuse, (double)p->reuse_base);
  m->generator_json = strdup(js);
  SPILL_FAIL_IF(e, !m->generator_json, SPILL_E_NOMEM, "gen: generator json");
  return SPILL_OK;
}

/* Sizes of the plan and the summary line spill gen prints. */
static void plan_summarize(const gen_shape *s, uint64_t trunk, int n_tensors,
                           spill_gen_plan_full *p) {
  const spill_manifest *m = &p->m;
  spill_gen_summary *sum = &p->sum;
  const int n_moe = s->n_layers - s->n_dense;
  sum->trunk_bytes = trunk;
  sum->record_bytes = m->record_bytes;
  sum->ws_bytes = m->record_bytes * (uint64_t)s->top_k * (uint64_t)n_moe;
  sum->expert_bytes = (uint64_t)n_moe * (SPILL_BANK_HEADER_BYTES +
                                         (uint64_t)s->n_experts * m->record_bytes);
  sum->container_bytes = trunk + sum->expert_bytes + manifest_estimate(n_tensors, n_moe);
  if (sum->ram_bytes) {
    sum->trunk_frac = (double)trunk / (double)sum->ram_bytes;
    sum->ws_frac = (double)sum->ws_bytes / (double)sum->ram_bytes;
  }
  size_t used = strlen(sum->text);
  char tb[32], wb[32], cb[32];
  snprintf(
      sum->text + used, sizeof sum->text - used,
      "%s: %d layers (%d dense), d_model %d, vocab %d, %d experts/layer top-%d, d_expert %d, "
      "d_latent %d, %d shared; record %" PRIu64 " B, trunk %s, per-token experts %s, "
      "container ~%s%s",
      m->name, s->n_layers, s->n_dense, s->d_model, s->vocab, s->n_experts, s->top_k,
      s->d_expert, s->d_latent, s->n_shared, m->record_bytes, human(trunk, tb),
      human(sum->ws_bytes, wb), human(sum->container_bytes, cb), sum->ram_bytes ? "" : "\n");
  if (sum->ram_bytes) {
    used = strlen(sum->text);
    snprintf(sum->text + used, sizeof sum->text - used,
             " (trunk %.1f%%, working set %.1f%% of RAM)\n", 100 * sum->trunk_frac,
             100 * sum->ws_frac);
  }
  if (n_moe > 0) {
    used = strlen(sum->text);
    snprintf(sum->text + used, sizeof sum->text - used,
             "routing: lookahead precision (width %d) %.3f asked, %.3f by the mean-field model "
             "(writer ratio %.4f%s); co-activation %.3f asked, %.3f by the mean-field model (shared "
             "router rows %.3f)%s\n",
             SPILL_GEN_LA_WIDTH, p->want_precision, p->cal.precision, (double)p->write_rho,
             p->write_rho_capped ? ", capped: a larger one grows the stream more than 2^16-fold "
                                   "over these layers, past f16 weight scales; the precision asked "
                                   "is out of reach at this shape"
                                 : "",
             p->want_coact, p->cal.coact, (double)p->chain,
             p->cal.coact < p->want_coact - 0.02 ? ": co-activation out of reach at this shape" : "");
    used = strlen(sum->text);
    if (p->want_reuse > 0 && p->reuse_base > 0)
      snprintf(sum->text + used, sizeof sum->text - used,
               "routing: next-token reuse %.3f asked, %.3f by the mean-field model at "
               "router-input correlation %.3f; base %.3f gives %.3f%s\n",
               p->want_reuse, p->model_reuse, p->reuse_rho, (double)p->reuse_base,
               p->model_corr,
               p->model_corr < p->reuse_rho - 0.01 ? ": out of reach at this shape (base capped)"
                                                   : "");
    else if (p->want_reuse > 0)
      snprintf(sum->text + used, sizeof sum->text - used,
               "routing: next-token reuse %.3f asked, not carried (layer 0 is not KDA: reuse is "
               "what the text gives)\n", p->want_reuse);
  }
}

int spill_gen_plan_full_make(const spill_gen_opts *o, spill_gen_plan_full *p, spill_err *e) {
  memset(p, 0, sizeof *p);
  SPILL_FAIL_IF(e, !o, SPILL_E_INVALID_ARG, "gen: no options");
  int mix = parse_mix(o->attn_mix);
  SPILL_FAIL_IF(e, mix < 0, SPILL_E_CONFIG,
                "gen: unknown attention mix '%s' (k3, k3-family, mla, kda, gqa, gqa-swa, qwen35, "
                "gptoss, glm4moe)",
                o->attn_mix);
  spill_dtype edt = o->expert_dtype;
  SPILL_FAIL_IF(e,
                edt != SPILL_DT_RVQ3 && edt != SPILL_DT_F32 && edt != SPILL_DT_Q8 &&
                    edt != SPILL_DT_Q4 && edt != SPILL_DT_MXFP4,
                SPILL_E_UNSUPPORTED,
                "gen: expert dtype %d not generated (rvq3, f32, q8, q4, mxfp4)",
                (int)edt);
  SPILL_FAIL_IF(e, o->trunk != SPILL_GEN_TRUNK_Q4 && o->trunk != SPILL_GEN_TRUNK_F32,
                SPILL_E_CONFIG, "gen: unknown trunk dtype %d", (int)o->trunk);
  const uint64_t disk = o->disk_bytes ? o->disk_bytes : SPILL_GEN_DEFAULT_DISK;
  const float skew = (float)(o->skew < 0 ? SPILL_GEN_DEFAULT_SKEW : o->skew);
  gen_shape s;
  memset(&s, 0, sizeof s);
  SPILL_TRY(plan_shape(o, mix, &s, &p->sum, e));
  if (o->attn_mix && !strcmp(o->attn_mix, "gqa-swa")) /* short enough for a test to pass it often */
    s.swa_window = !strcmp(s.name, "nano") ? 8 : 128;
  float cal = 0.0f;
  if (!s.softmax_router && s.n_layers > s.n_dense && !o->shape_only)
    SPILL_TRY(spill_gen_calibrate_bias(s.n_experts, s.top_k, &cal, e));
  SPILL_TRY(plan_routing(o, &s, skew, skew * cal, p, e));
  tlist tl = {0};
  build_tensors(&s, o, p->bias_spread, p->write_rho, p->reuse_base, &tl);
  if (tl.oom) {
    free(tl.t);
    free(tl.init);
    return spill_err_set(e, SPILL_E_NOMEM, "gen: tensor list");
  }
  spill_manifest *m = &p->m;
  m->version = SPILL_FORMAT_VERSION;
  m->tensors = tl.t;
  m->n_tensors = tl.n;
  p->init = tl.init;
  fill_arch(&s, &m->arch);
  snprintf(m->name, sizeof m->name, "%s-%s-s%" PRIu64, s.name, o->attn_mix ? o->attn_mix : "k3",
           o->seed);
  uint64_t trunk;
  int rc = size_tensors(&tl, &trunk, e);
  m->expert_dtype = edt;
  m->expert_group = expert_group_for(&s, edt);
  if (rc == SPILL_OK)
    rc = spill_record_layout(&m->arch, edt, m->expert_group, m->sect, &m->payload_bytes,
                             &m->record_bytes, e);
  if (rc == SPILL_OK) rc = plan_banks(o, &s, skew, p->bias_spread, disk, p, e);
  if (rc != SPILL_OK) {
    spill_gen_plan_full_free(p);
    return rc;
  }
  p->trunk_group = s.trunk_group;
  p->seed = o->seed;
  p->skew = skew;
  const int din = s.d_latent > 0 ? s.d_latent : s.d_model;
  p->expert_sigma_in = 1.0f / sqrtf((float)din);
  /* latent: unit-rms expert outputs (moe_up_proj scales them); else the
   * expert writes the residual stream directly */
  p->expert_sigma_out = (1.0f / 0.6f) / sqrtf((float)s.d_expert);
  p->expert_out_latent = s.d_latent > 0;
  plan_summarize(&s, trunk, tl.n, p);
  return SPILL_OK;
}

int spill_gen_plan(const spill_gen_opts *o, spill_manifest *out, spill_err *e) {
  SPILL_FAIL_IF(e, !out, SPILL_E_INVALID_ARG, "gen: no output manifest");
  spill_gen_plan_full p;
  SPILL_TRY(spill_gen_plan_full_make(o, &p, e));
  *out = p.m;
  free(p.init);
  return SPILL_OK;
}

int spill_gen_summarize(const spill_gen_opts *o, spill_gen_summary *s, spill_err *e) {
  SPILL_FAIL_IF(e, !s, SPILL_E_INVALID_ARG, "gen: no summary");
  spill_gen_plan_full p;
  SPILL_TRY(spill_gen_plan_full_make(o, &p, e));
  *s = p.sum;
  spill_gen_plan_full_free(&p);
  return SPILL_OK;
}
