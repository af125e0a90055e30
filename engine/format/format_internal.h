/* engine/format/format_internal.h: helpers shared by the .c files of the
 * format module (not part of its API): little-endian field access, rounding,
 * CRC-32 combination, full-length pread/pwrite loops and the JSON-path error
 * fix-up used by the manifest parser. Nothing outside engine/format includes
 * this header.
 */
#ifndef SPILL_FORMAT_INTERNAL_H
#define SPILL_FORMAT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/base/alloc.h"
#include "engine/base/status.h"
#include "engine/format/container.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPILL_MANIFEST_FILE "manifest.json"
#define SPILL_TRUNK_FILE "trunk.bin"
#define SPILL_JSON_INT_MAX 9007199254740992LL /* 2^53 */

static inline void spill_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void spill_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void spill_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t spill_get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t spill_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
         ((uint32_t)p[3] << 24);
}
static inline uint64_t spill_get_u64(const uint8_t *p) {
  return (uint64_t)spill_get_u32(p) | ((uint64_t)spill_get_u32(p + 4) << 32);
}

/* Rounds v up to a multiple of the power of two a; returns 0 on overflow. */
static inline int spill_round_up_u64(uint64_t v, uint64_t a, uint64_t *out) {
  uint64_t r;
  if (!spill_add_u64(v, a - 1, &r)) return 0;
  *out = r & ~(a - 1);
  return 1;
}

/* CRC-32 of A||B from crc(A), crc(B) and len(B) (zlib's crc32_combine). */
uint32_t spill_fmt_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
/* Continues crc over n zero bytes. */
uint32_t spill_fmt_crc32_zeros(uint32_t crc, uint64_t n);
/* Whether n bytes at p are all zero. */
int spill_fmt_all_zero(const void *p, size_t n);

/* Reads/writes exactly n bytes at off (retrying EINTR and short transfers).
 * pread returns the bytes read (< n only at end of file) or -1 (errno set). */
ssize_t spill_fmt_pread_full(int fd, void *buf, size_t n, uint64_t off);
int spill_fmt_pwrite_full(int fd, const void *buf, size_t n, uint64_t off); /* 0 or -1 */

/* The bank file name of a layer ("experts-007.bin") into buf[SPILL_NAME_MAX]. */
void spill_fmt_bank_name(int layer, char buf[SPILL_NAME_MAX]);

/* ---- the manifest field table (manifest_fields.c) ---- */

struct cJSON;

/* The objects of manifest.json. */
typedef enum spill_mf_obj {
  SPILL_MF_ROOT, SPILL_MF_ARCH, SPILL_MF_GQA, SPILL_MF_MLA, SPILL_MF_YARN, SPILL_MF_KDA, SPILL_MF_GDN, SPILL_MF_MOE,
  SPILL_MF_TENSOR, SPILL_MF_EXPERTS, SPILL_MF_SECTION, SPILL_MF_BANK, SPILL_MF_FILE, SPILL_MF_N_OBJ
} spill_mf_obj;

typedef enum spill_mf_kind {
  SPILL_MF_INT,   /* int member; integer in [lo, hi] */
  SPILL_MF_NUM,   /* double member; finite number in [lo, hi] */
  SPILL_MF_POS,   /* double member; number in (0, hi] */
  SPILL_MF_BOOL,  /* int member; true / false */
  SPILL_MF_ENUM,  /* enum member; one of names[] (index = value) */
  SPILL_MF_STR,   /* char[max_len + 1] member; 1..max_len bytes */
  SPILL_MF_CUSTOM /* read and written by its object's code (listed for the key check) */
} spill_mf_kind;

enum {
  SPILL_MF_OPTIONAL = 1, /* absent = dflt; written only when != dflt (older files stay byte-identical) */
  SPILL_MF_EVEN = 2      /* an odd value is an error */
};

typedef struct spill_mf_field {
  spill_mf_obj obj;
  const char *key;
  spill_mf_kind kind;
  size_t off;         /* offsetof(spill_arch, member) for the typed kinds */
  double lo, hi;
  size_t cap;         /* (size_t)-1, or an int member: hi is at most its value + cap_delta */
  int cap_delta;
  int flags;          /* SPILL_MF_OPTIONAL | SPILL_MF_EVEN */
  double dflt;        /* SPILL_MF_OPTIONAL: the value when absent (enum: its index) */
  const char *const *names; /* SPILL_MF_ENUM, NULL-terminated */
  size_t max_len;     /* SPILL_MF_STR / SPILL_MF_ENUM */
  int min_version;    /* the key exists from this manifest version on */
} spill_mf_field;

extern const spill_mf_field spill_mf_fields[];
extern const int spill_mf_n_fields;

/* Rejects a key of o that is not a row of obj (for that manifest version). */
int spill_mf_only_keys(const struct cJSON *o, const char *path, spill_mf_obj obj, int version, spill_err *e);
/* The key check, then every typed row of obj read into a, in table order
 * (custom rows are left to the caller). Errors name "<path>.<key>". */
int spill_mf_read(const struct cJSON *o, const char *path, spill_mf_obj obj, spill_arch *a, spill_err *e);
/* Writes obj's rows of a into o in table order; a custom row calls
 * custom(ctx, o, key) (may be NULL). Returns nonzero if an allocation failed. */
typedef int (*spill_mf_custom_fn)(void *ctx, struct cJSON *o, const char *key);
int spill_mf_write(struct cJSON *o, spill_mf_obj obj, const spill_arch *a, spill_mf_custom_fn custom, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
