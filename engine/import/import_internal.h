/* engine/import/import_internal.h: the importer's private structures, shared
 * by the planning layers (import_plan.c: source access and plan helpers;
 * arch_*.c: one architecture family each; arch_registry.c: the table of
 * architectures that picks one) and import_run.c (conversion, journal,
 * writing). Calls go registry -> arch_*.c -> import_plan.c, never back.
 * Not a public API.
 */
#ifndef SPILL_IMPORT_INTERNAL_H
#define SPILL_IMPORT_INTERNAL_H

#include "engine/format/container.h"
#include "engine/import/gguf.h"
#include "engine/import/import.h"
#include "engine/import/import_rvq.h"
#include "engine/import/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct imp_src {
  int is_gguf;
  spill_st_ckpt st;
  spill_gguf gg;
  uint8_t *used;        /* (n source tensors) consumed by the plan */
  char arch_name[32];
  uint32_t fp8_block[2]; /* safetensors FP8 weight_block_size (rows, cols), 0 = none */
  /* Hugging Face names: every name the plan asks for is looked up as
   * hf_prefix + name ("language_model." for Kimi K3's wrapper); "" = none */
  char hf_prefix[32];
  /* Hugging Face module path of the text model, "" = "model." (Qwen3.5's
   * released wrapper: "model.language_model."): imp_add_layer,
   * imp_add_squeezed, imp_plan_init and imp_plan_experts name tensors
   * "<hf_model>layers.<l>.<name>", "<hf_model>embed_tokens.weight" */
  char hf_model[32];
  /* tensors under these name prefixes are not part of the text model and
   * are skipped (counted in n_skipped, named in the import summary), e.g.
   * "vision_tower." and "mm_projector."; NULL-terminated, or NULL */
  const char *const *skip_prefixes;
  int n_skipped;
  int ct_mxfp4; /* config.json quantization_config: compressed-tensors mxfp4-pack-quantized */
} imp_src;

/* One trunk tensor of the container. */
typedef struct imp_trunk {
  char name[SPILL_NAME_MAX];
  const spill_src_tensor *src;
  const spill_src_tensor *scale; /* FP8 weight_scale_inv, or NULL */
  int ndim;                      /* 1 (vector, always f32) or 2 */
  uint64_t rows, cols;           /* container shape (ndim 1: rows = n) */
  int unpermute_heads;           /* > 0: GGUF llama q/k rows, heads of rows/heads each */
  int f32;                       /* 2-D tensor the engine reads as f32 (KDA conv weights):
                                  * written f32 whatever --trunk says (exact from f32/f16/bf16) */
  /* rope_dim > 0: de-interleave RoPE rows (DeepSeek's pairs (2i, 2i+1) ->
   * spill's rotate-half halves): in each block of rope_block rows, rows
   * [rope_off, rope_off + rope_dim) come from rope_off + 2i and + 2i + 1 */
  uint32_t rope_block, rope_off, rope_dim;
  /* GGUF deepseek2 attn_k_b + attn_v_b -> one attn_kv_b (src = k_b, numpy
   * (H, dc, dn); v_b numpy (H, dv, dc)); the values are moved exactly, into
   * f32 under keep (a transpose cannot keep quantised blocks) */
  const spill_src_tensor *v_b;
  uint32_t kvb_heads, kvb_dn, kvb_dv;
  /* vector stored as A = -exp(A_log) (GGUF kimi-linear ssm_a): written as
   * log(-A), the container's attn_a_log; every value must be < 0 */
  int log_neg;
  /* vector written as src * mul elementwise in f32 (HF Kimi K3's AttnRes
   * <x>_res_norm * <x>_res_proj, llama.cpp's fused score vector), or NULL */
  const spill_src_tensor *mul;
  /* col_stride > 0: the (rows, cols) tensor is columns col_first,
   * col_first + col_stride, ... of the source (rows, cols * col_stride)
   * (HF gpt-oss's gate_up_proj_bias: gate even, up odd), in f32 */
  uint32_t col_stride, col_first;
  /* HF Qwen3.5 zero-centred norms (weight w, the model multiplies by 1 + w):
   * the f32 vector is written as w + 1 (llama.cpp's converter, in f32) */
  int add_one;
  /* HF Qwen3.5 A_log: the f32 vector is written as A = -exp(A_log) (the
   * container's ssm_a, as GGUF qwen35moe holds it) */
  int neg_exp;
  /* vh_hd > 0: HF Qwen3.5's v heads grouped by k head (head g r + v, r =
   * vh_r heads per k head) become llama.cpp's tiled order (v Hk + g, Hk =
   * vh_hk) in blocks of vh_hd: rows from vh_off on (vh_cols = 0), or the
   * columns of each row (vh_cols = 1; f32/f16/bf16 sources) */
  uint32_t vh_off, vh_hk, vh_r, vh_hd;
  int vh_cols;
} imp_trunk;

