/* engine/plan/plan_shapes.c: the published shapes `spill plan --shape` and
 * `spill sim` ("model": {"shape": ...}) know, as one table: each row names a
 * released model, the expert dtype its figures assume and a builder that
 * fills the spill_arch from the model's config.json (values in the rows'
 * comments and docs/PLAN.md "Published shapes"). The record size comes from
 * engine/format's own record layout for those dtypes, the trunk from
 * spill_plan_trunk_estimate's formats (q4 bulk, q8 embeddings, f32 small
 * tensors): an estimate of what `spill import` writes, not the GGUF's trunk.
 * Pure arithmetic; depends on engine/format (spill_arch, record layout) only.
 */
#include <string.h>

#include "engine/plan/ram_plan.h"

/* gpt-oss (openai/gpt-oss-20b and -120b config.json): hidden_size 2880,
 * 64 heads of head_dim 64, 8 kv heads, intermediate_size 2880, vocab
 * 201088, experts_per_token 4, sliding_window 128 on the even layers,
 * rope_theta 150000 with YaRN factor 32 over 4096 tokens, swiglu_limit 7;
 * 24 layers x 32 experts (20b) or 36 x 128 (120b); no dense layer, no shared
 * expert. Experts MXFP4, as both the checkpoint and the GGUF ship them. */
static void gptoss(spill_arch *a, int n_layers, int n_experts) {
  strcpy(a->family, "gpt-oss");
  a->vocab_size = 201088;
  a->d_model = 2880;
  a->n_layers = n_layers;
  a->norm_eps = 1e-5;
  a->activation = SPILL_ACT_SWIGLU_OAI;
  for (int l = 0; l < n_layers; l++) a->layer_attn[l] = SPILL_ATTN_GQA;
  a->gqa = (spill_gqa_cfg){.n_heads = 64, .n_kv_heads = 8, .head_dim = 64, .rope_theta = 150000.0,
                           .qkv_bias = 1, .o_bias = 1, .sinks = 1, .swa_window = 128,
                           .swa_pattern = 2, .yarn_factor = 32.0, .yarn_orig_ctx = 4096,
                           .yarn_beta_fast = 32.0, .yarn_beta_slow = 1.0,
                           .rope_mscale = 1.0 + 0.1 * 3.4657359027997265 /* 1 + 0.1 ln 32 */};
  a->moe = (spill_moe_cfg){.n_experts = n_experts, .top_k = 4, .d_expert = 2880,
                           .router = SPILL_ROUTER_SOFTMAX_TOPK, .routed_scale = 1.0,
                           .router_bias = 1, .expert_bias = 1};
}
static void gptoss_20b(spill_arch *a) { gptoss(a, 24, 32); }
static void gptoss_120b(spill_arch *a) { gptoss(a, 36, 128); }

/* GLM-4.5 (zai-org/GLM-4.5{,-Air} config.json): 96 heads of head_dim 128,
 * 8 kv heads, q/k/v biases, partial_rotary_factor 0.5, rope_theta 1e6, vocab
 * 151552, sigmoid router with e_score_correction_bias, top-8, renormalised,
 * one shared expert of moe_intermediate_size. Air: hidden 4096, 46 layers
 * (first_k_dense_replace 1, intermediate 10944), 128 experts of 1408,
 * routed_scaling_factor 1, no q/k norm. 355B: hidden 5120, 92 layers (3
 * dense of 12288), 160 experts of 1536, routed_scaling_factor 2.5, use_qk_norm.
 * The MTP layer after them is skipped by the import and not counted. */
static void glm45(spill_arch *a, int d, int n_layers, int n_dense, int d_ff, int n_experts,
                  int d_expert, double scale, int qk_norm) {
  strcpy(a->family, "glm4moe");
  a->vocab_size = 151552;
  a->d_model = d;
  a->n_layers = n_layers;
  a->n_dense_layers = n_dense;
  a->d_ff = d_ff;
  a->norm_eps = 1e-5;
  a->activation = SPILL_ACT_SWIGLU;
  for (int l = 0; l < n_layers; l++) a->layer_attn[l] = SPILL_ATTN_GQA;
  a->gqa = (spill_gqa_cfg){.n_heads = 96, .n_kv_heads = 8, .head_dim = 128, .rope_theta = 1e6,
                           .qk_norm = qk_norm ? SPILL_QK_NORM_HEAD : SPILL_QK_NORM_NONE,
                           .rope_dim = 64, .qkv_bias = 1};
  a->moe = (spill_moe_cfg){.n_experts = n_experts, .top_k = 8, .d_expert = d_expert,
                           .n_shared = 1, .d_shared = d_expert, .router = SPILL_ROUTER_SIGMOID,
                           .norm_topk = 1, .routed_scale = scale};
}
static void glm45_air(spill_arch *a) { glm45(a, 4096, 46, 1, 10944, 128, 1408, 1.0, 0); }
static void glm45_full(spill_arch *a) { glm45(a, 5120, 92, 3, 12288, 160, 1536, 2.5, 1); }

