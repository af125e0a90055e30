/* research/gen/synth_values.c: draws the values of trunk tensors and expert
 * records, directly in their stored encoding.
 *
 * Quantised tensors are never drawn in f32 and quantised: q8 values are
 * random bytes with -128 folded onto 0, q4 random nibbles with -8 folded onto
 * 0 (symmetric, so no rank-1 mean component appears), each group scaled by
 * sigma / std(values). rvq3 experts take uniform random codebook indices and
 * an f16 row scale sigma / sqrt(1 + 0.5^2 + 0.25^2) (the codebook stages have
 * std 1, 0.5, 0.25: a coarse stage and two shrinking residuals), times a
 * +-10% per-row jitter. This keeps generation at memory speed: a twin's
 * 37 GB of records take a few bytes of PRNG output per byte written.
 *
 * Every tensor uses the stream (seed, fnv1a(name)) and every record the
 * stream (seed, layer, expert), so values are independent of the order of
 * generation (see synth_internal.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/base/half.h"
#include "research/gen/synth_internal.h"

#define STREAM_TENSOR 0x74656E736F72ull /* "tensor" */
#define STREAM_SHARED_ROWS 0x726F75746572ull /* "router": the rows all MoE layers share */

void spill_gen_tensor_f32(const spill_gen_plan_full *p, int i, float *out) {
  const spill_tensor_info *t = &p->m.tensors[i];
  const spill_gen_init *in = &p->init[i];
  spill_gen_rng r;
  spill_gen_rng_seed(&r, p->seed, spill_gen_fnv1a(t->name), STREAM_TENSOR);
  const uint64_t rows = t->shape[0], cols = t->shape[1], n = rows * cols;
  switch (in->kind) {
    case SPILL_GEN_INIT_GAUSS:
      for (uint64_t k = 0; k < n; k++) out[k] = in->a * spill_gen_gauss(&r);
      break;
    case SPILL_GEN_INIT_PROBS_B: { /* sqrt(c) of the draw is the expert's topic's */
      const float c = p->chain, sa = sqrtf(c), sb = sqrtf(1.0f - c);
      for (uint64_t k = 0; k < n; k++) {
        float z = sb * spill_gen_gauss(&r);
        if (c > 0) {
          spill_gen_rng tr;
          spill_gen_rng_seed(&tr, p->seed, spill_gen_topic(p, in->layer, (int)k) + 1,
                             STREAM_SHARED_BIAS);
          z += sa * spill_gen_gauss(&tr);
        }
        out[k] = in->a * spill_gen_bias_shape(z);
      }
      break;
    }
    case SPILL_GEN_INIT_ROUTER: { /* (E, D): sqrt(1-c) own rows + sqrt(c) topic rows */
      const float c = p->chain;
      const float sb = in->a * sqrtf(1.0f - c), sa = in->a * sqrtf(c);
      for (uint64_t k = 0; k < n; k++) out[k] = sb * spill_gen_gauss(&r);
      for (uint64_t row = 0; c > 0 && row < rows; row++) {
        spill_gen_rng tr; /* the topic's row: its own stream, shared by every MoE layer */
        spill_gen_rng_seed(&tr, p->seed, spill_gen_topic(p, in->layer, (int)row) + 1,
                           STREAM_SHARED_ROWS);
        for (uint64_t col = 0; col < cols; col++) out[row * cols + col] += sa * spill_gen_gauss(&tr);
      }
      break;
    }
    case SPILL_GEN_INIT_NORM:
      for (uint64_t k = 0; k < n; k++) out[k] = 1.0f + in->a * spill_gen_gauss(&r);
      break;
    case SPILL_GEN_INIT_CONV: /* (channels, K): the newest tap dominates */
      for (uint64_t row = 0; row < rows; row++)
        for (uint64_t c = 0; c < cols; c++)
          out[row * cols + c] =
              in->a * (2.0f * spill_gen_unif(&r) - 1.0f) + (c == cols - 1 ? 0.5f : 0.0f);
      break;
    case SPILL_GEN_INIT_CONV_BOX: /* (channels, K): a moving sum, every tap a */
      for (uint64_t k = 0; k < n; k++) out[k] = in->a;
      break;
    case SPILL_GEN_INIT_NEG_A: /* ssm_a = -A, A in [1, 16] */
      for (uint64_t k = 0; k < n; k++) out[k] = -(1.0f + 15.0f * spill_gen_unif(&r));
      break;
    case SPILL_GEN_INIT_A_LOG: /* A = exp(a_log) in [1, 16] */
      for (uint64_t k = 0; k < n; k++) out[k] = logf(1.0f + 15.0f * spill_gen_unif(&r));
      break;
    case SPILL_GEN_INIT_DT_BIAS: { /* softplus(dt_bias) = dt in [a or 1e-3, 1e-1] */
      const float lo = logf(in->a > 0 ? in->a : 1e-3f), hi = logf(1e-1f);
      for (uint64_t k = 0; k < n; k++) {
        float dt = expf(lo + (hi - lo) * spill_gen_unif(&r));
        out[k] = dt + logf(-expm1f(-dt));
      }
      break;
    }
    case SPILL_GEN_INIT_DT_BIAS_LB: { /* sigmoid(dt_bias) = A dt / 5, A in [1, 16] */
      const float lo = logf(in->a > 0 ? in->a : 1e-3f), hi = logf(1e-1f);
      for (uint64_t k = 0; k < n; k++) {
        const float dt = expf(lo + (hi - lo) * spill_gen_unif(&r));
        const float q = (1.0f + 15.0f * spill_gen_unif(&r)) * dt / 5.0f; /* <= 0.32 */
        out[k] = logf(q / (1.0f - q));
      }
      break;
    }
    case SPILL_GEN_INIT_CODEBOOK: { /* (3, 256, 8), stage s with std 0.5^s */
      const int E = SPILL_RVQ_ENTRIES, V = SPILL_RVQ_DIM;
      for (int s = 0; s < SPILL_RVQ_STAGES; s++) {
        float *cb = out + (size_t)s * E * V;
        float sd = in->a * (s == 0 ? 1.0f : s == 1 ? 0.5f : 0.25f);
        for (int k = 0; k < E * V; k++) cb[k] = sd * spill_gen_gauss(&r);
        for (int j = 0; j < V; j++) { /* centre each dimension */
          float mean = 0;
          for (int k = 0; k < E; k++) mean += cb[k * V + j];
          mean /= (float)E;
          for (int k = 0; k < E; k++) cb[k * V + j] -= mean;
        }
      }
      break;
    }
  }
}

