/* engine/model/model_internal.h: the model's private structures, shared by
 * the files of engine/model. Not part of any public API. The files call
 * each other in one direction only (no circles), bottom to top:
 *   thread_pool.c, weights.c (tensor views and lookups, trunk loading)
 *   -> model_math.c (matvecs on the pool, LUTs, RoPE, softmax, SwiGLU)
 *   -> attention_gqa.c, attention_mla.c, attention_kda.c, attention_gdn.c (one row each of
 *      the attention-kind table), moe.c (router, routed and shared experts)
 *   -> attention_table.c (the table) -> model_memory.c (state and scratch:
 *      the one memory formula) -> forward.c, model.c.
 *
 * Invariants: every spill_qmat points into the trunk allocation (or into an
 * expert record while pinned); every scratch buffer is allocated once in
 * spill_model_open for (ctx, n_threads, max_chunk) and only reused after.
 */
#ifndef SPILL_MODEL_INTERNAL_H
#define SPILL_MODEL_INTERNAL_H

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/alloc.h"
#include "engine/format/container.h"
#include "engine/model/expert_source.h"
#include "engine/model/model.h"
#include "engine/model/thread_pool.h"
#include "engine/quant/kernels.h"
#include "engine/quant/kernels_xq.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct spill_attn_ops spill_attn_ops;

/* Trunk tensors of one layer (only the ones its kind uses are set). */
typedef struct spill_layer_weights {
  spill_attn_kind kind;
  const spill_attn_ops *attn; /* the kind's row of the attention table */
  int is_moe;
  const float *attn_norm, *ffn_norm; /* (D), (D) */
  const float *attn_res_score, *ffn_res_score; /* (D), (D): AttnRes scores (attn_res_block > 0) */
  /* GQA: q (H*d, D), k/v (Hk*d, D), o (D, H*d); KDA: q/k/v (H*d, D) */
  spill_qmat attn_q, attn_k, attn_v, attn_output;
  const float *attn_q_norm, *attn_k_norm; /* GQA qk_norm: (d) each (head) or (H*d), (Hk*d) (full) */
  const float *attn_q_bias, *attn_k_bias, *attn_v_bias; /* GQA qkv_bias: (H*d), (Hk*d), (Hk*d) */
  const float *attn_output_bias;                        /* GQA o_bias: (D) */
  const float *attn_sinks;                              /* GQA sinks: (H) */
  /* MLA */
  spill_qmat attn_q_a, attn_q_b, attn_kv_a, attn_kv_b; /* (q_lora, D) (H*(dn+dr), q_lora) (dc+dr, D) (H*(dn+dv), dc) */
  const float *attn_q_a_norm, *attn_kv_a_norm;         /* (q_lora), (dc) */
  spill_qmat attn_gate;                                /* (H*dv, D) output gate (mla.out_gate) */
  /* KDA */
  const float *attn_q_conv, *attn_k_conv, *attn_v_conv; /* (H*d, K) each */
  spill_qmat attn_f_a, attn_f_b, attn_b, attn_g, attn_g_a, attn_g_b; /* (r, D) (H*d, r) (H, D) (H*d, D) (og, D) (H*d, og) */
  const float *attn_dt_bias, *attn_a_log, *attn_o_norm; /* (H*d), (H), (d); GDN: (Hv), -, (d) */
  /* GDN (attn_b = ssm_beta (Hv, D), attn_dt_bias, attn_o_norm = ssm_norm, attn_output) */
  spill_qmat attn_qkv, ssm_alpha; /* (2 Hk d + Hv d, D) (Hv, D); attn_gate = z (Hv*d, D) */
  const float *ssm_conv, *ssm_a;             /* (2 Hk d + Hv d, K), (Hv) = -exp(A_log) */
  /* dense FFN */
  spill_qmat ffn_gate, ffn_up, ffn_down; /* (d_ff, D) (d_ff, D) (D, d_ff) */
  /* MoE */
  spill_qmat ffn_gate_inp;                 /* (E, D) */
  const float *exp_probs_b;                /* (E), sigmoid router only */
  const float *ffn_gate_inp_bias;          /* (E) router_bias */
  const float *exps_bias[SPILL_SEC_COUNT]; /* expert_bias: (E, d_expert) gate, up; (E, d_in) down */
  spill_qmat moe_down_proj, moe_up_proj;   /* (d_latent, D), (D, d_latent) */
  const float *moe_latent_norm;            /* (d_latent) */
  spill_qmat ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp; /* (S, D) (S, D) (D, S) */
  spill_qmat ffn_gate_inp_shexp;           /* (1, D) shared-expert gate (moe.shared_gate) */
  const float *codebook[SPILL_SEC_COUNT];  /* rvq3: (3*256, 8) for gate, up, down */
  /* state (sequence): state_floats floats at state, carved by the kind's bind_state */
  float *state;
  uint64_t state_floats;
  float *cache;  /* MLA: (ctx, dc+dr); GQA: (kv_rows, Hk*d) keys */
  float *cache_v; /* GQA: (kv_rows, Hk*d) values */
  uint64_t kv_rows; /* GQA: ctx, or a sliding-window layer's ring (spill_gqa_kv_rows) */
  float *kda_s;  /* KDA: (H, d, d) */
  float *kda_ring; /* KDA: (3, K-1, H*d) previous pre-conv q, k, v */
  float *gdn_ring; /* GDN: (K-1, 2 Hk d + Hv d) previous pre-conv q, k, v; kda_s = S (Hv, d, d) */
} spill_layer_weights;