/* Sources of one MoE layer's experts, sections gate, up, down. */
typedef struct imp_moe_layer {
  const spill_src_tensor *stacked[SPILL_SEC_COUNT]; /* GGUF (E, rows, cols) */
  const spill_src_tensor **per[SPILL_SEC_COUNT];    /* HF: (E) pointers */
  const spill_src_tensor **scale[SPILL_SEC_COUNT];  /* HF FP8 scale_inv per expert, or NULL */
  /* HF compressed-tensors MXFP4: per[k][x] is weight_packed (uint8 [rows,
   * cols/2]) and mx_scale[k][x] its weight_scale (e8m0 [rows, cols/32]),
   * repacked into ggml's MXFP4 blocks when read; NULL otherwise */
  const spill_src_tensor **mx_scale[SPILL_SEC_COUNT];
  /* HF gpt-oss MXFP4 (oss_stride[k] > 0): per[k][x] is the layer's stacked
   * *_blocks (uint8 [E, rows * stride, cols/32, 16]) and mx_scale[k][x] its
   * *_scales ([E, rows * stride, cols/32]) for every x; section row r is
   * source row r * stride + oss_first (gate_up: gate even, up odd) */
  uint32_t oss_stride[SPILL_SEC_COUNT], oss_first[SPILL_SEC_COUNT];
  /* HF fused experts (fused_rows[k] > 0, Qwen3.5's mlp.experts.gate_up_proj
   * [E, 2F, D] and down_proj [E, D, F]): per[k][x] is the layer's stacked
   * tensor for every x; expert x's section is its rows fused_first ..
   * fused_first + rows - 1 of fused_rows (gate_up: gate first, then up) */
  uint32_t fused_rows[SPILL_SEC_COUNT], fused_first[SPILL_SEC_COUNT];
} imp_moe_layer;

typedef struct imp_plan {
  spill_arch arch;
  int n_trunk;
  imp_trunk *trunk;
  imp_moe_layer *moe; /* (n_moe) */
  char skipped[96];   /* source layers left out of the model, for the summary ("" = none) */
} imp_plan;

int imp_src_open(imp_src *s, const char *path, spill_err *e);
void imp_src_close(imp_src *s);
const spill_src_tensor *imp_src_find(imp_src *s, const char *name); /* marks it used */
int imp_src_read(const imp_src *s, const spill_src_tensor *t, uint64_t off, void *dst, size_t n,
                 spill_err *e);
int imp_src_n_tensors(const imp_src *s);
const spill_src_tensor *imp_src_tensor(const imp_src *s, int i);

/* GGUF sources: writes the tokenizer.* metadata as dst/tokenizer.gguf
 * (import_tok.c); no-op for other sources. */
int imp_gguf_tokenizer(const imp_src *s, const char *dst, spill_err *e);

/* ---- Plan helpers (import_plan.c), below the architecture files ---- */
int imp_need(imp_src *s, const char *name, const spill_src_tensor **out, spill_err *e);
int imp_check_shape(const spill_src_tensor *t, int ndim, uint64_t a, uint64_t b, spill_err *e);
/* Adds trunk tensor dst from source src (shape-checked, FP8 scale found). */
int imp_add_trunk(imp_src *s, imp_plan *p, const char *dst, const char *src, int ndim,
                  uint64_t rows, uint64_t cols, int unpermute, spill_err *e);