/* Qwen3.5-MoE (Qwen/Qwen3.5-35B-A3B and -397B-A17B config.json, text_config):
 * every 4th layer gated attention (head_dim 256, 2 kv heads, q/k norm,
 * partial_rotary_factor 0.25, rope_theta 1e7), the others Gated DeltaNet (16
 * k heads, linear_num_value_heads v heads, head dims 128, conv 4); vocab
 * 248320, softmax router, renormalised top-k, one gated shared expert of
 * shared_expert_intermediate_size; no dense layer. 35B-A3B: hidden 2048, 40
 * layers, 16 heads, 32 v heads, 256 experts top-8 of 512. 397B-A17B: hidden
 * 4096, 60 layers, 32 heads, 64 v heads, 512 experts top-10 of 1024. */
static void qwen35(spill_arch *a, int d, int n_layers, int heads, int v_heads, int n_experts,
                   int top_k, int d_expert) {
  strcpy(a->family, "qwen35moe");
  a->vocab_size = 248320;
  a->d_model = d;
  a->n_layers = n_layers;
  a->norm_eps = 1e-6;
  a->activation = SPILL_ACT_SWIGLU;
  for (int l = 0; l < n_layers; l++)
    a->layer_attn[l] = (l + 1) % 4 == 0 ? SPILL_ATTN_GQA : SPILL_ATTN_GDN;
  a->gqa = (spill_gqa_cfg){.n_heads = heads, .n_kv_heads = 2, .head_dim = 256, .rope_theta = 1e7,
                           .qk_norm = SPILL_QK_NORM_HEAD, .rope_dim = 64, .out_gate = 1};
  a->gdn = (spill_gdn_cfg){.n_k_heads = 16, .n_v_heads = v_heads, .head_dim = 128, .conv_kernel = 4};
  a->moe = (spill_moe_cfg){.n_experts = n_experts, .top_k = top_k, .d_expert = d_expert,
                           .n_shared = 1, .d_shared = d_expert, .router = SPILL_ROUTER_SOFTMAX,
                           .norm_topk = 1, .routed_scale = 1.0, .shared_gate = 1};
}
static void qwen35_35b(spill_arch *a) { qwen35(a, 2048, 40, 16, 32, 256, 8, 512); }
static void qwen35_397b(spill_arch *a) { qwen35(a, 4096, 60, 32, 64, 512, 10, 1024); }

/* Expert dtypes of a row: gate, up, down. Q4_K_M is llama.cpp's mix for the
 * expert matrices (llama-quant.cpp de3ff81): Q4_K gate and up, Q6_K down on
 * the layers its use_more_bits picks and Q4_K on the others; a container
 * sizes each section for the largest of its layers' dtypes, so every record
 * has a Q6_K-sized down section. */
#define DT3(x) {SPILL_DT_##x, SPILL_DT_##x, SPILL_DT_##x}
#define Q4_K_M {SPILL_DT_Q4_K, SPILL_DT_Q4_K, SPILL_DT_Q6_K}

typedef struct shape_row {
  const char *name;
  const char *about; /* the model and what its expert figures assume */
  void (*build)(spill_arch *a); /* NULL: the K3 shape (k3_shape.c) */
  spill_dtype dt[SPILL_SEC_COUNT];
  uint32_t group; /* q8/q4 experts' group */
} shape_row;

