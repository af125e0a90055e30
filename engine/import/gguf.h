/* engine/import/gguf.h: reader of GGUF v2/v3 files (llama.cpp's format),
 * single or split (`NAME-00001-of-00003.gguf`): metadata key/values
 * (scalars, strings, arrays of either), tensor infos and the aligned data
 * section.
 *
 * Everything is untrusted: strings and arrays are bounded by the bytes left
 * in the file before anything is allocated (a 2^40-byte string in a 1 KB file
 * is an error, not an allocation), keys are at most 65535 bytes, arrays do not
 * nest, tensors have 1..4 dimensions of at most 2^62 elements with rows of
 * whole blocks, `general.alignment` is a u32 power of two, and every tensor
 * lies aligned inside the data section without overlapping another. Unknown
 * ggml types are an error naming the tensor. Errors name the file (and key
 * or tensor). Also the metadata API of the tokenizer (tokenizer.ggml.*).
 * Thread safety: a handle is immutable after open; reads use pread.
 */
#ifndef SPILL_IMPORT_GGUF_H
#define SPILL_IMPORT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/status.h"
#include "engine/import/source.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF value types (as stored). */
typedef enum spill_gguf_type {
  SPILL_GGUF_U8 = 0,
  SPILL_GGUF_I8 = 1,
  SPILL_GGUF_U16 = 2,
  SPILL_GGUF_I16 = 3,
  SPILL_GGUF_U32 = 4,
  SPILL_GGUF_I32 = 5,
  SPILL_GGUF_F32 = 6,
  SPILL_GGUF_BOOL = 7,
  SPILL_GGUF_STRING = 8,
  SPILL_GGUF_ARRAY = 9,
  SPILL_GGUF_U64 = 10,
  SPILL_GGUF_I64 = 11,
  SPILL_GGUF_F64 = 12,
  SPILL_GGUF_TYPE_COUNT
} spill_gguf_type;

#define SPILL_GGUF_KEY_MAX 65535u
#define SPILL_GGUF_MAX_SPLITS 999

/* One metadata entry. Scalars are arrays of one element. */
typedef struct spill_gguf_kv {
  char *key;               /* NUL-terminated */
  spill_gguf_type type;    /* SPILL_GGUF_ARRAY for arrays */
  spill_gguf_type elem;    /* element type (== type for scalars) */
  uint64_t n;              /* element count */
  void *data;              /* numeric: n elements, host order; strings: NULL */
  char **str;              /* strings: n NUL-terminated copies (may contain NULs) */
  uint64_t *str_len;       /* strings: byte lengths */
} spill_gguf_kv;

typedef struct spill_gguf {
  int n_files;
  char **paths;            /* (n_files) */
  int *fds;                /* (n_files), -1 for a memory-parsed file */
  uint32_t version;
  uint32_t alignment;      /* of the first file */
  int n_kv;
  spill_gguf_kv *kv;       /* the first file's metadata, in file order */
  int n_tensors;
  spill_src_tensor *t;     /* all files' tensors, sorted by name */
  uint32_t *ggml_type;     /* parallel to t: the ggml type id */
} spill_gguf;

/* Opens a GGUF file; a name ending in -0000I-of-0000N.gguf opens all N
 * splits (checking split.no / split.count and that tensors are unique). */
int spill_gguf_open(const char *path, spill_gguf *g, spill_err *e);
/* Parses an in-memory GGUF file (the fuzz target's unit; no data reads). */
int spill_gguf_parse_mem(const uint8_t *buf, size_t len, const char *src, spill_gguf *g,
                         spill_err *e);
void spill_gguf_close(spill_gguf *g); /* NULL/zeroed fine */

/* Metadata. */
int spill_gguf_n_kv(const spill_gguf *g);
const spill_gguf_kv *spill_gguf_kv_at(const spill_gguf *g, int i); /* NULL if out of range */
const spill_gguf_kv *spill_gguf_find_kv(const spill_gguf *g, const char *key); /* or NULL */
/* Typed getters of scalar keys: SPILL_E_FORMAT naming the key when absent
 * (use find_kv to test), of the wrong type, or out of range. get_u64 takes
 * any integer type (non-negative); get_f64 any integer or float type. */
int spill_gguf_get_u64(const spill_gguf *g, const char *key, uint64_t *out, spill_err *e);
int spill_gguf_get_i64(const spill_gguf *g, const char *key, int64_t *out, spill_err *e);
int spill_gguf_get_f64(const spill_gguf *g, const char *key, double *out, spill_err *e);
int spill_gguf_get_bool(const spill_gguf *g, const char *key, int *out, spill_err *e);
/* String scalar: *s points into g (valid until close). */
int spill_gguf_get_str(const spill_gguf *g, const char *key, const char **s, uint64_t *len,
                       spill_err *e);
/* Element i of a numeric array as double / int64 (any numeric element type). */
int spill_gguf_arr_f64(const spill_gguf_kv *kv, uint64_t i, double *out, spill_err *e);
int spill_gguf_arr_i64(const spill_gguf_kv *kv, uint64_t i, int64_t *out, spill_err *e);

/* Tensors. */
const spill_src_tensor *spill_gguf_find(const spill_gguf *g, const char *name); /* or NULL */
/* Reads n bytes at byte offset off inside tensor t. */
int spill_gguf_read(const spill_gguf *g, const spill_src_tensor *t, uint64_t off, void *dst,
                    size_t n, spill_err *e);

#ifdef __cplusplus
}
#endif
#endif