/* std of the integers drawn below */
#define Q8_STD 73.4677f /* -127..127 uniform, 0 twice as likely: sqrt(2 sum i^2 / 256) */
#define Q4_STD 4.1833f  /* -7..7 uniform, 0 twice as likely: sqrt(2 sum i^2 / 16) */
#define RVQ_STD 1.1456439f /* sqrt(1 + 0.25 + 0.0625) */

static void fill_random(spill_gen_rng *r, uint8_t *out, uint64_t n) {
  uint64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    uint64_t v = spill_gen_next(r);
    memcpy(out + k, &v, 8);
  }
  if (k < n) {
    uint64_t v = spill_gen_next(r);
    memcpy(out + k, &v, (size_t)(n - k));
  }
}

/* Per-group f16 scales sigma/std * (1 +- 10%). */
static void draw_scales(spill_gen_rng *r, uint64_t n, float scale, uint16_t *sc) {
  for (uint64_t s = 0; s < n; s++)
    sc[s] = spill_f32_to_f16(scale * (1.0f + 0.1f * spill_gen_gauss(r)));
}

/* q8 (rows, cols): int8 then f16 scales per group. Random bytes with -128
 * folded onto 0: symmetric, so no mean direction. Vectorisable passes. */
static void draw_q8(spill_gen_rng *r, uint64_t rows, uint64_t cols, uint32_t group, float sigma,
                    uint8_t *out) {
  const uint64_t n = rows * cols;
  fill_random(r, out, n);
  for (uint64_t k = 0; k < n; k++) out[k] = out[k] == 0x80 ? 0 : out[k];
  draw_scales(r, rows * (cols / group), sigma / Q8_STD, (uint16_t *)(void *)(out + n));
}

/* q4 (rows, cols): nibbles (element 2i low) then f16 scales per group.
 * Random nibbles with 0 (value -8) folded onto 8 (value 0): symmetric. */
static void draw_q4(spill_gen_rng *r, uint64_t rows, uint64_t cols, uint32_t group, float sigma,
                    uint8_t *out) {
  const uint64_t nb = rows * cols / 2;
  fill_random(r, out, nb);
  for (uint64_t k = 0; k < nb; k++) {
    uint8_t b = out[k];
    uint8_t lo = (b & 0x0F) ? 0 : 0x08, hi = (b & 0xF0) ? 0 : 0x80;
    out[k] = b | lo | hi;
  }
  draw_scales(r, rows * (cols / group), sigma / Q4_STD, (uint16_t *)(void *)(out + nb));
}

