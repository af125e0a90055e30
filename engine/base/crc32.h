/* engine/base/crc32.h: CRC-32 with the zlib polynomial (0xEDB88320 reflected),
 * the checksum of every expert record and container file.
 *
 * spill_crc32(0, p, n) equals zlib's crc32(0, p, n); calls chain:
 * spill_crc32(spill_crc32(0, a, na), b, nb) == crc of a||b. The fastest
 * implementation the CPU supports (PCLMULQDQ folding, else slice-by-8) is
 * chosen once; all give identical results. Thread-safe. */
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
/* Name of the implementation spill_crc32 uses ("slice8", "pclmul"). */
const char *spill_crc32_impl(void);

#ifdef __cplusplus
}
#endif
#endif
