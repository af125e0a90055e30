/* engine/model/model_math.c: the maths every block of the forward pass
 * shares, below attention_*.c, moe.c and forward.c (which call it; it calls
 * none of them): matvecs split by rows across the pool (f32 input, rvq3
 * LUT, int16 LUT or act_q8 quantised input), independent tasks (attention
 * heads), rvq3 LUT builds, RoPE, softmax and the SwiGLU block.
 *
 * Parallelism: every matvec is split by rows into fixed chunks run on the
 * pool; a row is always computed whole by one thread with the kernel's fixed
 * summation order, so results are bit-identical for any thread count. Tiny
 * matvecs run on the caller (same numbers, no dispatch cost). Depends on
 * engine/quant (kernels) and thread_pool.c only.
 */
#include <math.h>
#include <string.h>

#include "engine/model/model_internal.h"

#define ROWS_PER_TASK_MIN 16u

/* ---- pool helpers ---- */

typedef struct mv_job {
  const spill_qmat *w[2];
  const float *x[2];
  const float *lut[2];
  const void *qlut[2]; /* int16 LUT (spill_k_apply_rvq3_i16), else NULL */
  const spill_k_xq *xq[2]; /* quantised input (act_q8, spill_k_matvec_xq), else NULL */
  float *y[2];
  uint32_t rows_per_task;
  int tasks0; /* tasks of matrix 0 */
} mv_job;

static void mv_task(void *ctx, int task, int thread) {
  (void)thread;
  const mv_job *j = ctx;
  const int mi = task < j->tasks0 ? 0 : 1;
  const int t = mi ? task - j->tasks0 : task;
  const spill_qmat *w = j->w[mi];
  const uint32_t r0 = (uint32_t)t * j->rows_per_task;
  uint32_t r1 = r0 + j->rows_per_task;
  if (r1 > w->rows) r1 = w->rows;
  if (j->xq[mi]) spill_k_matvec_xq(w, j->xq[mi], j->y[mi], r0, r1);
  else if (j->qlut[mi]) spill_k_apply_rvq3_i16(w, j->qlut[mi], j->y[mi], r0, r1);
  else if (j->lut[mi]) spill_k_apply_rvq3_f32(w, j->lut[mi], j->y[mi], r0, r1);
  else
    spill_k_matvec(w, j->x[mi], j->y[mi], r0, r1);
}

/* Rows per task: 4 tasks per thread, but at most o.task_max_weights per
 * task so a big matrix (the output matrix: 151936 x 2048, 330 MB as Q8_0)
 * is cut into many small tasks and a thread that is slower or descheduled
 * for a while leaves at most one small task behind (the tail wait of a
 * dispatch). A multiple of 4 (the q8/q4 kernels run 4 rows per pass). Rows
 * are computed whole by one thread, so the split never changes a bit. */
static uint32_t rows_per_task(const spill_model *m, uint32_t rows, uint32_t cols) {
  const uint32_t nt = (uint32_t)m->o.n_threads;
  uint32_t r = (rows + 4 * nt - 1) / (4 * nt);
  const uint32_t cap = cols ? (uint32_t)m->o.task_max_weights / cols : r;
  if (r > cap) r = cap;
  r = (r + 3) & ~3u;
  if (r < ROWS_PER_TASK_MIN) r = ROWS_PER_TASK_MIN;
  return r;
}

/* act_q8: the integer path for each matrix of the pair that has one. A
 * caller's quantised input is kept; otherwise x is quantised here, once
 * for both matrices when they share it, into xq (the caller's storage). */