/* Scratch of the forward pass; shapes in comments, T = max_chunk. */
typedef struct spill_model_scratch {
  float *x;        /* (T, D) residual stream */
  float *h;        /* (T, D) normed input of a sub-block */
  float *attn_out; /* (D) */
  float *ffn_out;  /* (T, D) */
  float *shared_out; /* (T, D) shared-expert outputs, computed while reads fly */
  float *bank;     /* (n_bank, T, D) AttnRes: banked layer inputs of the chunk (attn_res_block > 0) */
  /* attention, one token at a time */
  float *q;        /* (max(H*(dn+dr), H*d, Hq*d)) */
  float *k, *v;    /* (max(H*d, Hk*d, dc+dr)) */
  float *cq;       /* (q_lora) */
  float *att;      /* (n_threads, ctx) attention weights of the head a thread runs */
  float *qa;       /* (H, dc) absorbed MLA queries, or KDA gate_out (H*d) */
  float *ol;       /* (H, dc) MLA latent outputs */
  float *o;        /* (H * max(dv, d)) concatenated head outputs */
  float *rowtmp;   /* (n_threads, dc) dequantised kv_b rows */
  float *rope_cs;  /* (2, max rope dim / 2) cos, sin of this position */
  float *kq, *kk, *kv; /* KDA (H*d) convolved q, k, v */
  float *kfa;      /* (max(r, og)) */
  float *kalpha;   /* (H*d) decay */
  float *kbeta;    /* (H) */
  float *ku;       /* (n_threads, d) delta-rule temp */
  /* FFN / MoE */
  float *ff_g, *ff_u; /* (max(d_ff, S, d_expert)) */
  float *router;   /* (T, E) router scores */
  float *router_sel; /* (E) selection scores (score + bias) */
  uint32_t *sel;   /* (T, k) selected ids in selection order */
  float *selw;     /* (T, k) final weights */
  float *u;        /* (T, d_in) expert input (latent or h copy) */
  float *lut_g, *lut_u; /* (T, 3*(d_in/8)*256) rvq3 LUTs of u */
  float *lut_d;    /* (n_threads, 3*(d_expert/8)*256) rvq3 LUT of an expert's activation, per thread */
  /* int16 LUTs of the VBMI path (spill_k_apply_rvq3_i16_fast): quantised copies of
   * lut_g/lut_u per token and of lut_d, spill_k_qlut_rvq3_i16_bytes(cols) each */
  uint8_t *qlut_g, *qlut_u; /* (T, qlut_bytes(d_in)) */
  uint8_t *qlut_d;          /* (n_threads, qlut_bytes(d_expert)) */
  /* act_q8 (kernels_xq.h): quantised matvec inputs, spill_k_xq_bytes each */
  uint8_t *xq_u;   /* (T, xq_u_bytes) each token's expert input u, once per layer */
  size_t xq_u_bytes; /* spill_k_xq_bytes(d_in) */
  uint8_t *xq0, *xq1; /* (xq_cap) the inputs of one matvec pair */
  size_t xq_cap;
  float *eg, *eu;  /* (T*k, d_expert) each use's expert gate/up outputs */
  uint8_t *xq_d;   /* (T*k, xq_d_bytes) act_q8: each use's activation quantised for down */
  size_t xq_d_bytes; /* spill_k_xq_bytes(d_expert) */
  float *slot;     /* (T, k, d_in) each selection's expert output */
  float *y;        /* (d_in) */
  uint32_t *uniq;  /* (T*k) distinct experts of a chunk, first-use order */
  int *use_start;  /* (T*k + 1) CSR of uses per distinct expert */
  int *use;        /* (T*k) uses: t*k + slot */
  int *use_fill;   /* (T*k) */
  uint32_t *stamp; /* (E) epoch stamp per expert */
  int *stamp_idx;  /* (E) index into uniq */
  uint8_t *delivered; /* (T*k) per distinct expert: 0 not yet, 1 held, 2 released */
  /* the MoE region's scheduler (moe.c): tasks, per-use and per-record counters */
  int *use_owner;  /* (T*k) distinct-expert index of each use (CSR order) */
  int *tasks;      /* (T*k * 2 * SPILL_MOE_MAX_PARTS) queued tasks */
  int *parts_left; /* (T*k) per use: parts of its current phase not done */
  int *rec_left;   /* (T*k) per distinct expert: uses not done */
  int *rel;        /* (T*k) distinct experts to release */
  spill_qmat *rec_mat; /* (T*k, 3) gate/up/down views of each delivered record */
  float *logits;   /* (vocab) */
  /* router lookahead (spill_model_router_topk) */
  float *la_h;     /* (D) */
  float *la_s;     /* (E) */
  /* speculation (spec_verify.c; NULL when spec_max is 0) */
  float *spec_logits; /* (spec_max, vocab) logits of every verified position */
  float *spec_snap;   /* (sum of the recurrent layers' state_floats) state before a verify */
  float *spec_h;      /* (n_recurrent, spec_max, D) recurrent layers' inputs of a verify chunk */
} spill_model_scratch;