/* rvq3 (rows, cols): rows*(cols/8)*3 random index bytes, then f16 row scales. */
static void draw_rvq3(spill_gen_rng *r, uint64_t rows, uint64_t cols, float sigma,
                      uint8_t *out) {
  const uint64_t n = rows * (cols / 8) * 3;
  fill_random(r, out, n);
  uint16_t *sc = (uint16_t *)(out + n);
  for (uint64_t row = 0; row < rows; row++)
    sc[row] = spill_f32_to_f16(sigma / RVQ_STD * (1.0f + 0.1f * spill_gen_gauss(r)));
}

/* mxfp4 (rows, cols): 17-byte blocks of 32 weights, the e8m0 exponent then
 * 16 bytes of random e2m1 codes (symmetric: code c and c + 8 are +-v). One
 * power-of-two scale 2^(e-128) nearest to sigma / MXFP4_STD for the matrix
 * (ggml's doubled e2m1 table, docs/MODEL.md "MXFP4 experts"). */
#define MXFP4_STD 5.8523500f /* sqrt(2 (1+4+9+16+36+64+144) / 16) */
static void draw_mxfp4(spill_gen_rng *r, uint64_t rows, uint64_t cols, float sigma,
                       uint8_t *out) {
  const uint64_t nb = rows * (cols / 32);
  int ex = 128 + (int)lrintf(log2f(sigma / MXFP4_STD));
  if (ex < 1) ex = 1;
  if (ex > 254) ex = 254;
  for (uint64_t b = 0; b < nb; b++) {
    out[b * 17] = (uint8_t)ex;
    fill_random(r, out + b * 17 + 1, 16);
  }
}

static void draw_f32(spill_gen_rng *r, uint64_t n, float sigma, uint8_t *out) {
  for (uint64_t k = 0; k < n; k++) {
    float v = sigma * spill_gen_gauss(r);
    memcpy(out + 4 * k, &v, 4);
  }
}

int spill_gen_tensor_bytes(const spill_gen_plan_full *p, int i, uint8_t *out, spill_err *e) {
  const spill_tensor_info *t = &p->m.tensors[i];
  const spill_gen_init *in = &p->init[i];
  if (t->dtype == SPILL_DT_F32) {
    spill_gen_tensor_f32(p, i, (float *)(void *)out);
    return SPILL_OK;
  }
  SPILL_FAIL_IF(e, in->kind != SPILL_GEN_INIT_GAUSS, SPILL_E_INTERNAL,
                "gen: tensor %s: only Gaussian tensors are quantised", t->name);
  spill_gen_rng r;
  spill_gen_rng_seed(&r, p->seed, spill_gen_fnv1a(t->name), STREAM_TENSOR);
  if (t->dtype == SPILL_DT_Q8) {
    draw_q8(&r, t->shape[0], t->shape[1], t->group, in->a, out);
  } else if (t->dtype == SPILL_DT_Q4) {
    draw_q4(&r, t->shape[0], t->shape[1], t->group, in->a, out);
  } else {
    return spill_err_set(e, SPILL_E_INTERNAL, "gen: tensor %s: dtype %s not generated", t->name,
                         spill_dtype_name(t->dtype));
  }
  return SPILL_OK;
}

void spill_gen_expert_payload(const spill_gen_plan_full *p, int layer, uint32_t expert,
                              uint8_t *payload) {
  const spill_manifest *m = &p->m;
  spill_gen_rng r;
  spill_gen_rng_seed(&r, p->seed, (uint64_t)layer + 1, (uint64_t)expert + 1);
  memset(payload, 0, m->payload_bytes); /* alignment gaps */
  for (int s = 0; s < SPILL_SEC_COUNT; s++) {
    const spill_section_info *sec = &m->sect[s];
    uint8_t *dst = payload + (sec->offset - SPILL_RECORD_HEADER_BYTES);
    float sigma = p->expert_sigma_in;
    const float sb = spill_gen_reuse_scale(p->reuse_base);
    if (s == SPILL_SEC_DOWN)
      sigma = p->expert_sigma_out *
              (p->expert_out_latent ? 1.0f : 2.0f * sb * spill_gen_write_scale(p->write_rho, layer));
    switch (m->expert_dtype) {
      case SPILL_DT_RVQ3: draw_rvq3(&r, sec->rows, sec->cols, sigma, dst); break;
      case SPILL_DT_Q8: draw_q8(&r, sec->rows, sec->cols, m->expert_group, sigma, dst); break;
      case SPILL_DT_Q4: draw_q4(&r, sec->rows, sec->cols, m->expert_group, sigma, dst); break;
      case SPILL_DT_MXFP4: draw_mxfp4(&r, sec->rows, sec->cols, sigma, dst); break;
      default: draw_f32(&r, (uint64_t)sec->rows * sec->cols, sigma, dst); break;
    }
  }
}
