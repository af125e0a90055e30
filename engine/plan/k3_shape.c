/* engine/plan/k3_shape.c: the published Kimi K3 shape (from
 * ../shared/reference/k3-published.md) as a spill_arch, and a trunk-size
 * estimate for any arch from the tensor list of docs/MODEL.md with spill's
 * own formats: q4 (f16 scale per group of 128, or of 64 / 32 where the
 * columns are not a multiple of 128, as gpt-oss's 2880) for the bulk, q8
 * (groups of 32) for tok_embd and output, f32 for norms, routers, biases,
 * sinks, conv weights and rvq3 codebooks. Where the published figures do not
 * give a dimension we state our assumption here and in docs/PLAN.md. */
#include <string.h>

#include "engine/plan/ram_plan.h"

static uint64_t q4(uint64_t rows, uint64_t cols) {
  const uint64_t g = cols % 128 == 0 ? 128 : cols % 64 == 0 ? 64 : 32;
  return rows * cols / 2 + rows * (cols / g) * 2;
}
static uint64_t q8(uint64_t rows, uint64_t cols) { return rows * cols + rows * (cols / 32) * 2; }
static uint64_t f32(uint64_t n) { return n * 4; }

/* GQA layer: q (with Qwen3.5's gate rows), k, v, output, and the optional
 * biases, sinks and q/k norms of docs/MODEL.md "ATTN GQA". */
static uint64_t gqa_bytes(const spill_gqa_cfg *g, uint64_t D) {
  const uint64_t hq = (uint64_t)g->n_heads * (uint64_t)g->head_dim * (g->out_gate ? 2 : 1);
  const uint64_t ho = (uint64_t)g->n_heads * (uint64_t)g->head_dim;
  const uint64_t hk = (uint64_t)g->n_kv_heads * (uint64_t)g->head_dim;
  uint64_t t = q4(hq, D) + 2 * q4(hk, D) + q4(D, ho);
  if (g->qkv_bias) t += f32(hq + 2 * hk);
  if (g->o_bias) t += f32(D);
  if (g->sinks) t += f32((uint64_t)g->n_heads);
  if (g->qk_norm == SPILL_QK_NORM_HEAD) t += f32(2 * (uint64_t)g->head_dim);
  if (g->qk_norm == SPILL_QK_NORM_FULL) t += f32(ho + hk);
  return t;
}

/* Gated DeltaNet layer (docs/MODEL.md "ATTN GDN"): attn_qkv, attn_gate (z),
 * ssm_alpha, ssm_beta, attn_output; conv taps, dt bias, a, norm in f32. */
static uint64_t gdn_bytes(const spill_gdn_cfg *g, uint64_t D) {
  const uint64_t d = (uint64_t)g->head_dim, Hv = (uint64_t)g->n_v_heads;
  const uint64_t C = 2 * (uint64_t)g->n_k_heads * d + Hv * d;
  return q4(C, D) + q4(Hv * d, D) + 2 * q4(Hv, D) + q4(D, Hv * d) +
         f32(C * (uint64_t)g->conv_kernel + 2 * Hv + d);
}

/* The MoE block's resident part: router (+ bias) in f32, the gpt-oss expert
 * biases, shared experts (and Qwen3.5's shared gate), the latent
 * projections, and rvq3 codebooks when codebooks is set. */
static uint64_t moe_bytes(const spill_moe_cfg *m, uint64_t D, int codebooks) {
  uint64_t t = f32((uint64_t)m->n_experts * D + (uint64_t)m->n_experts); /* router + bias */
  const uint64_t din = m->d_latent ? (uint64_t)m->d_latent : D;
  if (m->expert_bias) t += f32((uint64_t)m->n_experts * (2 * (uint64_t)m->d_expert + din));
  uint64_t S = (uint64_t)m->n_shared * (uint64_t)m->d_shared;
  if (S) t += 3 * q4(S, D);
  if (S && m->shared_gate) t += f32(D);
  if (m->d_latent) t += 2 * q4((uint64_t)m->d_latent, D) + f32((uint64_t)m->d_latent);
  if (codebooks) t += 3 * f32(3 * 256 * 8); /* rvq3 codebooks of gate, up, down */
  return t;
}

