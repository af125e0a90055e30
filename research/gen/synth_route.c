/* research/gen/synth_route.c: measures the expert-popularity curve of a plan.
 *
 * The routers of a synthetic model are what the generator writes (the same
 * call draws them), but real hidden states cannot be synthesised: the probe
 * feeds h = rmsnorm(g), g ~ N(0, I_D) per sample and layer, which is what the
 * router sees when ffn_norm ~ 1 and the residual stream is unstructured. It
 * applies the router of docs/MODEL.md (sigmoid + selection bias, or softmax)
 * and counts how often each (layer, expert) pair is selected; the coverage
 * curve is then "the fewest experts that carry X% of the selections" over
 * the pooled pairs, the same statistic as measured on the OLMoE trace.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "research/gen/synth_internal.h"

static int cmp_desc_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

double spill_gen_coverage_at(const uint64_t *counts, size_t n, double level) {
  if (n == 0) return 0;
  uint64_t *s = malloc(n * sizeof *s);
  if (!s) return 0;
  memcpy(s, counts, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_desc_u64);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += s[i];
  double out = 0;
  if (total > 0) {
    double want = level * (double)total, acc = 0;
    size_t i = 0;
    for (; i < n; i++) {
      acc += (double)s[i];
      if (acc >= want) break;
    }
    out = (double)(i < n ? i + 1 : n) / (double)n;
  }
  free(s);
  return out;
}

int spill_gen_trace_samples(int n_experts, int top_k) {
  /* the OLMoE trace: 299 tokens x top-8 over 64 experts per layer */
  const double per_pair = 299.0 * 8.0 / 64.0;
  int n = (int)ceil(per_pair * n_experts / (top_k > 0 ? top_k : 1));
  return n > 0 ? n : 1;
}

static int find_tensor(const spill_manifest *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return i;
  return -1;
}

int spill_gen_routing_coverage(const spill_gen_opts *o, int n_samples, int max_layers,
                               spill_gen_coverage *out, spill_err *e) {
  SPILL_FAIL_IF(e, !out, SPILL_E_INVALID_ARG, "gen coverage: no output");
  memset(out, 0, sizeof *out);
  spill_gen_plan_full p;
  SPILL_TRY(spill_gen_plan_full_make(o, &p, e));
  const spill_arch *a = &p.m.arch;
  const int D = a->d_model, E = a->moe.n_experts, k = a->moe.top_k;
  int layers = spill_arch_n_moe(a);
  if (max_layers > 0 && max_layers < layers) layers = max_layers;
  if (n_samples <= 0) n_samples = spill_gen_trace_samples(E, k);
  int rc = SPILL_OK;
  float *w = malloc((size_t)E * D * sizeof *w);
  float *b = calloc((size_t)E, sizeof *b);
  float *h = malloc((size_t)D * sizeof *h);
  uint64_t *counts = calloc((size_t)E * (layers ? layers : 1), sizeof *counts);
  float ts[SPILL_MAX_TOPK];
  int ti[SPILL_MAX_TOPK];
  if (!w || !b || !h || !counts) rc = spill_err_set(e, SPILL_E_NOMEM, "gen coverage: buffers");
  for (int li = 0; rc == SPILL_OK && li < layers; li++) {
    const int l = a->n_dense_layers + li;
    char name[SPILL_NAME_MAX];
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp", l);
    int wi = find_tensor(&p.m, name);
    if (wi < 0) {
      rc = spill_err_set(e, SPILL_E_INTERNAL, "gen coverage: no %s", name);
      break;
    }
    spill_gen_tensor_f32(&p, wi, w);
    snprintf(name, sizeof name, "blk.%d.exp_probs_b", l);
    int bi = find_tensor(&p.m, name);
    if (bi >= 0) spill_gen_tensor_f32(&p, bi, b);
    else memset(b, 0, (size_t)E * sizeof *b);
    spill_gen_rng r;
    spill_gen_rng_seed(&r, p.seed ^ 0x68696464656E0000ull, (uint64_t)l, 0x70726F6265ull);
    for (int n = 0; n < n_samples; n++) {
      double ss = 0;
      for (int c = 0; c < D; c++) {
        h[c] = spill_gen_gauss(&r);
        ss += (double)h[c] * h[c];
      }
      float inv = (float)(1.0 / sqrt(ss / D + a->norm_eps));
      for (int c = 0; c < D; c++) h[c] *= inv;
      int nt = 0;
      for (int x = 0; x < E; x++) {
        const float *row = w + (size_t)x * D;
        float s = 0;
        for (int c = 0; c < D; c++) s += row[c] * h[c];
        /* softmax is monotone: its top-k is the logits' top-k */
        float sel = a->moe.router == SPILL_ROUTER_SIGMOID ? 1.0f / (1.0f + expf(-s)) + b[x] : s;
        spill_gen_topk_push(ts, ti, &nt, k, sel, x);
      }
      for (int j = 0; j < nt; j++) counts[(size_t)li * E + ti[j]]++;
    }
  }
  if (rc == SPILL_OK) {
    size_t n = (size_t)E * layers;
    out->at50 = spill_gen_coverage_at(counts, n, 0.50);
    out->at80 = spill_gen_coverage_at(counts, n, 0.80);
    out->at95 = spill_gen_coverage_at(counts, n, 0.95);
    out->layers = layers;
    out->activations = (uint64_t)n_samples * k * layers;
  }
  free(w);
  free(b);
  free(h);
  free(counts);
  spill_gen_plan_full_free(&p);
  return rc;
}