struct spill_model {
  volatile int *stop; /* spill_model_set_stop: checked before each layer */
  spill_container c;
  int container_open;
  spill_arch a;        /* copy of c.m.arch */
  spill_model_opts o;  /* resolved options */
  uint8_t *trunk;      /* trunk.bin contents, SPILL_TENSOR_ALIGN aligned */
  int trunk_mapped;    /* trunk is an mmap of trunk.bin (trunk_mode 1) */
  int trunk_locked;    /* trunk is mlock()ed (trunk_mode 2) */
  size_t trunk_bytes;
  spill_layer_weights *L; /* (n_layers) */
  spill_qmat tok_embd, output; /* (vocab, D) each */
  const float *output_norm;    /* (D) */
  const float *output_res_score; /* (D) AttnRes score of the output mix (attn_res_block > 0) */
  int bank_n;                  /* AttnRes entries banked so far by the current (or last) chunk */
  int bank_T;                  /* tokens of that chunk (the bank's token stride) */
  /* expert record layout */
  spill_dtype expert_dtype;
  int d_in;           /* d_latent or D */
  int rvq_q;          /* rvq3 experts go through the int16 LUT (VBMI) path */
  /* state */
  float *state;       /* one allocation for all layers */
  size_t state_bytes;
  int n_past;
  /* scratch */
  spill_model_scratch s;
  void *scratch_mem;
  size_t scratch_bytes;
  uint32_t epoch;
  spill_pool *pool;
  /* the MoE region's queue lock and idle threads' condition (moe.c) */
  pthread_mutex_t sched_mu;
  pthread_cond_t sched_cv;
  int sched_init;
  uint64_t sched_regions; /* MoE regions run on the pool */
  uint64_t par_moe;       /* pool dispatches made inside spill_model_moe */
  uint64_t sched_sleeps;  /* idle threads in a region that slept after their spin */
  uint64_t sched_wait_threads_ns; /* every thread's waits in the regions, since open */
  spill_expert_source builtin;  /* sync source over c */
  int builtin_open;
  spill_expert_source src;      /* in use */
  spill_model_observer obs;
  int has_obs;
  /* forced routing (spill_model_set_forced_routing): borrowed (force_n,
   * force_n_moe, top_k) table, NULL = the routers decide */
  const uint32_t *force_ids;
  int force_n, force_n_moe;
  spill_model_stats stats;
  /* speculation: the last verify chunk (spec_verify.c): its first position
   * and token count (0: none to keep from); spec_rec = the running forward
   * records the recurrent layers' inputs into s.spec_h */
  int spec_pos, spec_n;
  int spec_rec;
  /* sliding-window rings (GQA layers with arch.gqa.swa_window): the window
   * W, the ring rows (0: no such layer) and the lowest position whose keys
   * the rings still hold for the current sequence (forward.c raises it as
   * chunks overwrite rows; a cut back to n needs n+1-W..n-1 held, so
   * n >= swa_lo + W - 1 unless swa_lo is 0) */
  int swa_w, swa_rows, swa_lo;
};