static uint64_t trunk_estimate(const spill_arch *a, int codebooks) {
  const uint64_t D = (uint64_t)a->d_model, V = (uint64_t)a->vocab_size;
  uint64_t t = q8(V, D) * 2 + f32(D); /* tok_embd, output, output_norm */
  if (a->attn_res_block > 0) t += f32(D); /* output_res_score */
  for (int l = 0; l < a->n_layers && l < SPILL_MAX_LAYERS; l++) {
    t += f32(2 * D); /* attn_norm, ffn_norm */
    if (a->attn_res_block > 0) t += f32(2 * D); /* attn_res_score, ffn_res_score */
    if (a->layer_attn[l] == SPILL_ATTN_KDA) {
      const spill_kda_cfg *k = &a->kda;
      uint64_t hd = (uint64_t)k->n_heads * (uint64_t)k->head_dim;
      t += 3 * q4(hd, D) + q4(D, hd);                         /* q, k, v, output */
      t += k->out_gate_rank ? q4((uint64_t)k->out_gate_rank, D) + q4(hd, (uint64_t)k->out_gate_rank)
                            : q4(hd, D);                      /* output gate */
      t += q4((uint64_t)k->gate_rank, D) + q4(hd, (uint64_t)k->gate_rank); /* f_a, f_b */
      t += q4((uint64_t)k->n_heads, D);                       /* beta (attn_b) */
      t += f32(3 * hd * (uint64_t)k->conv_kernel);            /* conv weights */
      t += f32(hd + (uint64_t)k->n_heads + (uint64_t)k->head_dim); /* dt_bias, a_log, o_norm */
    } else if (a->layer_attn[l] == SPILL_ATTN_MLA) {
      const spill_mla_cfg *m = &a->mla;
      uint64_t H = (uint64_t)m->n_heads, dq = (uint64_t)(m->qk_nope_dim + m->qk_rope_dim);
      if (m->q_lora_rank)
        t += q4((uint64_t)m->q_lora_rank, D) + q4(H * dq, (uint64_t)m->q_lora_rank) +
             f32((uint64_t)m->q_lora_rank);
      else
        t += q4(H * dq, D);
      t += q4((uint64_t)(m->kv_lora_rank + m->qk_rope_dim), D) + f32((uint64_t)m->kv_lora_rank);
      t += q4(H * (uint64_t)(m->qk_nope_dim + m->v_head_dim), (uint64_t)m->kv_lora_rank);
      t += q4(D, H * (uint64_t)m->v_head_dim);
      if (m->out_gate) t += q4(H * (uint64_t)m->v_head_dim, D); /* attn_gate */
    } else if (a->layer_attn[l] == SPILL_ATTN_GDN) {
      t += gdn_bytes(&a->gdn, D);
    } else {
      t += gqa_bytes(&a->gqa, D);
    }
    if (!spill_arch_is_moe(a, l))
      t += 3 * q4((uint64_t)a->d_ff, D);
    else
      t += moe_bytes(&a->moe, D, codebooks);
  }
  return t;
}

uint64_t spill_plan_trunk_estimate(const spill_arch *a) { return trunk_estimate(a, 1); }

uint64_t spill_plan_trunk_estimate_dtype(const spill_arch *a, int expert_dtype) {
  return trunk_estimate(a, expert_dtype == SPILL_DT_RVQ3);
}

int spill_plan_k3_shape(spill_arch *a, uint64_t *record_bytes, uint64_t *trunk_bytes,
                        spill_err *e) {
  return spill_plan_k3_shape_dtype(SPILL_DT_RVQ3, a, record_bytes, trunk_bytes, e);
}

int spill_plan_k3_shape_dtype(int expert_dtype, spill_arch *a, uint64_t *record_bytes,
                              uint64_t *trunk_bytes, spill_err *e) {
  memset(a, 0, sizeof *a);
  strcpy(a->family, "k3");
  a->vocab_size = 163840;
  a->d_model = 7168;
  a->n_layers = 93;
  a->n_dense_layers = 1;
  a->d_ff = 18432; /* assumption: not in the published figures; DeepSeek-V3's dense width */
  a->norm_eps = 1e-6;
  a->activation = SPILL_ACT_SWIGLU;
  a->bos_id = a->eos_id = -1;
  /* 69 KDA + 24 MLA as released: every fourth layer (3, 7, ..., 91) and the
   * last (92) are MLA, the rest KDA (layer 0, the dense one, is KDA) */
  for (int l = 0; l < 93; l++)
    a->layer_attn[l] = (l % 4 == 3 || l == 92) ? SPILL_ATTN_MLA : SPILL_ATTN_KDA;
  /* the released graph's parts (docs/MODEL.md "Kimi K3 as released"):
   * SiTU 4 / 25, attention residuals every 12 layers, the MLA output gate,
   * the bounded KDA decay (lb -5, no floor), the latent norm on the routed
   * sum, llama.cpp's 2^-14 renormalisation clamp */
  a->activation = SPILL_ACT_SITU;
  a->situ_beta = 4.0;
  a->situ_lambda = 25.0;
  a->attn_res_block = 12;
  a->mla = (spill_mla_cfg){.n_heads = 96, .q_lora_rank = 1536, .kv_lora_rank = 512,
                           .qk_nope_dim = 128, .qk_rope_dim = 64, .v_head_dim = 128,
                           .use_rope = 0, .rope_theta = 10000.0, .out_gate = 1};
  a->kda = (spill_kda_cfg){.n_heads = 96, .head_dim = 128, .conv_kernel = 4,
                           .gate_rank = 128, /* assumption: Kimi-Linear's low-rank width */
                           .out_gate_rank = 0, .decay_floor = 0.0, .gate_lower_bound = -5.0};
  a->moe = (spill_moe_cfg){.n_experts = 896, .top_k = 16, .d_expert = 3072, .n_shared = 2,
                           .d_shared = 3072, .d_latent = 3584, .router = SPILL_ROUTER_SIGMOID,
                           .norm_topk = 1, .routed_scale = 1.0,
                           .latent_norm = SPILL_LATENT_NORM_OUTPUT, .norm_min = 1.0 / 16384};
  spill_section_info sect[SPILL_SEC_COUNT];
  uint32_t payload;
  SPILL_FAIL_IF(e, expert_dtype != SPILL_DT_RVQ3 && expert_dtype != SPILL_DT_MXFP4,
                SPILL_E_INVALID_ARG, "k3 shape: experts are rvq3 or mxfp4");
  SPILL_TRY(spill_record_layout(a, expert_dtype, 0, sect, &payload, record_bytes, e));
  *trunk_bytes = spill_plan_trunk_estimate(a);
  return SPILL_OK;
}