static void quantise_inputs(spill_model *m, mv_job *j, spill_k_xq xq[2]) {
  uint8_t *buf[2] = {m->s.xq0, m->s.xq1};
  for (int mi = 0; mi < 2; mi++) {
    const spill_qmat *w = j->w[mi];
    if (!w || !j->x[mi] || j->lut[mi] || j->qlut[mi] || !spill_k_matvec_xq_ok(w)) {
      j->xq[mi] = NULL;
      continue;
    }
    if (j->xq[mi] && j->xq[mi]->n == w->cols) continue;
    j->xq[mi] = NULL;
    if (!m->o.act_q8 || spill_k_xq_bytes(w->cols) > m->s.xq_cap) continue;
    if (mi == 1 && j->xq[0] && j->x[0] == j->x[1] && j->w[0]->cols == w->cols) {
      j->xq[1] = j->xq[0];
      continue;
    }
    spill_k_xq_init(&xq[mi], buf[mi], w->cols);
    spill_k_xq_quantize(j->x[mi], &xq[mi]);
    j->xq[mi] = &xq[mi];
  }
}

static void run_mv(spill_model *m, mv_job *jp) {
  mv_job j = *jp;
  spill_k_xq xq[2];
  quantise_inputs(m, &j, xq);
  const spill_qmat *w0 = j.w[0], *w1 = j.w[1];
  const uint64_t work = (uint64_t)w0->rows * w0->cols + (w1 ? (uint64_t)w1->rows * w1->cols : 0);
  if (m->o.n_threads == 1 || work < (uint64_t)m->o.par_min_weights) {
    j.rows_per_task = w0->rows;
    j.tasks0 = 1;
    mv_task(&j, 0, 0);
    if (w1) {
      j.rows_per_task = w1->rows;
      mv_task(&j, 1, 0);
    }
    return;
  }
  uint32_t rows = w0->rows > (w1 ? w1->rows : 0) ? w0->rows : w1->rows;
  uint32_t cols = w0->cols > (w1 ? w1->cols : 0) ? w0->cols : w1->cols;
  j.rows_per_task = rows_per_task(m, rows, cols);
  j.tasks0 = (int)((w0->rows + j.rows_per_task - 1) / j.rows_per_task);
  const int tasks1 = w1 ? (int)((w1->rows + j.rows_per_task - 1) / j.rows_per_task) : 0;
  spill_pool_run(m->pool, mv_task, &j, j.tasks0 + tasks1);
}

void spill_model_matvec2(spill_model *m, const spill_qmat *w0, const float *x0, const float *lut0,
                         float *y0, const spill_qmat *w1, const float *x1, const float *lut1,
                         float *y1) {
  mv_job j = {{w0, w1}, {x0, x1}, {lut0, lut1}, {NULL, NULL}, {NULL, NULL}, {y0, y1}, 0, 0};
  run_mv(m, &j);
}

void spill_model_matvec2_xq(spill_model *m, const spill_qmat *w0, const float *x0,
                            const spill_k_xq *xq0, float *y0, const spill_qmat *w1,
                            const float *x1, const spill_k_xq *xq1, float *y1) {
  mv_job j = {{w0, w1}, {x0, x1}, {NULL, NULL}, {NULL, NULL}, {xq0, xq1}, {y0, y1}, 0, 0};
  run_mv(m, &j);
}

void spill_model_rvq3_apply2_q(spill_model *m, const spill_qmat *w0, const void *q0, float *y0,
                               const spill_qmat *w1, const void *q1, float *y1) {
  mv_job j = {{w0, w1}, {NULL, NULL}, {NULL, NULL}, {q0, q1}, {NULL, NULL}, {y0, y1}, 0, 0};
  run_mv(m, &j);
}

/* Up to SPILL_MODEL_MV_MAX matrices reading one input, in one dispatch:
 * task t of the job is rows [r0, r1) of the matrix whose task range holds
 * it (start[i] <= t < start[i + 1]). */
typedef struct mvn_job {
  int n;
  const spill_qmat *const *w;
  const float *x;
  const spill_k_xq *xq[SPILL_MODEL_MV_MAX]; /* x quantised for matrix i, or NULL */
  float *const *y;
  uint32_t rows_per_task;
  int start[SPILL_MODEL_MV_MAX + 1];
} mvn_job;