/* Most parts a use's rows are split into (moe.c: one per thread, when a
 * layer has few uses). */
#define SPILL_MOE_MAX_PARTS 8

/* Saturating size arithmetic (UINT64_MAX on overflow) for memory terms. */
static inline uint64_t spill_sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return spill_mul_u64(a, b, &r) ? r : UINT64_MAX;
}
static inline uint64_t spill_sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return spill_add_u64(a, b, &r) ? r : UINT64_MAX;
}

/* ---- weights.c: tensor views and lookups, trunk loading ---- */
/* Reads (or maps) trunk.bin, checks the expert record layout and resolves
 * the global tensors (tok_embd, output_norm, output). */
int spill_model_load_trunk(spill_model *m, spill_err *e);
/* Resolves layer l's norms and FFN (dense, or router, latent, shared
 * experts and codebooks for a MoE layer). */
int spill_model_load_norms(spill_model *m, int l, spill_err *e);
int spill_model_load_ffn(spill_model *m, int l, spill_err *e);
/* Tensor "blk.<layer>.<suffix>" (layer < 0: "<suffix>") of the trunk,
 * checked against the arch's shape: a matrix of any dtype but rvq3 as a
 * view, or f32 (a vector (rows) when cols == 0). SPILL_E_FORMAT naming the
 * tensor when missing, misshaped or outside trunk.bin; SPILL_E_UNSUPPORTED
 * for a wrong dtype. */
int spill_model_get_mat(spill_model *m, int layer, const char *suffix, uint64_t rows,
                        uint64_t cols, spill_qmat *w, spill_err *e);
int spill_model_get_f32(spill_model *m, int layer, const char *suffix, uint64_t rows,
                        uint64_t cols, const float **out, spill_err *e);