/* Adds trunk tensor "blk.<l>.<dst>" from the layer's GGUF tensor
 * "blk.<l>.<gguf>" or Hugging Face tensor "model.layers.<l>.<hf>". */
int imp_add_layer(imp_src *s, imp_plan *p, int l, const char *dst, const char *gguf, const char *hf, int ndim,
                  uint64_t rows, uint64_t cols, int unpermute, spill_err *e);
/* Allocates the plan (max_trunk trunk entries, n_moe MoE layers) and adds
 * the trunk's ends: tok_embd (V, D), output_norm (D), output (V, D) from
 * the embedding when tied. */
int imp_plan_init(imp_src *s, imp_plan *p, int max_trunk, int n_moe, uint64_t V, uint64_t D, int tied,
                  spill_err *e);
/* The routed experts of layer l into m: GGUF blk.l.ffn_{gate,up,down}_exps
 * stacked (E, rows, cols); HF "model.layers.l.<hf_mid>.<x>.<hf_leaf[k]>.weight"
 * per expert. Gate / up (F, D), down (D, F). */
int imp_plan_experts(imp_src *s, imp_moe_layer *m, int l, uint64_t E, uint64_t D, uint64_t F, const char *hf_mid,
                     const char *const hf_leaf[SPILL_SEC_COUNT], spill_err *e);
/* A dense SwiGLU FFN of width Fd (blk.l.ffn_{gate,up,down}; HF mlp.*_proj). */
int imp_plan_dense_ffn(imp_src *s, imp_plan *p, int l, uint64_t D, uint64_t Fd, spill_err *e);
/* Shared experts merged to width S (blk.l.ffn_*_shexp; HF <hf_mid>.*_proj). */
int imp_plan_shared_experts(imp_src *s, imp_plan *p, int l, uint64_t D, uint64_t S, const char *hf_mid,
                            spill_err *e);
/* HF per-expert sources of section k (0 gate, 1 up, 2 down) of one MoE
 * layer: "<pre><mid>.<x>.<leaf>.weight" for x < E, each (rows, cols), with
 * its FP8 weight_scale_inv when the tensor is FP8. */
int imp_hf_experts(imp_src *s, imp_moe_layer *m, int k, const char *pre, const char *mid, const char *leaf,
                   uint64_t E, uint64_t rows, uint64_t cols, spill_err *e);
/* GGUF integer key "<arch>.<key>" into *out, checked against [lo, hi]; a
 * missing key is an error when required, else *out = dflt. */
int imp_gguf_int(const spill_gguf *g, const char *arch, const char *key, int lo, int hi, int *out,
                 int dflt, int required, spill_err *e);
/* GGUF "<arch>.attention.head_count_kv", per layer (an array of L) or one
 * value: is_kda[l] = 1 where it is 0 (a KDA, recurrent, layer; llama.cpp's
 * is_recr), for kimi-linear and kimi-k3. */
int imp_gguf_kda_layers(const spill_gguf *g, const char *arch, int L, uint8_t *is_kda,
                        spill_err *e);
/* GGUF tokenizer.ggml.eos_token_id, and bos_token_id when add_bos_token
 * (absent: add_bos_dflt); ids outside [0, V) become -1. */
int imp_gguf_bos_eos(const spill_gguf *g, int V, int add_bos_dflt, int *bos, int *eos, spill_err *e);
/* GGUF stacked experts of section k: tensor `name`, numpy (E, rows, cols). */
int imp_gguf_experts(imp_src *s, imp_moe_layer *m, int k, const char *name, uint64_t E, uint64_t rows,
                     uint64_t cols, spill_err *e);
/* GGUF MLA attn_k_b (numpy (H, dc, dn)) + attn_v_b ((H, dv, dc)) named
 * "<pre>attn_k_b.weight" / "<pre>attn_v_b.weight" -> trunk blk.l.attn_kv_b
 * (H (dn + dv), dc), joined by import_run.c. */