static void mvn_task(void *ctx, int task, int thread) {
  (void)thread;
  const mvn_job *j = ctx;
  int i = 0;
  while (task >= j->start[i + 1]) i++;
  const spill_qmat *w = j->w[i];
  const uint32_t r0 = (uint32_t)(task - j->start[i]) * j->rows_per_task;
  const uint32_t r1 = r0 + j->rows_per_task < w->rows ? r0 + j->rows_per_task : w->rows;
  spill_model_matvec_rows(w, j->x, j->xq[i], j->y[i], r0, r1);
}

void spill_model_matvec_n(spill_model *m, int n, const spill_qmat *const *w, const float *x,
                          float *const *y) {
  mvn_job j = {n, w, x, {NULL}, y, 0, {0}};
  /* act_q8: x quantised once (into xq0), used by every matrix with the
   * integer path: quantise_inputs' rule, so each matrix gets the input
   * spill_model_matvec would give it */
  spill_k_xq xq;
  const spill_k_xq *q = NULL;
  uint64_t work = 0;
  uint32_t rows = 0, cols = 0;
  for (int i = 0; i < n; i++) {
    if (!q) q = spill_model_xq_input(m, w[i], x, m->s.xq0, &xq);
    work += (uint64_t)w[i]->rows * w[i]->cols;
    if (w[i]->rows > rows) rows = w[i]->rows;
    if (w[i]->cols > cols) cols = w[i]->cols;
  }
  for (int i = 0; i < n; i++)
    j.xq[i] = q && q->n == w[i]->cols && spill_k_matvec_xq_ok(w[i]) ? q : NULL;
  if (m->o.n_threads == 1 || work < (uint64_t)m->o.par_min_weights) {
    for (int i = 0; i < n; i++) spill_model_matvec_rows(w[i], x, j.xq[i], y[i], 0, w[i]->rows);
    return;
  }
  j.rows_per_task = rows_per_task(m, rows, cols);
  for (int i = 0; i < n; i++)
    j.start[i + 1] = j.start[i] + (int)((w[i]->rows + j.rows_per_task - 1) / j.rows_per_task);
  spill_pool_run(m->pool, mvn_task, &j, j.start[n]);
}

void spill_model_run_tasks(spill_model *m, spill_pool_fn fn, void *ctx, int n_tasks,
                           uint64_t work) {
  if (m->o.n_threads == 1 || work < (uint64_t)m->o.par_min_weights) {
    for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    return;
  }
  spill_pool_run(m->pool, fn, ctx, n_tasks);
}

void spill_model_matvec(spill_model *m, const spill_qmat *w, const float *x, float *y) {
  spill_model_matvec2(m, w, x, NULL, y, NULL, NULL, NULL, NULL);
}

void spill_model_rvq3_apply(spill_model *m, const spill_qmat *w, const float *lut, float *y) {
  spill_model_matvec2(m, w, NULL, lut, y, NULL, NULL, NULL, NULL);
}

typedef struct lut_job {
  const float *cb, *x;
  uint32_t cols, groups_per_task, n_groups;
  float *lut;
  void *qlut; /* also quantise each task's groups into it (int16 path), or NULL */
} lut_job;

static void lut_task(void *ctx, int task, int thread) {
  (void)thread;
  const lut_job *j = ctx;
  const uint32_t g0 = (uint32_t)task * j->groups_per_task;
  uint32_t g1 = g0 + j->groups_per_task;
  if (g1 > j->n_groups) g1 = j->n_groups;
  spill_k_lut_rvq3_f32(j->cb, j->x, j->cols, j->lut, g0, g1);
  /* scale_g depends on group g alone, so quantising right after building
   * the same groups needs no barrier and is bit-exact for any split */
  if (j->qlut) spill_k_qlut_rvq3_i16(j->lut, j->cols, j->qlut, g0, g1);
}

static void run_lut(spill_model *m, lut_job j);

void spill_model_lut(spill_model *m, const float *codebook, const float *x, uint32_t cols,
                     float *lut) {
  lut_job j = {codebook, x, cols, 0, cols / SPILL_RVQ_DIM, lut, NULL};
  run_lut(m, j);
}