/* A view of rows [r0, r0 + n) of a trunk matrix (any non-rvq3 dtype, or rvq3). */
spill_qmat spill_model_qmat_rows(const spill_qmat *w, uint32_t r0, uint32_t n);
/* Fills a view of section `sec` of an expert record. */
void spill_model_expert_qmat(const spill_model *m, int layer, const uint8_t *rec, int sec,
                             spill_qmat *out);

/* ---- model_math.c: the maths shared by attention, MoE and forward ---- */
/* y = W x over all rows, split by rows across the pool. */
void spill_model_matvec(spill_model *m, const spill_qmat *w, const float *x, float *y);
/* y0 = W0 x0 and y1 = W1 x1 in one pool dispatch (either may use a LUT). */
void spill_model_matvec2(spill_model *m, const spill_qmat *w0, const float *x0, const float *lut0,
                         float *y0, const spill_qmat *w1, const float *x1, const float *lut1,
                         float *y1);
/* spill_model_matvec2 with the inputs already quantised (act_q8): xq0/xq1
 * are used where the matrix has an integer path, else x0/x1 (f32). */
void spill_model_matvec2_xq(spill_model *m, const spill_qmat *w0, const float *x0,
                            const spill_k_xq *xq0, float *y0, const spill_qmat *w1,
                            const float *x1, const spill_k_xq *xq1, float *y1);
/* y[i] = w[i] x for n (1..SPILL_MODEL_MV_MAX) matrices of one input x (the
 * projections of one attention input), in one pool dispatch instead of
 * one per matrix; with act_q8 x is quantised once (in s.xq0). The bits
 * spill_model_matvec gives each matrix. */
#define SPILL_MODEL_MV_MAX 6
void spill_model_matvec_n(spill_model *m, int n, const spill_qmat *const *w, const float *x,
                          float *const *y);
/* A matvec set as a step of one parallel region (spill_model_run_steps):
 * y[i] = w[i] x for n (1..SPILL_MODEL_MV_MAX) matrices of one input, split
 * into the row tasks spill_model_matvec_n would run (one task for all when
 * the work is below par_min_weights or with one thread), each row through
 * the kernel and act_q8 input spill_model_matvec gives it: the same bits.
 * x need not hold its values at planning time: where act_q8 applies it is
 * quantised into xq_buf (xq_cap bytes) by spill_model_mvs_quantise, which
 * must run before the row tasks (a step of its own, or at planning time
 * when x is ready). */
typedef struct spill_model_mvs {
  int n;
  const spill_qmat *w[SPILL_MODEL_MV_MAX];
  const float *x;
  float *y[SPILL_MODEL_MV_MAX];
  uint8_t *xq_buf;   /* act_q8 form of x, or NULL: every matrix reads x in f32 */
  spill_k_xq xq;
  int use_xq[SPILL_MODEL_MV_MAX];
  int whole;         /* one task computes every row of every matrix */
  uint32_t rows_per_task;
  int start[SPILL_MODEL_MV_MAX + 1];
} spill_model_mvs;
/* Plans j; returns its task count (>= 1). */
int spill_model_mvs_plan(spill_model *m, spill_model_mvs *j, int n, const spill_qmat *const *w,
                         const float *x, float *const *y, uint8_t *xq_buf);
/* 1 when some matrix of j reads x's act_q8 form (spill_model_mvs_quantise has work). */
int spill_model_mvs_needs_xq(const spill_model_mvs *j);
/* Quantises x for the matrices that take it (no-op when none does). */
void spill_model_mvs_quantise(spill_model_mvs *j);
/* j's x, ready now, as src (planned and quantised on the same x) has it
 * quantised, or quantised here when src has no act_q8 form of it. */
void spill_model_mvs_share_xq(spill_model_mvs *j, const spill_model_mvs *src);
/* Task t of j (a spill_pool_fn); *r0, *r1 get the rows of matrix *mi it
 * computed (the whole task when j->whole: mi 0..n-1 all rows). */
void spill_model_mvs_task(void *ctx, int task, int thread);
void spill_model_mvs_task_rows(const spill_model_mvs *j, int task, int *mi, uint32_t *r0,
                               uint32_t *r1);
