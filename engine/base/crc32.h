/* engine/base/crc32.h: CRC-32 with the zlib polynomial (0xEDB88320 reflected),
 * the checksum of every expert record and container file.
 *
 * spill_crc32(0, p, n) equals zlib's crc32(0, p, n); calls chain:
 * spill_crc32(spill_crc32(0, a, na), b, nb) == crc of a||b. The fastest
 * implementation the CPU supports (512-bit VPCLMULQDQ folding, else 128-bit
 * PCLMULQDQ folding, else slice-by-8) is chosen once by CPUID; all give
 * identical results. Thread-safe. */
#ifndef SPILL_BASE_CRC32_H
#define SPILL_BASE_CRC32_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint32_t spill_crc32(uint32_t crc, const void *buf, size_t len);
/* The portable implementations, always built (tests compare against them). */
uint32_t spill_crc32__bytewise(uint32_t crc, const void *buf, size_t len);
uint32_t spill_crc32__slice8(uint32_t crc, const void *buf, size_t len);
/* The folding implementations (same contract). Call one only when its
 * _available() returns 1: they execute PCLMULQDQ / AVX-512 + VPCLMULQDQ
 * instructions (tests and benchmarks compare them; spill_crc32 picks). */
int spill_crc32__pclmul_available(void);
uint32_t spill_crc32__pclmul(uint32_t crc, const void *buf, size_t len);
int spill_crc32__vpclmul_available(void);
uint32_t spill_crc32__vpclmul(uint32_t crc, const void *buf, size_t len);
/* Name of the implementation spill_crc32 uses ("slice8", "pclmul",
 * "vpclmul"). */
const char *spill_crc32_impl(void);

#ifdef __cplusplus
}
#endif
#endif