void spill_model_lut_q(spill_model *m, const float *codebook, const float *x, uint32_t cols,
                       float *lut, void *qlut) {
  lut_job j = {codebook, x, cols, 0, cols / SPILL_RVQ_DIM, lut, qlut};
  run_lut(m, j);
}

static void run_lut(spill_model *m, lut_job j) {
  /* work per group: 3 stages x 256 entries x 8 = 6144 MACs */
  if (m->o.n_threads == 1 || (uint64_t)j.n_groups * 6144u < (uint64_t)m->o.par_min_weights ||
      j.n_groups < 2) {
    j.groups_per_task = j.n_groups;
    lut_task(&j, 0, 0);
    return;
  }
  j.groups_per_task = (j.n_groups + 2 * (uint32_t)m->o.n_threads - 1) / (2 * (uint32_t)m->o.n_threads);
  spill_pool_run(m->pool, lut_task, &j, (int)((j.n_groups + j.groups_per_task - 1) / j.groups_per_task));
}

/* ---- small math ---- */

void spill_model_rope_table(float *cs, int d, int pos, double theta) {
  const int half = d / 2;
  for (int i = 0; i < half; i++) {
    const double f = pow(theta, -2.0 * i / (double)d);
    const double a = (double)pos * f;
    cs[i] = (float)cos(a);
    cs[half + i] = (float)sin(a);
  }
}

void spill_model_rope_apply(float *v, int d, const float *cs) {
  const int half = d / 2;
  for (int i = 0; i < half; i++) {
    const float c = cs[i], s = cs[half + i];
    const float v0 = v[i], v1 = v[i + half];
    v[i] = v0 * c - v1 * s;
    v[i + half] = v0 * s + v1 * c;
  }
}

void spill_model_rope_table_yarn(float *cs, int d, int pos, double theta, double factor, int orig_ctx,
                                 double beta_fast, double beta_slow, double mscale, int unrounded) {
  const int half = d / 2;
  double lo = 0, hi = 0;
  if (factor > 1.0) {
    const double lt = 2.0 * log(theta), tp = 2.0 * 3.14159265358979323846;
    lo = d * log(orig_ctx / (tp * beta_fast)) / lt;
    hi = d * log(orig_ctx / (tp * beta_slow)) / lt;
    if (!unrounded) {
      lo = floor(lo);
      hi = ceil(hi);
    }
    lo = lo < 0 ? 0 : lo;
    hi = hi > d - 1 ? d - 1 : hi;
  }
  for (int i = 0; i < half; i++) {
    double f = pow(theta, -2.0 * i / (double)d);
    if (factor > 1.0) {
      double r = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
      r = r < 0 ? 0 : r > 1 ? 1 : r;
      f = f * (1.0 - r) + f / factor * r;
    }
    const double a = (double)pos * f;
    cs[i] = (float)(cos(a) * mscale);
    cs[half + i] = (float)(sin(a) * mscale);
  }
}

void spill_model_softmax(float *x, int n) { spill_k_softmax(x, (uint32_t)n); }

/* As spill_k_softmax with the sink's exp joining the max and the sum (ggml's
 * soft_max with sinks: the sink is a logit of its own, unscaled). */
void spill_model_softmax_sink(float *x, int n, float sink) {
  float m = sink;
  for (int i = 0; i < n; i++)
    if (x[i] > m) m = x[i];
  float sum = 0.0f;
  for (int i = 0; i < n; i++) {
    x[i] = expf(x[i] - m);
    sum += x[i];
  }
  sum += expf(sink - m);
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; i++) x[i] *= inv;
}

/* ---- blocks ---- */

/* gpt-oss's clamped SwiGLU (ggml's swiglu_oai, alpha 1.702, limit 7) */
static void swiglu_oai_mul(float *g, const float *u, uint32_t n) {
  const float alpha = 1.702f, limit = 7.0f;
  for (uint32_t i = 0; i < n; i++) {
    const float x = g[i] < limit ? g[i] : limit;
    const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
    g[i] = x / (1.0f + expf(alpha * (-x))) * (y + 1.0f);
  }
}