int imp_add_kv_b_split(imp_src *s, imp_plan *p, const char *pre, int l, uint64_t H, uint64_t dc,
                       uint64_t dn, uint64_t dv, spill_err *e);
/* HF compressed-tensors MXFP4 experts of section k: "<pre><mid>.<x>.<leaf>.weight_packed"
 * (uint8 [rows, cols/2]) and ".weight_scale" (uint8 or F8_E8M0 [rows,
 * cols/32]) for x < E; each missing or misshapen one is named. */
int imp_hf_experts_mxfp4(imp_src *s, imp_moe_layer *m, int k, const char *pre, const char *mid, const char *leaf,
                         uint64_t E, uint64_t rows, uint64_t cols, spill_err *e);
/* HF gpt-oss MXFP4 experts of section k: "<pre>_blocks" (U8 [E, rows *
 * stride, cols/32, 16]) and "<pre>_scales" (U8 [E, rows * stride, cols/32]),
 * section row r = source row r * stride + first; misshapen ones named. */
int imp_hf_experts_oss(imp_src *s, imp_moe_layer *m, int k, const char *pre, uint64_t E, uint64_t rows,
                       uint64_t cols, uint32_t stride, uint32_t first, spill_err *e);
/* HF fused experts of section k: tensor `name`, shape [E, fused_rows, cols],
 * section rows first .. first + rows - 1 of each expert (f32/f16/bf16). */
int imp_hf_experts_fused(imp_src *s, imp_moe_layer *m, int k, const char *name, uint64_t E, uint64_t fused_rows,
                         uint64_t first, uint64_t rows, uint64_t cols, spill_err *e);
/* Adds trunk tensor "blk.<l>.<dst>" from the layer's GGUF tensor "blk.<l>.<gguf>"
 * or HF tensor "model.layers.<l>.<hf>" whose shape is [rows, cols] (cols 0:
 * [rows]) up to unit dimensions (conv weights (C, 1, K) / (1, C, 1, K);
 * A_log (1, 1, H, 1)); f32: written as f32 whatever --trunk says. longer:
 * a vector may hold more than rows values (padded storage: the first rows
 * are taken). */
int imp_add_squeezed(imp_src *s, imp_plan *p, int l, const char *dst, const char *gguf, const char *hf,
                     uint64_t rows, uint64_t cols, int f32, int longer, spill_err *e);
/* config.json linear_attn_config's 1-based layer list `key` (null/absent:
 * nothing): marks[l] |= bit for each, a repeat or an out-of-range entry
 * named (path names the file in errors). */
int imp_cfg_layer_list(const struct cJSON *la, const char *path, const char *key, int L, uint8_t *marks,
                       uint8_t bit, spill_err *e);
/* config.json quantization_config of quant_method compressed-tensors: only
 * format mxfp4-pack-quantized with 4-bit float weights in groups of 32 and
 * no activation, KV-cache, sparsity or transform scheme (each other value
 * refused by name); sets s->ct_mxfp4. */
int imp_cfg_ct_mxfp4(const struct cJSON *q, imp_src *s, spill_err *e);

/* Every source tensor must be consumed (skip_layer_from: tensors named
 * model.layers.N.* (GGUF: blk.N.*) with N >= it are ignored (DeepSeek / GLM
 * MTP layers); -1 none),
 * and FP8 trunk tensors need the block size. */
int imp_check_consumed(imp_src *s, const imp_plan *p, int skip_layer_from, spill_err *e);
struct cJSON;
/* config.json integer `key` of object r (path names it in errors) in
 * [lo, hi]; absent or null: an error when required, else dflt. */
int imp_cfg_int(const struct cJSON *r, const char *path, const char *key, int64_t lo, int64_t hi, int dflt,
                int required, int *out, spill_err *e);
/* Refuses a config.json key that is neither harmless (shared list) nor in
 * keys (NULL-terminated), naming it and the architecture. */
