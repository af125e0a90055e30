/* engine/base/crc32.c: portable CRC-32 (zlib polynomial).
 *
 * bytewise: one table lookup per byte (the reference).
 * slice8: eight 256-entry tables, eight bytes per step (Intel's slicing-by-8);
 * ~4-8x the bytewise rate. Tables are built once, thread-safely, with
 * pthread_once. The folding paths live in crc32_pclmul.c (128-bit
 * PCLMULQDQ) and crc32_vpclmul.c (512-bit VPCLMULQDQ, built with its ISA
 * flags); spill_crc32() picks the widest the CPU runs, checked here, in a
 * file compiled without those flags. */
#include "engine/base/crc32.h"

#include <pthread.h>
#include <string.h>

static uint32_t g_tab[8][256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    g_tab[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      g_tab[t][i] = (g_tab[t - 1][i] >> 8) ^ g_tab[0][g_tab[t - 1][i] & 0xFF];
}

uint32_t spill_crc32__bytewise(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&g_once, build_tables);
  const uint8_t *p = (const uint8_t *)buf;
  crc = ~crc;
  while (len--) crc = g_tab[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

uint32_t spill_crc32__slice8(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&g_once, build_tables);
  const uint8_t *p = (const uint8_t *)buf;
  crc = ~crc;
  while (len && ((uintptr_t)p & 7)) {
    crc = g_tab[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    len--;
  }
  while (len >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= crc;
    crc = g_tab[7][lo & 0xFF] ^ g_tab[6][(lo >> 8) & 0xFF] ^
          g_tab[5][(lo >> 16) & 0xFF] ^ g_tab[4][lo >> 24] ^
          g_tab[3][hi & 0xFF] ^ g_tab[2][(hi >> 8) & 0xFF] ^
          g_tab[1][(hi >> 16) & 0xFF] ^ g_tab[0][hi >> 24];
    p += 8;
    len -= 8;
  }
  while (len--) crc = g_tab[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

/* crc32_vpclmul.c: 1 if that file was compiled with its ISA flags; the
 * 512-bit fold of len bytes (a multiple of 64, >= 256) from the raw register
 * reg into a 64-byte state with the same CRC register from zero. */
int spill_crc32__vpclmul_built(void);
void spill_crc32__vpclmul_fold(uint32_t reg, const uint8_t *p, size_t len, uint8_t state[64]);

int spill_crc32__vpclmul_available(void) {
#if defined(__x86_64__)
  /* __builtin_cpu_supports("avx512f") includes the OS-enabled zmm state. */
  __builtin_cpu_init();
  return spill_crc32__vpclmul_built() && spill_crc32__pclmul_available() &&
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
#else
  return 0;
#endif
}

uint32_t spill_crc32__vpclmul(uint32_t crc, const void *buf, size_t len) {
  const uint8_t *p = (const uint8_t *)buf;
  if (len < 256) return spill_crc32__pclmul(crc, p, len);
  size_t body = len & ~(size_t)63;
  uint8_t state[64];
  spill_crc32__vpclmul_fold(~crc, p, body, state);
  /* register of the state from zero (pclmul with crc ~0 starts at 0) */
  uint32_t reg = ~spill_crc32__pclmul(0xFFFFFFFFu, state, sizeof state);
  return spill_crc32__pclmul(~reg, p + body, len - body);
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);
static crc_fn g_fast;
static const char *g_fast_name;
static pthread_once_t g_sel_once = PTHREAD_ONCE_INIT;

static void select_impl(void) {
  if (spill_crc32__vpclmul_available()) {
    g_fast = spill_crc32__vpclmul;
    g_fast_name = "vpclmul";
  } else if (spill_crc32__pclmul_available()) {
    g_fast = spill_crc32__pclmul;
    g_fast_name = "pclmul";
  } else {
    g_fast = spill_crc32__slice8;
    g_fast_name = "slice8";
  }
}

uint32_t spill_crc32(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&g_sel_once, select_impl);
  return g_fast(crc, buf, len);
}

const char *spill_crc32_impl(void) {
  pthread_once(&g_sel_once, select_impl);
  return g_fast_name;
}