static const shape_row k_shapes[] = {
    {"k3", "Kimi K3 as released, rvq3 experts (the published container)", NULL, DT3(RVQ3), 0},
    {"k3-mxfp4", "Kimi K3 as released, MXFP4 experts as shipped", NULL, DT3(MXFP4), 0},
    {"gpt-oss-20b", "openai/gpt-oss-20b, MXFP4 experts as shipped (HF and GGUF)", gptoss_20b,
     DT3(MXFP4), 0},
    {"gpt-oss-120b", "openai/gpt-oss-120b, MXFP4 experts as shipped (HF and GGUF)", gptoss_120b,
     DT3(MXFP4), 0},
    {"glm-4.5-air",
     "zai-org/GLM-4.5-Air, q4 experts in groups of 32 (spill import --experts q4; its Q4_K_M "
     "GGUF, Q5_0/Q8_0 down experts kept, is not this row)",
     glm45_air, DT3(Q4), 32},
    {"glm-4.5", "zai-org/GLM-4.5 (355B-A32B), Q4_K_M experts (Q4_K gate/up, Q6_K down) kept",
     glm45_full, Q4_K_M, 0},
    {"qwen3.5-35b-a3b", "Qwen/Qwen3.5-35B-A3B, Q4_K_M experts (Q4_K gate/up, Q6_K down) kept",
     qwen35_35b, Q4_K_M, 0},
    {"qwen3.5-397b-a17b",
     "Qwen/Qwen3.5-397B-A17B, Q4_K_M experts (Q4_K gate/up, Q6_K down) kept", qwen35_397b, Q4_K_M,
     0},
};
#define N_SHAPES ((int)(sizeof k_shapes / sizeof k_shapes[0]))

int spill_plan_shape_info(int i, const char **name, const char **about, spill_dtype dt[3]) {
  if (i < 0 || i >= N_SHAPES) return SPILL_E_RANGE;
  if (name) *name = k_shapes[i].name;
  if (about) *about = k_shapes[i].about;
  if (dt)
    for (int s = 0; s < SPILL_SEC_COUNT; s++) dt[s] = k_shapes[i].dt[s];
  return SPILL_OK;
}

int spill_plan_shape_arch(const char *name, spill_arch *a, uint64_t *record_bytes,
                          uint64_t *trunk_bytes, spill_dtype *expert_dtype, spill_err *e) {
  const shape_row *r = NULL;
  for (int i = 0; i < N_SHAPES && name; i++)
    if (!strcmp(name, k_shapes[i].name)) r = &k_shapes[i];
  if (!r) {
    char known[512] = "";
    for (int i = 0; i < N_SHAPES; i++) {
      if (i) strncat(known, ", ", sizeof known - strlen(known) - 1);
      strncat(known, k_shapes[i].name, sizeof known - strlen(known) - 1);
    }
    return spill_err_set(e, SPILL_E_INVALID_ARG, "unknown shape '%s' (known: %s)",
                         name ? name : "", known);
  }
  if (expert_dtype) *expert_dtype = r->dt[0];
  if (!r->build) return spill_plan_k3_shape_dtype(r->dt[0], a, record_bytes, trunk_bytes, e);
  memset(a, 0, sizeof *a);
  a->bos_id = a->eos_id = -1;
  r->build(a);
  spill_section_info sect[SPILL_SEC_COUNT];
  uint32_t payload;
  SPILL_TRY(spill_record_layout_sections(a, r->dt, r->group, sect, &payload, record_bytes, e));
  *trunk_bytes = spill_plan_trunk_estimate_dtype(a, r->dt[0]);
  return SPILL_OK;
}

int spill_plan_shape_compute(const char *name, int ctx, int threads, spill_arch *a,
                             spill_plan *p, spill_err *e) {
  uint64_t rec, trunk;
  spill_dtype dt;
  SPILL_TRY(spill_plan_shape_arch(name, a, &rec, &trunk, &dt, e));
  /* the published K3 rows: rvq3 LUTs counted whatever the experts (docs/PLAN.md) */
  if (!strcmp(a->family, "k3")) return spill_plan_compute(a, rec, trunk, ctx, threads, p, e);
  /* the others as spill_plan_model plans a container of their arch: act_quant
   * q8 (every expert dtype of the table has an integer path), the int16 LUTs
   * as the engine would choose them */
  const spill_model_mem_opts o = {ctx, threads, 16, 1, spill_model_rvq3_qlut(dt), 0};
  return spill_plan_compute_run(a, rec, trunk, &o, p, e);
}