/* Runs the steps of one attention layer (or any dependent steps) as one
 * parallel region (spill_pool_run_steps: one fork-join), or on the caller
 * with one thread or split 0 (nothing in it worth a dispatch). */
void spill_model_run_steps(spill_model *m, const spill_pool_step *steps, int n, int split);
/* Runs fn over n_tasks independent tasks (e.g. attention heads) on the pool,
 * or inline when the total work (MACs) is below par_min_weights. */
void spill_model_run_tasks(spill_model *m, spill_pool_fn fn, void *ctx, int n_tasks,
                           uint64_t work);
/* rvq3 LUT of x (cols floats) for a codebook, split by groups across the pool. */
void spill_model_lut(spill_model *m, const float *codebook, const float *x, uint32_t cols,
                     float *lut);
/* y = W lut (rvq3) over all rows. */
void spill_model_rvq3_apply(spill_model *m, const spill_qmat *w, const float *lut, float *y);
/* int16-LUT path (m->rvq_q): builds the f32 LUT of x into lut and quantises it
 * into qlut (spill_k_qlut_rvq3_i16_bytes(cols)), groups split across the pool
 * (each task builds then quantises its own groups: bit-exact for any split). */
void spill_model_lut_q(spill_model *m, const float *codebook, const float *x, uint32_t cols,
                       float *lut, void *qlut);
/* y0 = W0 q0 and y1 = W1 q1 (w1 may be NULL) through spill_k_apply_rvq3_i16. */
void spill_model_rvq3_apply2_q(spill_model *m, const spill_qmat *w0, const void *q0, float *y0,
                               const spill_qmat *w1, const void *q1, float *y1);
/* RoPE (rotate-half) of v (d floats) with the cos/sin table cs (d/2 + d/2). */
void spill_model_rope_table(float *cs, int d, int pos, double theta);
void spill_model_rope_apply(float *v, int d, const float *cs);
/* The table with YaRN (factor > 1: frequencies ramped between theta^(-2i/d)
 * and it / factor over the correction range of beta_fast..beta_slow turns in
 * orig_ctx tokens, floored/ceiled as ggml's rope_yarn_corr_dims unless
 * unrounded, transformers' truncate false) and cos/sin
 * multiplied by mscale (docs/MODEL.md "ATTN GQA"). */
void spill_model_rope_table_yarn(float *cs, int d, int pos, double theta, double factor, int orig_ctx,
                                 double beta_fast, double beta_slow, double mscale, int unrounded);
void spill_model_softmax(float *x, int n);
/* softmax of x (n) with one more logit `sink` in the denominator only (gpt-oss). */
void spill_model_softmax_sink(float *x, int n, float sink);
/* 1 when layer l of a GQA model reads through a sliding window (arch.gqa.swa_*). */
static inline int spill_gqa_layer_swa(const spill_gqa_cfg *c, int l) {
  if (c->swa_window <= 0) return 0;
  return c->swa_pattern == 0 || l % c->swa_pattern < c->swa_pattern - 1;
}
static inline float spill_model_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float spill_model_silu(float x) { return x / (1.0f + expf(-x)); }
/* out (D) = down (act(gate h, up h)), h (D), act the arch's (SwiGLU or
 * SiTU); uses s.ff_g / s.ff_u. */
void spill_model_glu(spill_model *m, const spill_qmat *gate, const spill_qmat *up,
                     const spill_qmat *down, const float *h, float *out);
/* g (n) = act(g, u) as spill_model_glu computes it (the trunk's FFN and the
 * shared experts: SwiGLU with a scalar SiLU, SiTU, or gpt-oss's clamped
 * SwiGLU); not spill_model_act_mul's bits for SwiGLU. */