/* SiTU (Kimi K3): beta tanh(g/beta) sigmoid(g) * (lambda > 0 ? lambda tanh(u/lambda) : u) */
static void situ_mul(float beta, float lambda, float *g, const float *u, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    const float a = beta * tanhf(g[i] / beta) * spill_model_sigmoid(g[i]);
    g[i] = a * (lambda > 0 ? lambda * tanhf(u[i] / lambda) : u[i]);
  }
}

void spill_model_glu_act(const spill_model *m, float *g, const float *u, uint32_t n) {
  if (m->a.activation == SPILL_ACT_SITU)
    situ_mul((float)m->a.situ_beta, (float)m->a.situ_lambda, g, u, n);
  else if (m->a.activation == SPILL_ACT_SWIGLU_OAI)
    swiglu_oai_mul(g, u, n);
  else
    for (uint32_t i = 0; i < n; i++) g[i] = spill_model_silu(g[i]) * u[i];
}

void spill_model_glu(spill_model *m, const spill_qmat *gate, const spill_qmat *up,
                     const spill_qmat *down, const float *h, float *out) {
  float *g = m->s.ff_g; /* (F) */
  float *u = m->s.ff_u; /* (F) */
  spill_model_matvec2(m, gate, h, NULL, g, up, h, NULL, u);
  spill_model_glu_act(m, g, u, gate->rows);
  spill_model_matvec(m, down, g, out);
}

const spill_k_xq *spill_model_xq_input(const spill_model *m, const spill_qmat *w, const float *x,
                                       uint8_t *buf, spill_k_xq *xq) {
  /* the rule of quantise_inputs: the integer path where the matrix has one
   * and act_q8 is on and the input fits the scratch */
  if (!m->o.act_q8 || !spill_k_matvec_xq_ok(w) || spill_k_xq_bytes(w->cols) > m->s.xq_cap ||
      !buf)
    return NULL;
  spill_k_xq_init(xq, buf, w->cols);
  spill_k_xq_quantize(x, xq);
  return xq;
}

void spill_model_matvec_rows(const spill_qmat *w, const float *x, const spill_k_xq *xq, float *y,
                             uint32_t r0, uint32_t r1) {
  if (xq && xq->n == w->cols && spill_k_matvec_xq_ok(w)) spill_k_matvec_xq(w, xq, y, r0, r1);
  else spill_k_matvec(w, x, y, r0, r1);
}

void spill_model_act_mul(const spill_model *m, float *g, const float *u, uint32_t n) {
  if (m->a.activation == SPILL_ACT_SITU)
    situ_mul((float)m->a.situ_beta, (float)m->a.situ_lambda, g, u, n);
  else if (m->a.activation == SPILL_ACT_SWIGLU_OAI)
    swiglu_oai_mul(g, u, n);
  else
    spill_k_silu_mul(g, u, n);
}

void spill_model_res_mix(const spill_model *m, const float *entries, size_t stride, int n,
                         const float *v, const float *score, float *out) {
  const int D = m->a.d_model;
  const float eps = (float)m->a.norm_eps;
  if (n == 0) {
    if (out != v) memcpy(out, v, (size_t)D * sizeof(float));
    return;
  }
  float p[SPILL_MAX_LAYERS + 1]; /* (n + 1) scores, then weights */
  for (int i = 0; i <= n; i++) {
    const float *x = i < n ? entries + (size_t)i * stride : v; /* (D) */
    float ss = 0.0f, dot = 0.0f;
    for (int j = 0; j < D; j++) {
      ss += x[j] * x[j];
      dot += x[j] * score[j];
    }
    p[i] = dot / sqrtf(ss / (float)D + eps); /* sum(rmsnorm(x) * score) */
  }
  spill_model_softmax(p, n + 1);
  for (int j = 0; j < D; j++) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += p[i] * entries[(size_t)i * stride + j];
    out[j] = acc + p[n] * v[j];
  }
}

