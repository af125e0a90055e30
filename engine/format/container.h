/* engine/format/container.h: the spill container, v2 (reads v1; normative spec:
 * docs/FORMAT.md). A container is a directory:
 *
 *   MODEL/manifest.json        architecture, tensor table, banks, file hashes
 *   MODEL/trunk.bin            resident tensors at 64-byte aligned offsets
 *   MODEL/experts-LLL.bin      one bank per MoE layer L (3 digits, zero padded)
 *
 * A bank is a 4096-byte header page followed by n_experts fixed-size records;
 * record e starts at data_offset + e * record_bytes, is 4 KiB aligned and a
 * whole number of 4 KiB pages, and holds a 64-byte record header followed by
 * the gate, up and down matrices of one expert, so one aligned read returns
 * one expert. All integers are little-endian.
 *
 * Everything read from disk is untrusted: every size, offset and dimension is
 * bounds- and overflow-checked, and each failure names the file, layer and
 * expert. This module knows nothing of the forward pass, the cache or I/O
 * scheduling; it depends on engine/base only.
 */
#ifndef SPILL_FORMAT_CONTAINER_H
#define SPILL_FORMAT_CONTAINER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/dtype_traits.h" /* spill_dtype, its names and traits */
#include "engine/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Readers read [MIN, VERSION]. v2 adds the container identity
 * (container_id in the manifest, every bank header and every record header)
 * so a record from another container is refused. v3 adds per-bank section
 * dtypes (gate, up and down of one MoE layer may each have their own dtype,
 * as llama.cpp's Q4_K_M files mix Q4_K and Q6_K). Writers write v2, or v3
 * when some section's dtype differs from experts.dtype (SPILL_FORMAT_WRITE). */
#define SPILL_FORMAT_VERSION 3
#define SPILL_FORMAT_WRITE 2
#define SPILL_FORMAT_MIXED 3
#define SPILL_FORMAT_VERSION_MIN 1
#define SPILL_PAGE 4096u
#define SPILL_TENSOR_ALIGN 64u
#define SPILL_RECORD_HEADER_BYTES 64u
#define SPILL_BANK_HEADER_BYTES 4096u
#define SPILL_RECORD_MAGIC 0x52585053u /* "SPXR" */
#define SPILL_BANK_MAGIC "SPILLBNK"
#define SPILL_NAME_MAX 96
#define SPILL_MAX_LAYERS 512
#define SPILL_MAX_EXPERTS 65536
#define SPILL_MAX_TOPK 64
#define SPILL_MANIFEST_MAX_BYTES (64u << 20)

/* Bytes of a (rows, cols) matrix in dtype with the given group size (q8/q4;
 * ignored otherwise), from the dtype's traits row: rows x (value blocks +
 * f16 scales). Fails with SPILL_E_FORMAT on overflow, cols not a multiple
 * of the block (rvq3 8, K-quants 256) or of the group (q8/q4), or a group
 * that is not a multiple of the block (an odd q4 group). */
int spill_dtype_matrix_bytes(spill_dtype dt, uint64_t rows, uint64_t cols, uint32_t group,
                             uint64_t *out, spill_err *e);

/* Checks the values of a (rows, cols) matrix of dtype dt whose
 * spill_dtype_matrix_bytes bytes are at data: in a dtype with e8m0 block
 * scales (mxfp4) an exponent of 255 (NaN in e8m0) is refused with
 * SPILL_E_FORMAT naming the row and block. Other dtypes have no invalid
 * values. The writer (every record), the trunk loader (engine/model) and
 * spill_record_check with verify (spill verify, reads with verify on) call it. */
int spill_dtype_check_values(spill_dtype dt, const void *data, uint64_t rows, uint64_t cols,
                             spill_err *e);

/* rvq3 constants: 3 stages, 256-entry codebooks of 8-dim f32 vectors. The
 * codebooks of layer L and matrix M are the trunk tensor
 * "blk.L.ffn_M_exps.codebook", f32, shape (3, 256, 8) = rows 768, cols 8. */
#define SPILL_RVQ_STAGES 3
#define SPILL_RVQ_ENTRIES 256
#define SPILL_RVQ_DIM 8

typedef enum spill_attn_kind {
  SPILL_ATTN_GQA = 0,
  SPILL_ATTN_MLA = 1,
  SPILL_ATTN_KDA = 2,
  SPILL_ATTN_GDN = 3 /* Gated DeltaNet (Qwen3.5-MoE's linear layers) */
} spill_attn_kind;
/* softmax_topk (gpt-oss, llama.cpp's SOFTMAX_WEIGHT): the top-k of the
 * router logits, weighted by the softmax over the k chosen logits. */
typedef enum spill_router_kind {
  SPILL_ROUTER_SIGMOID = 0,
  SPILL_ROUTER_SOFTMAX = 1,
  SPILL_ROUTER_SOFTMAX_TOPK = 2
} spill_router_kind;
/* How group-limited routing scores a group of experts (docs/MODEL.md "MOE(l)"). */
typedef enum spill_group_score {
  SPILL_GROUP_MAX = 0, /* its best selection score (DeepSeek-V2 group_limited_greedy) */
  SPILL_GROUP_TOP2 = 1 /* the sum of its two best (DeepSeek-V3 noaux_tc) */
} spill_group_score;
/* The gated activation of every FFN (dense, shared, routed), docs/MODEL.md:
 * SwiGLU silu(g) u, Kimi K3's SiTU beta tanh(g/beta) sigmoid(g) *
 * (lambda > 0 ? lambda tanh(u/lambda) : u) with arch.situ_beta/situ_linear_beta,
 * or gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai, alpha 1.702, limit 7):
 * g' = min(g, 7), u' = clamp(u, -7, 7), g' sigmoid(1.702 g') (u' + 1). */
typedef enum spill_act_kind { SPILL_ACT_SWIGLU = 0, SPILL_ACT_SITU = 1, SPILL_ACT_SWIGLU_OAI = 2 } spill_act_kind;
/* Where a latent MoE (d_latent > 0) applies its RMSNorm moe_latent_norm:
 * on the expert input after moe_down_proj (the K3 family as reconstructed),
 * on the weighted sum of the routed experts before moe_up_proj (Kimi K3 as
 * released), or nowhere (no tensor). */
typedef enum spill_latent_norm {
  SPILL_LATENT_NORM_INPUT = 0,
  SPILL_LATENT_NORM_OUTPUT = 1,
  SPILL_LATENT_NORM_NONE = 2
} spill_latent_norm;

typedef struct spill_mla_cfg {
  int n_heads;
  int q_lora_rank;  /* 0 = full-rank q projection (attn_q) */
  int kv_lora_rank; /* latent width d_c */
  int qk_nope_dim;
  int qk_rope_dim;
  int v_head_dim;
  int use_rope;     /* 0 = NoPE (K3): rope dims are kept but not rotated */
  double rope_theta;
  /* YaRN RoPE scaling (DeepSeek-V2/V3, docs/MODEL.md "ATTN MLA"): 0 = none.
   * Frequencies of the rope dims ramp between base and base/factor over the
   * correction range of beta_fast..beta_slow rotations in orig_ctx tokens. */
  double yarn_factor;
  int yarn_orig_ctx;
  double yarn_beta_fast, yarn_beta_slow;
  double rope_mscale;   /* cos/sin multiplier; 0 = 1 */
  double softmax_scale; /* attention score scale; 0 = 1/sqrt(qk_nope_dim + qk_rope_dim) */
  double kv_norm_eps;   /* eps of the attn_kv_a_norm RMSNorm; 0 = arch norm_eps (Kimi-Linear: 1e-6) */
  int out_gate;         /* 1: o = o * sigmoid(attn_gate h) before attn_output (Kimi K3) */
} spill_mla_cfg;

typedef struct spill_kda_cfg {
  int n_heads;
  int head_dim;       /* d_k = d_v */
  int conv_kernel;    /* short causal conv width (4) */
  int gate_rank;      /* low-rank decay gate f_a (rank, D) / f_b (H*dk, rank) */
  int out_gate_rank;  /* 0 = full-rank output gate g_proj (H*dv, D) */
  double decay_floor; /* log-decay g is clamped to >= this (K3: -5.0); 0 = none */
  double l2norm_eps;  /* q/k l2norm x / sqrt(|x|^2 + eps); 0 = 1e-6 (fla, HF; GGUF: rms eps) */
  /* < 0: Kimi K3's decay g = lb * sigmoid(exp(A_log) * f) (no softplus, no
   * floor; decay_floor must be 0); 0 = the softplus decay above */
  double gate_lower_bound;
} spill_kda_cfg;

/* Gated DeltaNet (Qwen3.5-MoE, docs/MODEL.md "ATTN GDN"): n_k_heads q/k
 * heads, n_v_heads v heads (a multiple; v head j reads q/k head j mod
 * n_k_heads, llama.cpp's tiled order), head_dim for q, k and v, one short
 * causal conv of conv_kernel taps over the concatenated q, k, v. */
typedef struct spill_gdn_cfg {
  int n_k_heads;
  int n_v_heads;
  int head_dim;
  int conv_kernel;
} spill_gdn_cfg;

/* RMSNorm of q and k before RoPE (docs/MODEL.md "ATTN GQA"). */
typedef enum spill_qk_norm {
  SPILL_QK_NORM_NONE = 0, /* none (the K3 family's own GQA) */
  SPILL_QK_NORM_HEAD = 1, /* per head, weights (head_dim): Qwen3-MoE */
  SPILL_QK_NORM_FULL = 2  /* over the whole projection, weights (H*d) / (Hk*d): OLMoE */
} spill_qk_norm;

typedef struct spill_gqa_cfg {
  int n_heads;
  int n_kv_heads;
  int head_dim;
  double rope_theta;
  spill_qk_norm qk_norm; /* manifest key arch.gqa.qk_norm, optional, default "none" */
  /* Optional (absent in containers written before them; 0 = omitted):
   * rope_dim: RoPE on the first rope_dim dims of each head only (partial
   * rotate-half, GLM-4.5's head_dim / 2); 0 = the whole head.
   * qkv_bias: q, k, v projections add blk.L.attn_{q,k,v}_bias (GLM-4.5);
   * o_bias: the output projection adds blk.L.attn_output_bias (gpt-oss). */
  int rope_dim;
  int qkv_bias;
  int o_bias;
  /* out_gate (Qwen3.5-MoE): attn_q is (H*2d, D), each head's d query rows
   * then d gate rows; the attention output is multiplied by sigmoid(gate)
   * before attn_output. */
  int out_gate;
  /* gpt-oss (optional, 0 = omitted): sinks: a learned logit per query head,
   * blk.L.attn_sinks (H), joins every softmax denominator; swa_window > 0:
   * a sliding window on the layers l with l % swa_pattern < swa_pattern - 1
   * (llama.cpp's rule; swa_pattern 0 = every layer): key t is seen from
   * position p iff p - t < swa_window. YaRN RoPE as arch.mla's (yarn_factor
   * 0 = none; the correction range floored/ceiled as ggml), cos/sin times
   * rope_mscale (0 = 1). */
  int sinks;
  int swa_window;
  int swa_pattern;
  double yarn_factor;
  int yarn_orig_ctx;
  double yarn_beta_fast, yarn_beta_slow;
  double rope_mscale;
  /* 1: the YaRN correction range is used unrounded (transformers' rope_scaling
   * truncate false, gpt-oss's HF config); 0: floored/ceiled as ggml */
  int yarn_unrounded;
} spill_gqa_cfg;

typedef struct spill_moe_cfg {
  int n_experts;
  int top_k;
  int d_expert;    /* routed expert intermediate width */
  int n_shared;    /* shared experts, merged into one SwiGLU of n_shared*d_shared */
  int d_shared;    /* intermediate width of one shared expert */
  int d_latent;    /* 0 = experts run on d_model; else the latent width */
  spill_router_kind router;
  int norm_topk;   /* renormalise the selected weights to sum to 1 */
  double routed_scale;
  /* group-limited selection: experts in n_group equal groups, only the
   * topk_group best groups compete for the top-k. n_group 0 or 1 = none. */
  int n_group;
  int topk_group;
  spill_group_score group_score;
  int group_mask_zero; /* 1: experts of dropped groups compete with score 0 (the DeepSeek
                        * modelling code's masked_fill(0.0)); 0: they are out (-inf, llama.cpp) */
  spill_latent_norm latent_norm; /* with d_latent > 0 */
  /* > 0: norm_topk divides by max(sum, norm_min) (llama.cpp's clamp,
   * 2^-14); 0: by the sum when it is > 0 */
  double norm_min;
  /* shared_gate (Qwen3.5-MoE): the shared experts' output is scaled by
   * sigmoid(blk.L.ffn_gate_inp_shexp h), ffn_gate_inp_shexp (1, D); 0 = omitted */
  int shared_gate;
  /* gpt-oss (optional, 0 = omitted): router_bias: blk.L.ffn_gate_inp_bias
   * (E) is added to the router logits; expert_bias: each routed expert adds
   * blk.L.ffn_{gate,up}_exps_bias (E, d_expert) and ffn_down_exps_bias (E, d_in)
   * (row e) after its gate, up and down matrices. */
  int router_bias;
  int expert_bias;
} spill_moe_cfg;

typedef struct spill_arch {
  char family[32];  /* informational: "k3", "olmoe", ... */
  int vocab_size;
  int d_model;
  int n_layers;
  int n_dense_layers; /* layers [0, n_dense_layers) have a dense FFN */
  int d_ff;           /* dense FFN intermediate width */
  double norm_eps;
  spill_act_kind activation;
  int bos_id, eos_id; /* -1 = none */
  double situ_beta, situ_lambda; /* SiTU's beta (> 0) and linear beta (<= 0: linear up branch) */
  /* Attention residuals (Kimi K3, docs/MODEL.md): every attn_res_block
   * layers the layer input is banked; 0 = plain residual adds */
  int attn_res_block;
  spill_attn_kind layer_attn[SPILL_MAX_LAYERS];
  spill_mla_cfg mla;  /* meaningful when some layer is MLA */
  spill_kda_cfg kda;
  spill_gdn_cfg gdn;
  spill_gqa_cfg gqa;
  spill_moe_cfg moe;  /* meaningful when n_layers > n_dense_layers */
} spill_arch;

typedef struct spill_tensor_info {
  char name[SPILL_NAME_MAX];
  spill_dtype dtype;
  int ndim;          /* 1 or 2; a vector is (1, n) for byte sizing */
  uint64_t shape[2]; /* (rows, cols); ndim 1: shape[0] = n, shape[1] = 1 */
  uint32_t group;    /* q8/q4 group size along cols; 0 otherwise */
  uint64_t offset;   /* in trunk.bin, multiple of SPILL_TENSOR_ALIGN */
  uint64_t bytes;
  uint32_t crc32;    /* of the tensor's bytes (computed by the writer) */
} spill_tensor_info;

/* One matrix inside an expert record (offsets from the record start). */
typedef struct spill_section_info {
  uint32_t rows, cols;
  uint32_t offset; /* multiple of 64, >= SPILL_RECORD_HEADER_BYTES */
  uint32_t bytes;
} spill_section_info;

enum { SPILL_SEC_GATE = 0, SPILL_SEC_UP = 1, SPILL_SEC_DOWN = 2, SPILL_SEC_COUNT = 3 };

typedef struct spill_bank_info {
  int layer;
  /* dtype of gate, up and down in this bank's records; experts.dtype in
   * v1/v2 and wherever a v3 manifest's bank has no "dtypes" (docs/FORMAT.md) */
  spill_dtype sect_dtype[SPILL_SEC_COUNT];
  char file[SPILL_NAME_MAX]; /* relative name, no '/' */
  uint32_t n_experts;
  uint64_t record_bytes;
  uint64_t data_offset; /* SPILL_BANK_HEADER_BYTES */
} spill_bank_info;

typedef struct spill_file_info {
  char name[SPILL_NAME_MAX];
  uint64_t bytes;
  uint32_t crc32; /* of the whole file */
} spill_file_info;

typedef struct spill_manifest {
  int version;           /* 1 or 2 */
  uint64_t container_id; /* v2: non-zero identity, repeated in every bank and
                          * record header; 0 in v1. Writer: 0 = derive one */
  char name[64];
  spill_arch arch;
  int n_tensors;
  spill_tensor_info *tensors;
  /* expert record layout, shared by every bank */
  spill_dtype expert_dtype;
  /* 1 when some bank's section dtype differs from expert_dtype (v3). As
   * writer input: take banks[i].sect_dtype from the caller's banks[] (n_banks
   * entries, one per MoE layer); otherwise every section is expert_dtype. */
  int sect_mixed;
  uint32_t expert_group;
  uint64_t record_bytes;
  uint32_t payload_bytes; /* from the end of the header to the end of down */
  spill_section_info sect[SPILL_SEC_COUNT];
  int n_banks;
  spill_bank_info *banks; /* banks[i] is MoE layer n_dense_layers + i */
  int n_files;
  spill_file_info *files;
  char *generator_json; /* optional free-form object, serialised; may be NULL */
} spill_manifest;

/* Parses and validates manifest JSON (untrusted). src names the file for
 * messages. On success m owns heap memory released by spill_manifest_free.
 * Checks: types and ranges of every field, architecture consistency (layer
 * kinds, dims, top_k <= n_experts), tensor sizes equal to the dtype's size of
 * the shape, 64-byte alignment, banks one per MoE layer with the shared
 * record layout, sections inside the record and non-overlapping. */
int spill_manifest_parse(const char *json, size_t len, const char *src, spill_manifest *m,
                         spill_err *e);
/* Serialises m to JSON (malloc'd, caller frees with free()). */
int spill_manifest_to_json(const spill_manifest *m, char **out, spill_err *e);
void spill_manifest_free(spill_manifest *m); /* NULL and zeroed are fine */
/* Tensor by exact name, or NULL. Linear scan: call at load time only. */
const spill_tensor_info *spill_manifest_find(const spill_manifest *m, const char *name);
/* Number of MoE layers and whether layer l is MoE. */
int spill_arch_n_moe(const spill_arch *a);
int spill_arch_is_moe(const spill_arch *a, int layer);

/* Record layout for a dtype and arch (used by the writer and to validate):
 * fills sect[], payload_bytes and record_bytes (rounded up to 4 KiB). */
int spill_record_layout(const spill_arch *a, spill_dtype dt, uint32_t group,
                        spill_section_info sect[SPILL_SEC_COUNT], uint32_t *payload_bytes,
                        uint64_t *record_bytes, spill_err *e);

/* Record layout with one dtype per section (v3): sect[i].bytes is the size
 * of section i in dtype dt[i]. A mixed container sizes each section for the
 * largest of its banks' dtypes (spill_manifest_mixed_layout). */
int spill_record_layout_sections(const spill_arch *a, const spill_dtype dt[SPILL_SEC_COUNT],
                                 uint32_t group, spill_section_info sect[SPILL_SEC_COUNT],
                                 uint32_t *payload_bytes, uint64_t *record_bytes, spill_err *e);
/* The shared layout of m's banks (m->banks[i].sect_dtype): each section sized
 * for the largest bytes any bank needs there. Checks every bank's section
 * dtypes against the section shapes and the group rule. */
int spill_manifest_mixed_layout(const spill_manifest *m, spill_section_info sect[SPILL_SEC_COUNT],
                                uint32_t *payload_bytes, uint64_t *record_bytes, spill_err *e);
/* Bytes of section sec in a record of layer (its bank's dtype), <= sect.bytes. */
uint32_t spill_manifest_sect_bytes(const spill_manifest *m, int layer, int sec);
/* dtype of section sec in the records of MoE layer `layer`. */
spill_dtype spill_manifest_sect_dtype(const spill_manifest *m, int layer, int sec);

/* The 64-byte record header. */
typedef struct spill_record_header {
  uint32_t magic;     /* SPILL_RECORD_MAGIC */
  uint16_t version;   /* 1 */
  uint16_t dtype;     /* spill_dtype */
  uint32_t layer;
  uint32_t expert;
  uint32_t payload_offset; /* SPILL_RECORD_HEADER_BYTES */
  uint32_t payload_bytes;
  uint32_t payload_crc32;
  uint32_t header_crc32; /* crc32 of the 64 header bytes with this field zero */
  uint32_t sect_offset[SPILL_SEC_COUNT];
  uint32_t n_sections; /* 3 */
  uint64_t container_id; /* v2 (bytes 48..55); 0 in v1 (reserved there) */
  uint8_t sect_dtype[SPILL_SEC_COUNT]; /* v3 (bytes 56..58); reserved (0) before */
  uint8_t unused_[5];                  /* no padding: not encoded, keep zero */
} spill_record_header;

void spill_record_header_encode(const spill_record_header *h, uint8_t out[64]);
void spill_record_header_decode(const uint8_t in[64], spill_record_header *h);
/* Validates a record buffer read for (layer, expert) of bank file `file`:
 * magic, version (the manifest's), header crc, container id (v2), dtype,
 * layer and expert ids, payload bounds and section offsets against the
 * manifest; with verify != 0 also the payload
 * crc32 and the values no kernel may see (spill_dtype_check_values: an
 * mxfp4 exponent of 255). Errors name file, layer and expert. */
int spill_record_check(const spill_manifest *m, const char *file, int layer, uint32_t expert,
                       const void *rec, size_t len, int verify, spill_err *e);

/* Bank header page. */
typedef struct spill_bank_header {
  uint32_t version, layer, n_experts, dtype;
  uint64_t record_bytes, data_offset;
  uint64_t container_id; /* v2 (bytes 44..51); 0 in v1 (reserved there) */
  uint8_t sect_dtype[SPILL_SEC_COUNT]; /* v3 (bytes 52..54); reserved (0) before */
  uint8_t unused_[5];                  /* no padding: not encoded, keep zero */
} spill_bank_header;
/* Encodes the page (magic, fields, header crc32, zero reserved bytes). */
void spill_bank_header_encode(const spill_bank_header *h, uint8_t out[SPILL_BANK_HEADER_BYTES]);
/* Decodes the fields only (no check; the crc is not part of the struct). */
void spill_bank_header_decode(const uint8_t in[SPILL_BANK_HEADER_BYTES], spill_bank_header *h);
/* Checks magic, version, header crc32, reserved bytes and every field against
 * the manifest's bank b. Errors name b->file. */
int spill_bank_header_check(const spill_manifest *m, const spill_bank_info *b, const void *page,
                            size_t len, spill_err *e);

/* ---- Reading a container ---- */

/* An open container: manifest parsed and validated against the files on disk
 * (sizes), bank headers checked. Does not read the trunk or any record. */
typedef struct spill_container {
  char *dir;
  spill_manifest m;
  int trunk_fd;         /* O_RDONLY */
  uint64_t trunk_bytes;
  int *bank_fd;         /* n_banks buffered O_RDONLY fds (I/O layers open their own) */
} spill_container;

int spill_container_open(const char *dir, spill_container *c, spill_err *e);
void spill_container_close(spill_container *c); /* NULL/zeroed fine */
/* Path of a file of the container into buf (size n). */
int spill_container_path(const spill_container *c, const char *name, char *buf, size_t n,
                         spill_err *e);
/* Reads a trunk tensor's bytes into dst (dst_bytes >= t->bytes). */
int spill_container_read_tensor(const spill_container *c, const spill_tensor_info *t, void *dst,
                                size_t dst_bytes, spill_err *e);
/* Reads one expert record with pread into rec (record_bytes) and checks it. */
int spill_container_read_record(const spill_container *c, int layer, uint32_t expert, void *rec,
                                int verify, spill_err *e);
/* Bank of MoE layer `layer`, or NULL. */
const spill_bank_info *spill_container_bank(const spill_container *c, int layer);

/* Full offline audit: every file's size and crc32, every bank header, every
 * record header and payload crc. progress (may be NULL) gets bytes done/total.
 * Returns the first defect found. */
typedef void (*spill_progress_fn)(void *ctx, uint64_t done, uint64_t total);
int spill_container_verify(const char *dir, spill_progress_fn progress, void *ctx,
                           spill_err *e);

/* ---- Writing a container ---- */

/* The writer streams a container to disk: trunk tensors in any order, then
 * every record of every bank (any order within a bank). It computes record
 * and file crc32s on the way and writes manifest.json last (atomically), so a
 * crashed write never looks like a valid container. */
typedef struct spill_writer spill_writer;

/* `m` supplies name, arch, expert dtype/group and the tensor list (names,
 * dtypes, shapes, groups; offsets/bytes are computed here), and optionally
 * container_id (0 = derived here: a 64-bit hash of the layout manifest, i.e.
 * name, generator, arch and tensor table, so a deterministic generator stays
 * deterministic; give a random or source-derived id when those may repeat
 * for different weights). The writer copies what it needs and always writes
 * version SPILL_FORMAT_VERSION. */
int spill_writer_open(const char *dir, const spill_manifest *m, spill_writer **out,
                      spill_err *e);
/* Writes tensor `name`'s bytes (exactly its size). */
int spill_writer_tensor(spill_writer *w, const char *name, const void *data, size_t bytes,
                        spill_err *e);
/* Writes record (layer, expert): `payload` is payload_bytes long laid out as
 * in m.sect (offsets minus SPILL_RECORD_HEADER_BYTES); header and padding are
 * added here (bytes of `payload` between sections are ignored: zeros are
 * written there). Within a bank records must come in expert order 0..n-1 (so the
 * file crc32 streams); banks may interleave. Not thread-safe per writer. */
int spill_writer_record(spill_writer *w, int layer, uint32_t expert, const void *payload,
                        spill_err *e);
/* Resuming an interrupted write (spill import): opens like spill_writer_open
 * but keeps the data files' contents (no truncation). Then every unit must be
 * either written again or adopted from disk, in the same order rules:
 * adopt_tensor re-reads tensor `name` into buf (>= its bytes) and accepts it
 * only if its crc32 equals `crc32` (from the caller's journal); adopt_record
 * re-reads record (layer, expert) into buf (record_bytes) and accepts it only
 * if its header, ids, layout, payload crc and zero padding check out.
 * Rejection is SPILL_E_CHECKSUM: the caller writes that unit again. The
 * finished container is byte-identical to an uninterrupted write. */
int spill_writer_open_resume(const char *dir, const spill_manifest *m, spill_writer **out,
                             spill_err *e);
int spill_writer_adopt_tensor(spill_writer *w, const char *name, uint32_t crc32, void *buf,
                              size_t buf_bytes, spill_err *e);
int spill_writer_adopt_record(spill_writer *w, int layer, uint32_t expert, void *buf,
                              spill_err *e);
/* Layout the writer computed (record_bytes, sections, tensor offsets). */
const spill_manifest *spill_writer_manifest(const spill_writer *w);
/* Checks completeness, writes file hashes and manifest.json. Frees w. */
int spill_writer_finish(spill_writer *w, spill_err *e);
void spill_writer_abort(spill_writer *w); /* frees w, leaves no manifest */
/* Frees w leaving no manifest but keeping the data files (for a resume). */
void spill_writer_close_keep(spill_writer *w);

#ifdef __cplusplus
}
#endif
#endif