/* ---------------------------------------------------------------- calibration */

/* Mean-field model of a layer's router: logits s_e ~ N(0, 1) iid (what
 * unit-rms hidden states give through N(0, 1/D) rows that are nearly
 * orthogonal), selection by sigmoid(s_e) + a z_e. Returns the sum of the
 * 50/80/95% coverage points over CAL_LAYERS pseudo-layers, each sampled at
 * the trace's density (spill_gen_trace_samples). Fixed seeds: common random numbers make it a smooth function of a,
 * and the result depends on (E, k, a) only. */
#define CAL_LAYERS 8

static double meanfield_coverage_sum(int E, int k, float a, uint64_t *counts, float *z,
                                     float *sig) {
  spill_gen_rng r;
  memset(counts, 0, (size_t)E * CAL_LAYERS * sizeof *counts);
  float ts[SPILL_MAX_TOPK];
  int ti[SPILL_MAX_TOPK];
  for (int l = 0; l < CAL_LAYERS; l++) {
    spill_gen_rng_seed(&r, 0x63616C6962ull, (uint64_t)l, (uint64_t)E * 131 + (uint64_t)k);
    for (int x = 0; x < E; x++) z[x] = spill_gen_bias_shape(spill_gen_gauss(&r));
    const int samples = spill_gen_trace_samples(E, k);
    for (int n = 0; n < samples; n++) {
      for (int x = 0; x < E; x++) sig[x] = 1.0f / (1.0f + expf(-spill_gen_gauss12(&r)));
      int nt = 0;
      for (int x = 0; x < E; x++) spill_gen_topk_push(ts, ti, &nt, k, sig[x] + a * z[x], x);
      for (int j = 0; j < nt; j++) counts[(size_t)l * E + ti[j]]++;
    }
  }
  size_t n = (size_t)E * CAL_LAYERS;
  return spill_gen_coverage_at(counts, n, 0.50) + spill_gen_coverage_at(counts, n, 0.80) +
         spill_gen_coverage_at(counts, n, 0.95);
}

int spill_gen_calibrate_bias(int n_experts, int top_k, float *scale, spill_err *e) {
  spill_gen_count_calibration();
  SPILL_FAIL_IF(e, n_experts <= 0 || top_k <= 0 || top_k > n_experts || top_k > SPILL_MAX_TOPK,
                SPILL_E_CONFIG, "gen: cannot calibrate %d experts top-%d", n_experts, top_k);
  const double target = SPILL_GEN_TARGET_AT50 + SPILL_GEN_TARGET_AT80 + SPILL_GEN_TARGET_AT95;
  uint64_t *counts = malloc((size_t)n_experts * CAL_LAYERS * sizeof *counts);
  float *z = malloc((size_t)n_experts * sizeof *z);
  float *sig = malloc((size_t)n_experts * sizeof *sig);
  int rc = SPILL_OK;
  if (!counts || !z || !sig) {
    rc = spill_err_set(e, SPILL_E_NOMEM, "gen: calibration buffers");
  } else {
    /* coverage sum falls as the bias spread grows; bisect on a in [0, 1] */
    float lo = 0.0f, hi = 1.0f;
    if (meanfield_coverage_sum(n_experts, top_k, 0.0f, counts, z, sig) <= target) {
      hi = 0.0f; /* already as skewed as the target (tiny E): no bias */
    } else {
      for (int it = 0; it < 18; it++) {
        float mid = 0.5f * (lo + hi);
        if (meanfield_coverage_sum(n_experts, top_k, mid, counts, z, sig) > target) lo = mid;
        else hi = mid;
      }
    }
    *scale = hi;
  }
  free(counts);
  free(z);
  free(sig);
  return rc;
}
