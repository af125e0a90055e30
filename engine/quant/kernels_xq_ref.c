/* engine/quant/kernels_xq_ref.c: the activation quantiser (Q8_0 and Q8_K
 * forms, one scalar implementation for every ISA) and the scalar __ref
 * integer-activation matvec whose arithmetic kernels_xq.h defines; the
 * __avx2 twin (kernels_xq_avx2.c) must match it bit for bit.
 */
#include <math.h>
#include <string.h>

#include "engine/base/half.h"
#include "engine/quant/kernels_isa.h"
#include "engine/quant/kernels_kquant.h"
#include "engine/quant/kernels_xq.h"
#include "engine/quant/kernels_xq_rows.h"

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

size_t spill_k_xq_bytes(uint32_t n) {
  size_t b = 0;
  if (n % 32 == 0) b += (size_t)n + (size_t)(n / 32) * 2 * sizeof(float);
  if (n % 256 == 0) b += (size_t)n + (size_t)(n / 256) * sizeof(float) + (size_t)(n / 16) * 2;
  return b + 16; /* alignment slack for the float/int16 arrays */
}

void spill_k_xq_init(spill_k_xq *xq, void *buf, uint32_t n) {
  uintptr_t p = ((uintptr_t)buf + 3) & ~(uintptr_t)3;
  memset(xq, 0, sizeof *xq);
  xq->n = n;
  if (n % 32 == 0) {
    xq->d32 = (float *)p;
    p += (size_t)(n / 32) * sizeof(float);
    xq->s32 = (float *)p;
    p += (size_t)(n / 32) * sizeof(float);
  }
  if (n % 256 == 0) {
    xq->d256 = (float *)p;
    p += (size_t)(n / 256) * sizeof(float);
    xq->bsum = (int16_t *)p;
    p += (size_t)(n / 16) * 2;
    xq->q256 = (int8_t *)p;
    p += n;
  }
  if (n % 32 == 0) xq->q32 = (int8_t *)p;
}

/* rint(x * s) as x86's cvtps2dq + packs give it: in range as is, saturated
 * to [-128, 127], and -128 for NaN or beyond int32 (tiny amax makes s
 * infinite); defined behaviour where a plain (int8_t) cast is not. */
static int8_t sat8(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return -128;
  return (int8_t)(v > 127.0f ? 127.0f : v < -128.0f ? -128.0f : v);
}

/* Q8_0 as ggml's x86 quantize_row_q8_0: d = amax/127 kept as f16, values
 * round-half-even(x * (127/amax)); *s the Q8_1 sum (kernels_xq.h). */
static void quant_q8_0(const float *x, int8_t *q, float *d, float *s) {
  float amax = 0.0f;
  int finite = 1;
  for (int i = 0; i < 32; i++) {
    const float a = fabsf(x[i]);
    if (!(a <= 3.4028235e38f)) finite = 0;
    else if (a > amax) amax = a;
  }
  if (!finite) {
    memset(q, 0, 32);
    *d = NAN;
    *s = NAN;
    return;
  }
  *d = spill_f16_to_f32(spill_f32_to_f16(amax / 127.0f));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int i = 0; i < 32; i++) {
    q[i] = sat8(rintf(x[i] * id));
    sum += q[i];
  }
  *s = spill_q8_1_sum(amax, sum);
}

/* Q8_K as ggml's quantize_row_q8_K_ref (the first element of largest |x|
 * sets the sign of the scale; values clamped to 127 only at the top). */
static void quant_q8_k(const float *x, int8_t *q, float *d, int16_t *bs) {
  float amax = 0.0f, max = 0.0f;
  int finite = 1;
  for (int i = 0; i < 256; i++) {
    const float a = fabsf(x[i]);
    if (!(a <= 3.4028235e38f)) finite = 0;
    else if (a > amax) {
      amax = a;
      max = x[i];
    }
  }
  if (!finite || amax == 0.0f) {
    memset(q, 0, 256);
    memset(bs, 0, 16 * sizeof *bs);
    *d = finite ? 0.0f : NAN;
    return;
  }
  const float iscale = -127.0f / max;
  for (int i = 0; i < 256; i++) {
    const float v = rintf(iscale * x[i]);
    q[i] = sat8(v > 127.0f ? 127.0f : v);
  }
  for (int j = 0; j < 16; j++) {
    int s = 0;
    for (int i = 0; i < 16; i++) s += q[16 * j + i];
    bs[j] = (int16_t)s;
  }
  *d = 1.0f / iscale;
}

void spill_k_xq_quantize__ref(const float *x, spill_k_xq *xq) {
  spill_k_xq_blocks(x, xq, quant_q8_0, quant_q8_k);
}

int spill_k_fits_q8q4_xq(const spill_qmat *w) {
  return w->group >= 32 && w->group % 32 == 0 && w->cols % w->group == 0;
}

int spill_k_fits_kquant_xq(const spill_qmat *w) { return w->cols % 256 == 0; }

