/* engine/import/source.c: source dtype traits, dequantisers to f32 and the
 * bounded pread used by both checkpoint readers.
 *
 * The ggml dequantisers follow ggml's dequantize_row_* operation for
 * operation (same products in the same order, f16 scales widened first), so
 * a value read here equals the value llama.cpp computes from the same block.
 */
#define _GNU_SOURCE
#include "engine/import/source.h"
#include "engine/quant/kernels_kquant.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "engine/base/half.h"
#include "engine/quant/kernels_mxfp4.h"
#include "engine/quant/kernels_q5.h"

static const spill_src_traits k_traits[SPILL_SRC_COUNT] = {
    [SPILL_SRC_F32] = {"F32", 1, 4},        [SPILL_SRC_F16] = {"F16", 1, 2},
    [SPILL_SRC_BF16] = {"BF16", 1, 2},      [SPILL_SRC_F8_E4M3] = {"F8_E4M3", 1, 1},
    [SPILL_SRC_Q8_0] = {"Q8_0", 32, 34},    [SPILL_SRC_Q4_0] = {"Q4_0", 32, 18},
    [SPILL_SRC_Q4_K] = {"Q4_K", 256, 144},  [SPILL_SRC_Q5_K] = {"Q5_K", 256, 176},
    [SPILL_SRC_Q6_K] = {"Q6_K", 256, 210},  [SPILL_SRC_MXFP4] = {"MXFP4", 32, 17},
    [SPILL_SRC_Q5_0] = {"Q5_0", 32, 22},    [SPILL_SRC_Q5_1] = {"Q5_1", 32, 24},
    [SPILL_SRC_OTHER] = {"other", 1, 1},
};

const spill_src_traits *spill_src_dtype_traits(spill_src_dtype dt) {
  if ((int)dt < 0 || dt >= SPILL_SRC_COUNT) return &k_traits[SPILL_SRC_OTHER];
  return &k_traits[dt];
}