/* ---- matvec sets as steps of one region (attention layers) ---- */

int spill_model_mvs_plan(spill_model *m, spill_model_mvs *j, int n, const spill_qmat *const *w,
                         const float *x, float *const *y, uint8_t *xq_buf) {
  memset(j, 0, sizeof *j);
  j->n = n;
  j->x = x;
  uint64_t work = 0;
  uint32_t rows = 0, cols = 0;
  int any_xq = 0;
  for (int i = 0; i < n; i++) {
    j->w[i] = w[i];
    j->y[i] = y[i];
    /* quantise_inputs' rule, as spill_model_xq_input applies it */
    j->use_xq[i] = m->o.act_q8 && spill_k_matvec_xq_ok(w[i]) &&
                   spill_k_xq_bytes(w[i]->cols) <= m->s.xq_cap && xq_buf;
    any_xq |= j->use_xq[i];
    work += (uint64_t)w[i]->rows * w[i]->cols;
    if (w[i]->rows > rows) rows = w[i]->rows;
    if (w[i]->cols > cols) cols = w[i]->cols;
  }
  j->xq_buf = any_xq ? xq_buf : NULL;
  if (j->xq_buf) spill_k_xq_init(&j->xq, j->xq_buf, cols);
  if (m->o.n_threads == 1 || work < (uint64_t)m->o.par_min_weights) {
    j->whole = 1;
    return 1;
  }
  j->rows_per_task = rows_per_task(m, rows, cols);
  for (int i = 0; i < n; i++)
    j->start[i + 1] = j->start[i] + (int)((w[i]->rows + j->rows_per_task - 1) / j->rows_per_task);
  return j->start[n];
}

int spill_model_mvs_needs_xq(const spill_model_mvs *j) { return j->xq_buf != NULL; }

void spill_model_mvs_quantise(spill_model_mvs *j) {
  if (j->xq_buf) spill_k_xq_quantize(j->x, &j->xq);
}

void spill_model_mvs_share_xq(spill_model_mvs *j, const spill_model_mvs *src) {
  /* the same input of the same width: src's quantised form is the one
   * spill_model_matvec would make for j's matrices; where src has none
   * (its matrices read f32) j quantises its own */
  if (!j->xq_buf) return;
  if (src->xq_buf && src->xq.n == j->xq.n) j->xq = src->xq;
  else spill_model_mvs_quantise(j);
}

void spill_model_mvs_task_rows(const spill_model_mvs *j, int task, int *mi, uint32_t *r0,
                               uint32_t *r1) {
  int i = 0;
  while (task >= j->start[i + 1]) i++;
  *mi = i;
  *r0 = (uint32_t)(task - j->start[i]) * j->rows_per_task;
  *r1 = *r0 + j->rows_per_task < j->w[i]->rows ? *r0 + j->rows_per_task : j->w[i]->rows;
}

void spill_model_mvs_task(void *ctx, int task, int thread) {
  (void)thread;
  const spill_model_mvs *j = ctx;
  if (j->whole) {
    for (int i = 0; i < j->n; i++)
      spill_model_matvec_rows(j->w[i], j->x, j->use_xq[i] ? &j->xq : NULL, j->y[i], 0,
                              j->w[i]->rows);
    return;
  }
  int i;
  uint32_t r0, r1;
  spill_model_mvs_task_rows(j, task, &i, &r0, &r1);
  spill_model_matvec_rows(j->w[i], j->x, j->use_xq[i] ? &j->xq : NULL, j->y[i], r0, r1);
}

void spill_model_run_steps(spill_model *m, const spill_pool_step *steps, int n, int split) {
  if (split && m->o.n_threads > 1) {
    spill_pool_run_steps(m->pool, steps, n);
    return;
  }
  for (int i = 0; i < n; i++)
    for (int t = 0; t < steps[i].n_tasks; t++) steps[i].fn(steps[i].ctx, t, 0);
}