void spill_model_glu_act(const spill_model *m, float *g, const float *u, uint32_t n);
/* act_q8 for a row-split matvec run outside spill_model_matvec (the MoE
 * region's tasks): x quantised into buf (xq_cap bytes) as spill_model_matvec
 * would quantise it for w, returned as xq; NULL where spill_model_matvec
 * would take the f32 path (act_q8 off, no integer kernel for w's dtype,
 * x longer than the scratch). */
const spill_k_xq *spill_model_xq_input(const spill_model *m, const spill_qmat *w, const float *x,
                                       uint8_t *buf, spill_k_xq *xq);
/* Rows [r0, r1) of y = w x: through xq (from spill_model_xq_input for a
 * matrix of the same width) when it is given, else in f32: the bits
 * spill_model_matvec gives those rows. */
void spill_model_matvec_rows(const spill_qmat *w, const float *x, const spill_k_xq *xq, float *y,
                             uint32_t r0, uint32_t r1);
/* g (n) = act(g, u): the arch's gated activation of the routed experts
 * (SwiGLU through spill_k_silu_mul, or SiTU). */
void spill_model_act_mul(const spill_model *m, float *g, const float *u, uint32_t n);
/* AttnRes mix (docs/MODEL.md "Kimi K3 as released", MIX): out (D) = the
 * softmax-weighted sum of the n entries (stride apart) and v, each scored
 * by sum(rmsnorm(e) * score); n = 0 copies v. */
void spill_model_res_mix(const spill_model *m, const float *entries, size_t stride, int n,
                         const float *v, const float *score, float *out);

/* ---- the attention-kind table (attention_table.c) ---- */
#define SPILL_ATTN_KINDS 4
_Static_assert(SPILL_ATTN_GQA == 0 && SPILL_ATTN_MLA == 1 && SPILL_ATTN_KDA == 2 &&
                   SPILL_ATTN_GDN == SPILL_ATTN_KINDS - 1,
               "spill_attn_kind values index the attention table");

/* Scratch widths (floats) the attention kinds of a model need; each row
 * raises the ones it uses (model_memory.c carves the buffers). */
typedef struct spill_attn_dims {
  uint64_t q, kv;   /* q projection; k / v (or latent + rope key) */
  uint64_t heads;   /* query heads */
  uint64_t ohead;   /* concatenated head outputs */
  uint64_t rope;    /* cos/sin table */
  uint64_t cq, dc;  /* MLA q_lora, kv_lora */
  uint64_t kda, fa, kd; /* KDA H*d, max(gate ranks), head_dim */
} spill_attn_dims;

/* What a layer's sequence state is sized for: the layer (a kind's row may
 * size by it: GQA's sliding-window layers), the tokens of context and the
 * most tokens of one forward chunk (max_chunk >= 1; spec_max <= max_chunk);
 * swa_full: sliding-window layers keep ctx rows (spill_model_opts.swa_full_kv). */
typedef struct spill_state_geom {
  int layer;
  uint64_t ctx;
  uint64_t chunk;
  int swa_full;
} spill_state_geom;

/* Rows of a GQA layer's key cache (and of its value cache): ctx, or for a
 * sliding-window layer (spill_gqa_layer_swa; unless g->swa_full) a ring of
 * min(ctx, swa_window - 1 + chunk) rows holding position p in row p mod
 * rows. Why that many: a chunk of T <= chunk tokens at pos0 writes rows of
 * pos0..pos0+T-1, and after it the sequence may be cut back to any n >= pos0
 * (a verify chunk's rollback, spec_verify.c), whose next token reads keys
 * n+1-W..n; so the W - 1 positions before pos0 and the chunk's own T must
 * all still be there (attention_gqa.c, docs/MODEL.md "Sliding-window KV"). */
static inline uint64_t spill_gqa_kv_rows(const spill_arch *a, const spill_state_geom *g) {
  if (g->swa_full || !spill_gqa_layer_swa(&a->gqa, g->layer)) return g->ctx;
  const uint64_t r = (uint64_t)a->gqa.swa_window - 1 + (g->chunk > 0 ? g->chunk : 1);
  return r < g->ctx ? r : g->ctx;
}