uint64_t spill_src_numel(const spill_src_tensor *t) {
  uint64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

int spill_src_bytes(spill_src_dtype dt, uint64_t n, uint64_t *out, spill_err *e) {
  const spill_src_traits *tr = spill_src_dtype_traits(dt);
  SPILL_FAIL_IF(e, n % tr->block_elems != 0, SPILL_E_FORMAT,
                "%" "llu elements of %s are not a whole number of %u-element blocks",
                (unsigned long long)n, tr->name, tr->block_elems);
  uint64_t blocks = n / tr->block_elems;
  SPILL_FAIL_IF(e, blocks > UINT64_MAX / tr->block_bytes, SPILL_E_FORMAT,
                "%llu elements of %s: byte size overflows", (unsigned long long)n, tr->name);
  *out = blocks * tr->block_bytes;
  return SPILL_OK;
}

float spill_src_fp8_e4m3_to_f32(uint8_t b) {
  const int sign = b >> 7, exp = (b >> 3) & 0xF, man = b & 7;
  float v;
  if (exp == 0xF && man == 7) return NAN; /* e4m3fn: the only NaN pattern */
  if (exp == 0)
    v = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
  else
    v = ldexpf((float)(8 + man), exp - 10); /* (1 + man/8) * 2^(exp-7) */
  return sign ? -v : v;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* K-quant blocks: the quant module's scalar dequantiser (ggml's operations
 * in ggml's order), the same one the engine's kernels use */

int spill_src_dequant(spill_src_dtype dt, const void *src, uint64_t n, float *dst, spill_err *e) {
  const uint8_t *s = src;
  uint64_t bytes;
  SPILL_TRY(spill_src_bytes(dt, n, &bytes, e));
  switch (dt) {
    case SPILL_SRC_F32:
      memcpy(dst, s, (size_t)n * 4);
      return SPILL_OK;
    case SPILL_SRC_F16:
      for (uint64_t i = 0; i < n; i++) dst[i] = spill_f16_to_f32(rd16(s + 2 * i));
      return SPILL_OK;
    case SPILL_SRC_BF16:
      for (uint64_t i = 0; i < n; i++) dst[i] = spill_bf16_to_f32(rd16(s + 2 * i));
      return SPILL_OK;
    case SPILL_SRC_F8_E4M3:
      for (uint64_t i = 0; i < n; i++) dst[i] = spill_src_fp8_e4m3_to_f32(s[i]);
      return SPILL_OK;
    case SPILL_SRC_Q8_0:
      for (uint64_t b = 0; b < n / 32; b++, s += 34, dst += 32) {
        const float d = spill_f16_to_f32(rd16(s));
        for (int j = 0; j < 32; j++) dst[j] = (float)(int8_t)s[2 + j] * d;
      }
      return SPILL_OK;
    case SPILL_SRC_Q4_0:
      for (uint64_t b = 0; b < n / 32; b++, s += 18, dst += 32) {
        const float d = spill_f16_to_f32(rd16(s));
        for (int j = 0; j < 16; j++) {
          dst[j] = (float)((s[2 + j] & 0xF) - 8) * d;
          dst[j + 16] = (float)((s[2 + j] >> 4) - 8) * d;
        }
      }
      return SPILL_OK;
    case SPILL_SRC_Q4_K:
      spill_k_kquant_dequant_blocks(SPILL_DT_Q4_K, s, n / 256, dst);
      return SPILL_OK;
    case SPILL_SRC_Q5_K:
      spill_k_kquant_dequant_blocks(SPILL_DT_Q5_K, s, n / 256, dst);
      return SPILL_OK;
    case SPILL_SRC_Q6_K:
      spill_k_kquant_dequant_blocks(SPILL_DT_Q6_K, s, n / 256, dst);
      return SPILL_OK;
    case SPILL_SRC_MXFP4: /* the quant module's dequantiser (ggml's values) */
      for (uint64_t b = 0; b < n / 32; b++) spill_k_mxfp4_dequant_block(s + b * 17, dst + b * 32);
      return SPILL_OK;
    case SPILL_SRC_Q5_0: /* the quant module's dequantiser (ggml's operations) */
      spill_k_q5_dequant_blocks(SPILL_DT_Q5_0, s, n / 32, dst);
      return SPILL_OK;
    case SPILL_SRC_Q5_1:
      spill_k_q5_dequant_blocks(SPILL_DT_Q5_1, s, n / 32, dst);
      return SPILL_OK;
    default:
      return spill_err_set(e, SPILL_E_UNSUPPORTED, "source dtype not readable");
  }
}

int spill_src_pread(int fd, void *dst, size_t n, uint64_t off, const char *what, spill_err *e) {
  uint8_t *p = dst;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    SPILL_FAIL_IF(e, r < 0, SPILL_E_IO, "%s: read at %llu: %s", what, (unsigned long long)off,
                  strerror(errno));
    SPILL_FAIL_IF(e, r == 0, SPILL_E_SHORT_READ, "%s: truncated (end of file at %llu)", what,
                  (unsigned long long)off);
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return SPILL_OK;
}

int spill_src_mxfp4_from_ct(const uint8_t *packed, const uint8_t *scale, uint64_t rows, uint64_t cols,
                            uint8_t *out, const char *what, spill_err *e) {
  const uint64_t nb = cols / 32;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t b = 0; b < nb; b++) {
      const uint8_t *p = packed + r * (cols / 2) + b * 16; /* elements 32b .. 32b+31 */
      uint8_t *o = out + (r * nb + b) * 17;
      const uint8_t s = scale[r * nb + b];
      if (s == 255)
        return spill_err_set(e, SPILL_E_FORMAT,
                             "tensor %s: e8m0 scale 255 (NaN) at row %llu, block %llu (columns %llu..%llu)",
                             what, (unsigned long long)r, (unsigned long long)b, (unsigned long long)(32 * b),
                             (unsigned long long)(32 * b + 31));
      o[0] = s;
      for (int j = 0; j < 16; j++) { /* element j: byte j/2, nibble j&1; element j+16: byte 8+j/2 */
        const uint8_t lo = (uint8_t)((p[j / 2] >> (4 * (j & 1))) & 0xF);
        const uint8_t hi = (uint8_t)((p[8 + j / 2] >> (4 * (j & 1))) & 0xF);
        o[1 + j] = (uint8_t)(lo | (hi << 4));
      }
    }
  return SPILL_OK;
}

void spill_src_mxfp4_to_ct(const uint8_t *blocks, uint64_t rows, uint64_t cols, uint8_t *packed,
                           uint8_t *scale) {
  const uint64_t nb = cols / 32;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t b = 0; b < nb; b++) {
      const uint8_t *q = blocks + (r * nb + b) * 17;
      uint8_t c[32];
      for (int j = 0; j < 16; j++) {
        c[j] = q[1 + j] & 0xF;
        c[j + 16] = q[1 + j] >> 4;
      }
      scale[r * nb + b] = q[0];
      uint8_t *p = packed + r * (cols / 2) + b * 16;
      for (int i = 0; i < 16; i++) p[i] = (uint8_t)(c[2 * i] | (c[2 * i + 1] << 4));
    }
}