/* The 6-bit scale and min of sub-block j of a Q4_K block (ggml's get_scale_min_k4). */
static void scale_min(int j, const uint8_t *q, int *d, int *m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/* The fixed f32 sum of 8 lanes, ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). */
static float hsum8(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* q4_k (five = 0, 144-byte blocks) and q5_k (five = 1, 176 bytes: 32 bytes
 * of high bits after the scales, element 64j+l gets 16 from bit 2j of
 * qh[l], element 64j+32+l from bit 2j+1), in the lane order of kernels_xq.h. */
static float row_q45k(const uint8_t *row, const spill_k_xq *xq, uint32_t cols, int five) {
  const size_t bb = spill_dtype_traits_of(five ? SPILL_DT_Q5_K : SPILL_DT_Q4_K)->block_bytes;
  float acc[8] = {0}, accm[4] = {0};
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * bb, *qh = blk + 16, *qs = blk + (five ? 48 : 16);
    const int8_t *x = xq->q256 + (size_t)b * 256;
    const int16_t *bs = xq->bsum + (size_t)b * 16;
    int32_t lane[8] = {0}, ml[4] = {0};
    for (int j = 0; j < 8; j++) {
      int sc, mn;
      scale_min(j, blk + 4, &sc, &mn);
      const uint8_t *q = qs + 32 * (j / 2);
      for (int l = 0; l < 32; l++) {
        const int h = five && (qh[l] >> j & 1) ? 16 : 0;
        lane[l / 4] += sc * ((((j & 1) ? q[l] >> 4 : q[l] & 0xF) + h) * x[32 * j + l]);
      }
      ml[j / 2] += mn * (bs[2 * j] + bs[2 * j + 1]);
    }
    const float dx = xq->d256[b];
    const float dall = dx * spill_f16_to_f32(rd16(blk)), dmin = dx * spill_f16_to_f32(rd16(blk + 2));
    for (int k = 0; k < 8; k++) acc[k] = fmaf(dall, (float)lane[k], acc[k]);
    for (int k = 0; k < 4; k++) accm[k] = fmaf(-dmin, (float)ml[k], accm[k]);
  }
  return hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

static float row_q6k(const uint8_t *row, const spill_k_xq *xq, uint32_t cols) {
  const size_t bb = spill_dtype_traits_of(SPILL_DT_Q6_K)->block_bytes;
  float acc = 0.0f;
  for (uint32_t b = 0; b < cols / 256; b++) {
    const uint8_t *blk = row + (size_t)b * bb;
    const int8_t *sc = (const int8_t *)(blk + 192);
    const int8_t *x = xq->q256 + (size_t)b * 256;
    int32_t sumi = 0;
    for (int e = 0; e < 256; e++) {
      const int half = e / 128, c = (e % 128) / 32, l = e % 32;
      const uint8_t lo = blk[64 * half + l + 32 * (c & 1)];
      const uint8_t hi = blk[128 + 32 * half + l];
      const int q = ((c < 2 ? lo & 0xF : lo >> 4) | (((hi >> (2 * c)) & 3) << 4)) - 32;
      sumi += sc[e / 16] * (q * x[e]);
    }
    acc += (xq->d256[b] * spill_f16_to_f32(rd16(blk + 208))) * (float)sumi;
  }
  return acc;
}

/* q8 / q4 (group % 32 == 0) against Q8_0, in the 8-lane order of kernels_xq.h. */
static float row_q8q4(const spill_qmat *w, uint32_t r, const spill_k_xq *xq) {
  const uint32_t cols = w->cols, g = w->group;
  const spill_k_u16_unaligned *s = w->scales + (size_t)r * (cols / g);
  float lane[8] = {0};
  for (uint32_t b = 0; b < cols / 32; b++) {
    int wv[32];
    if (w->dtype == SPILL_DT_Q8) {
      const int8_t *q = (const int8_t *)w->data + (size_t)r * cols + 32 * b;
      for (int i = 0; i < 32; i++) wv[i] = q[i];
    } else {
      const uint8_t *q = (const uint8_t *)w->data + ((size_t)r * cols + 32 * b) / 2;
      for (int i = 0; i < 16; i++) {
        wv[2 * i] = (q[i] & 0xF) - 8;
        wv[2 * i + 1] = (q[i] >> 4) - 8;
      }
    }
    const int8_t *x = xq->q32 + 32 * b;
    const float d = spill_f16_to_f32(s[32 * b / g]) * xq->d32[b];
    for (int k = 0; k < 8; k++) {
      const int32_t p = wv[4 * k] * x[4 * k] + wv[4 * k + 1] * x[4 * k + 1] +
                        wv[4 * k + 2] * x[4 * k + 2] + wv[4 * k + 3] * x[4 * k + 3];
      lane[k] = fmaf(d, (float)p, lane[k]);
    }
  }
  return hsum8(lane);
}

/* The table's rows (kernels_isa.h): a K-quant row starts at r x its
 * blocks' bytes (the dtype traits table). */
static const uint8_t *kq_row(const spill_qmat *w, uint32_t r) {
  return (const uint8_t *)w->data + (size_t)r * (w->cols / 256) * spill_dtype_traits_of(w->dtype)->block_bytes;
}

void spill_k_matvec_q8_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q8q4(w, r, xq);
}

void spill_k_matvec_q4_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q8q4(w, r, xq);
}

void spill_k_matvec_q4_k_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q45k(kq_row(w, r), xq, w->cols, 0);
}

void spill_k_matvec_q5_k_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q45k(kq_row(w, r), xq, w->cols, 1);
}

void spill_k_matvec_q6_k_xq__ref(const spill_qmat *w, const spill_k_xq *xq, float *y, uint32_t r0, uint32_t r1) {
  for (uint32_t r = r0; r < r1; r++) y[r] = row_q6k(kq_row(w, r), xq, w->cols);
}