int imp_cfg_only_keys(const struct cJSON *root, const char *arch, const char *const *keys, spill_err *e);
/* config.json quantization_config (block FP8 only) and bos/eos ids. */
int imp_cfg_quant(const struct cJSON *root, imp_src *s, spill_err *e);
int imp_cfg_bos_eos(const struct cJSON *root, const char *dir, int *bos, int *eos, spill_err *e);
int imp_in_list(const char *const *list, const char *key); /* NULL-terminated list */
/* A vision-language wrapper's config.json read as llama.cpp's converters
 * read it ({**top, **text_config}): text_config merged over the top level,
 * text_config and vision_config removed (the vision tower is skipped); a
 * new object the caller deletes. path names the file in errors. */
int imp_cfg_text_merged(const struct cJSON *root, const char *path, struct cJSON **out, spill_err *e);


/* ---- The architectures (arch_*.c), one family per file ----
 * Each family file plans from a parsed config.json (root; dir holds it) or
 * from the GGUF metadata; s->arch_name is the model_type or the GGUF
 * general.architecture; variant is the registry row's (a family's member). */
typedef int (*imp_plan_hf_fn)(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                              spill_err *e);
typedef int (*imp_plan_gguf_fn)(imp_src *s, int variant, imp_plan *p, spill_err *e);

/* arch_gqa_moe.c: Qwen3-MoE, OLMoE, Mixtral. */
enum { IMP_GQA_QWEN3MOE = 0, IMP_GQA_OLMOE = 1, IMP_GQA_MIXTRAL = 2 };
int imp_gqa_moe_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                        spill_err *e);
int imp_gqa_moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);
/* arch_deepseek.c: DeepSeek-V2/V3, Kimi-K2 (V2 vs V3 code by s->arch_name). */
int imp_deepseek_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                         spill_err *e);
int imp_deepseek_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);
/* arch_kimi_linear.c: Kimi-Linear (KDA + NoPE MLA). */
int imp_kimi_linear_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                            spill_err *e);
int imp_kimi_linear_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);
/* arch_glm4moe.c: GLM-4.5 / 4.6 / 4.7 (GQA, partial RoPE, sigmoid router). */
int imp_glm4moe_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                        spill_err *e);
int imp_glm4moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);
/* arch_qwen35moe.c: Qwen3.5-MoE (GGUF qwen35moe; HF Qwen3_5MoeForConditionalGeneration
 * / Qwen3_5MoeForCausalLM, model_type qwen3_5_moe / qwen3_5_moe_text). */
int imp_qwen35moe_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);
int imp_qwen35moe_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                          spill_err *e);
/* arch_kimi_k3.c: Kimi K3 as released (GGUF kimi-k3; HF KimiK3ForConditionalGeneration). */
int imp_kimi_k3_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                        spill_err *e);
int imp_kimi_k3_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);

/* arch_gptoss.c: gpt-oss (GGUF gpt-oss: sinks, sliding window, YaRN, biases, MXFP4 experts). */
int imp_gptoss_plan_gguf(imp_src *s, int variant, imp_plan *p, spill_err *e);
int imp_gptoss_plan_hf(imp_src *s, const char *dir, const struct cJSON *root, int variant, imp_plan *p,
                       spill_err *e);
/* ---- The registry (arch_registry.c): one row per architecture ---- */
typedef struct imp_arch_row {
  spill_import_arch info;  /* names, as spill_import_arch_at() lists them */
  imp_plan_hf_fn plan_hf;  /* NULL: no Hugging Face form */
  imp_plan_gguf_fn plan_gguf; /* NULL: no GGUF form */
  int variant;
} imp_arch_row;
extern const imp_arch_row imp_arch_rows[];
extern const int imp_n_arch_rows;

/* --experts rvq3: engine/import/import_rvq.h. */

/* Builds the plan from the source's config / metadata: the registry row of
 * its model_type / general.architecture (arch_registry.c). */
int imp_plan_build(imp_src *s, imp_plan *p, spill_err *e);
void imp_plan_free(imp_plan *p);

#ifdef __cplusplus
}
#endif
#endif
