/* engine/base/crc32_pclmul.c: CRC-32 (zlib polynomial) by carry-less
 * multiplication folding (Intel, "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", 2009): four 128-bit lanes are folded 64 bytes
 * at a time, reduced to one lane, then to 32 bits with a Barrett reduction.
 * The folding constants are x^(k) mod P(x) for the reflected polynomial.
 * Inputs shorter than 64 bytes and the unaligned tail go to slice-by-8, so
 * the result equals spill_crc32__bytewise for every input (tested).
 * Compiled with the ISA enabled per function, so the file builds for any
 * x86-64 and is only called after a CPUID check. */
#include <stddef.h>
#include <stdint.h>

#include "engine/base/crc32.h"

#if defined(__x86_64__)
#include <immintrin.h>

int spill_crc32__pclmul_available(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

__attribute__((target("pclmul,sse4.1"))) static uint32_t fold_16(
    const uint8_t *p, size_t len, uint32_t crc) {
  /* len >= 64 and a multiple of 16; crc is the raw (pre-inverted) register. */
  static const uint64_t k1k2[2] __attribute__((aligned(16))) = {0x0154442bd4ull,
                                                                0x01c6e41596ull};
  static const uint64_t k3k4[2] __attribute__((aligned(16))) = {0x01751997d0ull,
                                                                0x00ccaa009eull};
  static const uint64_t k5k0[2] __attribute__((aligned(16))) = {0x0163cd6124ull, 0};
  static const uint64_t poly[2] __attribute__((aligned(16))) = {0x01db710641ull,
                                                                0x01f7011641ull};
  __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

  x1 = _mm_loadu_si128((const __m128i *)(p + 0x00));
  x2 = _mm_loadu_si128((const __m128i *)(p + 0x10));
  x3 = _mm_loadu_si128((const __m128i *)(p + 0x20));
  x4 = _mm_loadu_si128((const __m128i *)(p + 0x30));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
  x0 = _mm_load_si128((const __m128i *)k1k2);
  p += 64;
  len -= 64;

  while (len >= 64) {
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
    x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
    x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
    x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
    y5 = _mm_loadu_si128((const __m128i *)(p + 0x00));
    y6 = _mm_loadu_si128((const __m128i *)(p + 0x10));
    y7 = _mm_loadu_si128((const __m128i *)(p + 0x20));
    y8 = _mm_loadu_si128((const __m128i *)(p + 0x30));
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
    x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
    x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
    x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
    p += 64;
    len -= 64;
  }

  /* Fold the four lanes into one. */
  x0 = _mm_load_si128((const __m128i *)k3k4);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
  x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
  x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);

  while (len >= 16) {
    x2 = _mm_loadu_si128((const __m128i *)p);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    p += 16;
    len -= 16;
  }

  /* 128 -> 64 bits. */
  x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
  x3 = _mm_setr_epi32(~0, 0, ~0, 0);
  x1 = _mm_srli_si128(x1, 8);
  x1 = _mm_xor_si128(x1, x2);
  x0 = _mm_loadl_epi64((const __m128i *)k5k0);
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_and_si128(x1, x3);
  x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);

  /* Barrett reduction to 32 bits. */
  x0 = _mm_load_si128((const __m128i *)poly);
  x2 = _mm_and_si128(x1, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
  x2 = _mm_and_si128(x2, x3);
  x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
  x1 = _mm_xor_si128(x1, x2);
  return (uint32_t)_mm_extract_epi32(x1, 1);
}

uint32_t spill_crc32__pclmul(uint32_t crc, const void *buf, size_t len) {
  const uint8_t *p = (const uint8_t *)buf;
  if (len < 64) return spill_crc32__slice8(crc, p, len);
  size_t body = len & ~(size_t)15;
  uint32_t reg = fold_16(p, body, ~crc);
  return spill_crc32__slice8(~reg, p + body, len - body);
}

#else
int spill_crc32__pclmul_available(void) { return 0; }
uint32_t spill_crc32__pclmul(uint32_t crc, const void *buf, size_t len) {
  return spill_crc32__slice8(crc, buf, len);
}
#endif
