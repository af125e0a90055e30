/* engine/base/crc32_vpclmul.c: the bulk of CRC-32 (zlib polynomial) by
 * carry-less multiplication folding on 512-bit registers (VPCLMULQDQ +
 * AVX-512F).
 *
 * The folding of crc32_pclmul.c, four times wider: each zmm holds four
 * 128-bit lanes, four zmm accumulators cover 256 consecutive bytes, and one
 * iteration folds every lane 256 bytes forward (constants x^(2048+32) and
 * x^(2048-32) mod P, bit-reflected and shifted as in Intel's paper) and XORs
 * in the next 256 bytes. The accumulators are then folded into one zmm
 * (64-byte steps, the constants crc32_pclmul.c folds its lanes by) and the
 * remaining 64-byte blocks are folded in. Folding keeps the 64-byte state
 * congruent to the message mod P, so the CRC register of the message equals
 * the register of the 64 state bytes from zero; crc32.c finishes with the
 * 128-bit path (spill_crc32__vpclmul). No dependency on the rest of base.
 *
 * Built with -mavx512f -mvpclmulqdq (engine/base/BUILD, this file only) and
 * called only after crc32.c's CPUID check (that file has no ISA flags).
 */
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__VPCLMULQDQ__)
#include <immintrin.h>

/* One fold of every 128-bit lane of x by the distance of k, plus y. */
static inline __m512i fold(__m512i x, __m512i k, __m512i y) {
  __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
  __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
  return _mm512_ternarylogic_epi64(lo, hi, y, 0x96); /* lo ^ hi ^ y */
}

/* reg: the raw (pre-inverted) CRC register; len: a multiple of 64, >= 256.
 * Writes the folded 64-byte state. */
void spill_crc32__vpclmul_fold(uint32_t reg, const uint8_t *p, size_t len, uint8_t state[64]) {
  /* (x^(2048+32) mod P)' << 1, (x^(2048-32) mod P)' << 1: 256-byte folds. */
  const __m512i k256 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01322d1430ll, 0x011542778all));
  /* 64-byte folds: k1, k2 of crc32_pclmul.c. */
  const __m512i k64 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x01c6e41596ll, 0x0154442bd4ll));

  __m512i x0 = _mm512_loadu_si512((const void *)(p + 0x00));
  __m512i x1 = _mm512_loadu_si512((const void *)(p + 0x40));
  __m512i x2 = _mm512_loadu_si512((const void *)(p + 0x80));
  __m512i x3 = _mm512_loadu_si512((const void *)(p + 0xc0));
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)reg)));
  p += 256;
  len -= 256;

  while (len >= 256) {
    x0 = fold(x0, k256, _mm512_loadu_si512((const void *)(p + 0x00)));
    x1 = fold(x1, k256, _mm512_loadu_si512((const void *)(p + 0x40)));
    x2 = fold(x2, k256, _mm512_loadu_si512((const void *)(p + 0x80)));
    x3 = fold(x3, k256, _mm512_loadu_si512((const void *)(p + 0xc0)));
    p += 256;
    len -= 256;
  }

  x0 = fold(x0, k64, x1);
  x0 = fold(x0, k64, x2);
  x0 = fold(x0, k64, x3);
  while (len >= 64) {
    x0 = fold(x0, k64, _mm512_loadu_si512((const void *)p));
    p += 64;
    len -= 64;
  }
  _mm512_storeu_si512((void *)state, x0);
}

int spill_crc32__vpclmul_built(void) { return 1; }

#else
/* Not x86-64, or a toolchain without the flags: never selected. */
void spill_crc32__vpclmul_fold(uint32_t reg, const uint8_t *p, size_t len, uint8_t state[64]) {
  (void)reg;
  (void)p;
  (void)len;
  (void)state;
  __builtin_trap();
}

int spill_crc32__vpclmul_built(void) { return 0; }
#endif