/* One row per spill_attn_kind: everything that differs between kinds.
 * Adding an attention kind = a file with its row + one entry in
 * attention_table.c. */
struct spill_attn_ops {
  const char *name;
  /* Arch dimensions this kind relies on beyond the manifest's checks
   * (SPILL_E_FORMAT naming the section). */
  int (*check)(const spill_arch *a, spill_err *e);
  /* Floats of state of one layer for geometry g (saturating at UINT64_MAX):
   * part[0] the cache or recurrent state, part[1] the rings (KDA/GDN conv
   * rings, a GQA sliding-window layer's key/value ring; or 0). */
  void (*state_floats)(const spill_arch *a, const spill_state_geom *g, uint64_t part[2]);
  /* Points the layer's state views into its L->state. */
  void (*bind_state)(const spill_arch *a, const spill_state_geom *g, spill_layer_weights *L);
  /* 1: the state must be zero at a reset (recurrent); 0: it is only read
   * below n_past, so it is never cleared. */
  int reset_zero;
  /* Raises the scratch widths this kind needs. */
  void (*scratch)(const spill_arch *a, spill_attn_dims *d);
  /* Resolves and shape-checks layer l's attention tensors. */
  int (*load)(spill_model *m, int l, spill_err *e);
  /* out (D) = ATTN(l)(h (D), pos); updates the layer's state. */
  int (*run)(spill_model *m, int l, const float *h, int pos, float *out, spill_err *e);
  /* The part of a layer's state (geometry g) a continuation after n_past
   * tokens reads: up to SPILL_MODEL_STATE_SPANS spans [off, off + n) of
   * floats into L->state, in order; returns how many. What a saved session
   * holds (spill_session.c). */
  int (*live_state)(const spill_arch *a, const spill_state_geom *g, uint64_t n_past,
                    uint64_t off[SPILL_MODEL_STATE_SPANS], uint64_t n[SPILL_MODEL_STATE_SPANS]);
};
extern const spill_attn_ops spill_attn_gqa_ops, spill_attn_mla_ops, spill_attn_kda_ops,
    spill_attn_gdn_ops;
/* The row of an attention kind; NULL for a value out of range. */
const spill_attn_ops *spill_attn_kind_ops(int kind);

/* ---- forward.c, used by spec_verify.c ---- */
/* Runs one chunk of T <= max_chunk tokens at pos0 (no bookkeeping of n_past). */
int spill_model_forward_chunk(spill_model *m, const int *tokens, int T, int pos0, spill_err *e);
/* logits (vocab) of token t of the last chunk of T tokens: output norm (or
 * AttnRes output mix) and the output matrix. */
void spill_model_lm_head(spill_model *m, int t, int T, float *logits);

/* ---- moe.c ---- */
/* out (T, D) = MOE(l)(h (T, D)) for a chunk at pos0; x (T, D) is passed to the observer. */
int spill_model_moe(spill_model *m, int l, const float *x, const float *h, int T, int pos0,
                    float *out, spill_err *e);
/* Group-limited routing (DeepSeek): with n_group > 1, scores each group of
 * n_experts/n_group consecutive experts by its best (max) or two best (top2)
 * entries of sel, keeps the topk_group best groups (lower id on ties) and
 * sets every other group's entries of sel to -inf (or 0 with
 * group_mask_zero, as DeepSeek's modelling code). No-op otherwise. */
void spill_model_group_mask(const spill_moe_cfg *c, float *sel);

/* ---- model_memory.c: carving state and scratch (the sizes are model_memory.h's) ---- */
/* Carves the scratch for the model's options into base (NULL: measure
 * only), filling m->s; returns the bytes. */
uint64_t spill_model_carve_scratch(spill_model *m, void *base);

#ifdef __cplusplus
}
#endif
#endif
